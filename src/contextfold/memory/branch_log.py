"""One branch of a session's log, read as if it were the whole log.

The engine (reading, rendering, recall, healing, the compaction cycle) reads
"the log" as a line of messages by seq. A branch is a line too: its messages
are the parent chain from its head, ascending in seq (``core.branches``).
``BranchLog`` is a ``Store`` over one branch: the reads keep to the branch's
path, folds are the branch's (those whose end it holds), and a commit names
the branch. Everything else passes through.

The path is read with the head (``Store.head``), once per read of the view,
and the reads after it keep to that path, so one render sees one branch even
when another is appended to meanwhile. Each thread keeps its own: a runner
compacting the view and a caller rendering it never mix theirs. A log without
branches is one run, and each read is the store's own read.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from contextfold.core.branches import BranchPath
from contextfold.core.folds import Fold
from contextfold.core.log import LoggedMessage, NewMessage, SessionRecord, ViewRecord
from contextfold.store.base import Abilities, Head, SearchHit, Store


class BranchLog:
    """The ``Store`` port over the branch ending at ``branch`` (None: the newest message's)."""

    def __init__(self, store: Store, session_id: str, branch: int | None) -> None:
        self.store = store
        self.session_id = session_id
        self.branch = branch
        self.abilities: Abilities = store.abilities
        self._seen = threading.local()

    def path(self) -> BranchPath:
        """The path this thread last read with the head (read now if it read none)."""
        path: BranchPath | None = getattr(self._seen, "path", None)
        if path is None:
            path = self.head(self.session_id, "").path
        return path

    def head(self, session_id: str, view: str, *, branch: int | None = None) -> Head:
        head = self.store.head(session_id, view, branch=self.branch if branch is None else branch)
        self._seen.path = head.path
        return head

    # -- the branch's messages ---------------------------------------------

    def messages(
        self, session_id: str, start: int = 1, end: int | None = None
    ) -> list[LoggedMessage]:
        runs = self.path().within(start, end)
        if not runs:
            return []
        out: list[LoggedMessage] = []
        for first, last in runs:
            out += self.store.messages(session_id, first, last)
        return out

    def messages_before(self, session_id: str, before: int, limit: int) -> list[LoggedMessage]:
        out: list[LoggedMessage] = []
        for first, last in reversed(self.path().runs):
            if len(out) >= limit:
                break
            if first >= before:
                continue
            top = min(before, last + 1)
            page = self.store.messages_before(session_id, top, min(limit - len(out), top - first))
            out += [m for m in page if m.seq >= first]
        return out

    def token_counts(self, session_id: str, start: int, end: int) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for first, last in self.path().within(start, end):
            out += self.store.token_counts(session_id, first, last)
        return out

    def messages_at(self, session_id: str, seqs: Sequence[int]) -> list[LoggedMessage]:
        path = self.path()
        return self.store.messages_at(session_id, [s for s in seqs if path.holds(s)])

    def last_seq(self, session_id: str) -> int:
        return self.path().head

    def last_of_role(self, session_id: str, role: str) -> LoggedMessage | None:
        """The branch's latest message of ``role``: the log's when the branch holds it,
        else the branch read backwards a page at a time."""
        path = self.path()
        latest = self.store.last_of_role(session_id, role)
        if latest is None or path.holds(latest.seq):
            return latest
        before = path.head + 1
        while before > 1:
            page = self.messages_before(session_id, before, _PAGE)
            for logged in page:
                if logged.role == role:
                    return logged
            if len(page) < _PAGE:
                return None
            before = page[-1].seq
        return None

    def search(
        self,
        session_id: str,
        query: str,
        *,
        limit: int = 20,
        before: int | None = None,
        after: int | None = None,
        roles: Collection[str] | None = None,
    ) -> list[SearchHit]:
        path = self.path()
        hits = self.store.search(
            session_id, query, limit=limit, before=before, after=after, roles=roles
        )
        return [hit for hit in hits if path.holds(hit.seq)]

    # -- the branch's folds -------------------------------------------------

    def folds(
        self,
        session_id: str,
        view: str,
        *,
        include_superseded: bool = False,
        known: Mapping[str, Fold] | None = None,
    ) -> list[Fold]:
        path = self.path()
        found = self.store.folds(
            session_id, view, include_superseded=include_superseded, known=known
        )
        return [fold for fold in found if path.holds(fold.end)]

    def commit_folds(
        self,
        session_id: str,
        view: str,
        folds: Sequence[Fold],
        expected_version: int,
        *,
        branch: int | None = None,
    ) -> int:
        at = self.path().head if branch is None else branch
        return self.store.commit_folds(session_id, view, folds, expected_version, branch=at)

    def quarantine_fold(self, session_id: str, view: str, fold_id: str, reason: str) -> int:
        return self.store.quarantine_fold(session_id, view, fold_id, reason)

    # -- passed through -----------------------------------------------------

    def create_session(
        self,
        session_id: str,
        *,
        encoding: str,
        meta: dict[str, Any] | None = None,
        system: NewMessage | None = None,
    ) -> SessionRecord:
        return self.store.create_session(session_id, encoding=encoding, meta=meta, system=system)

    def get_session(self, session_id: str) -> SessionRecord:
        return self.store.get_session(session_id)

    def delete_session(self, session_id: str) -> bool:
        return self.store.delete_session(session_id)

    def append(
        self,
        session_id: str,
        batch: Sequence[NewMessage],
        *,
        parent: int | None = None,
        whole_keys: bool = False,
    ) -> list[LoggedMessage]:
        at = self.path().head if parent is None else parent
        return self.store.append(session_id, batch, parent=at, whole_keys=whole_keys)

    def links(self, session_id: str) -> list[tuple[int, int]]:
        return self.store.links(session_id)

    def put_view(
        self,
        session_id: str,
        name: str,
        config: Mapping[str, Any],
        expected_version: int | None = None,
    ) -> ViewRecord:
        return self.store.put_view(session_id, name, config, expected_version)

    def get_view(self, session_id: str, name: str) -> ViewRecord | None:
        return self.store.get_view(session_id, name)

    def list_views(self, session_id: str) -> list[ViewRecord]:
        return self.store.list_views(session_id)

    def acquire_lease(self, session_id: str, view: str, owner: str, ttl_s: float = 60.0) -> bool:
        return self.store.acquire_lease(session_id, view, owner, ttl_s)

    def release_lease(self, session_id: str, view: str, owner: str) -> bool:
        return self.store.release_lease(session_id, view, owner)

    def close(self) -> None:
        """The store is the session's, and stays open."""


_PAGE = 256
