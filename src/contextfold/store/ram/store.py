"""In-memory store: the reference backend, and the one tests default to.

It hands out copies of what it keeps (messages, folds, view records), as a
database does, so a caller editing a returned dict never edits the log. Its
folds are read back through the same checks as a database row, so a fold
damaged in memory is reported (``DamagedFold``) instead of rendered.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from contextfold.core.branches import BranchPath, walk
from contextfold.core.errors import FoldConflict, InvalidInput, NotFound
from contextfold.core.folds import Fold, fold_copy, plan_commit
from contextfold.core.log import (
    LoggedMessage,
    NewMessage,
    SessionInfo,
    SessionRecord,
    ViewRecord,
    copied,
    copies,
    json_copy,
)
from contextfold.store.base import Abilities, Head, Quarantined, SearchHit
from contextfold.store.checks import (
    check_batch,
    check_listing,
    listed,
    resumed,
    system_prompt,
)
from contextfold.store.ram.folds import fold_id_of, readable
from contextfold.store.ram.keys import KeyRing
from contextfold.store.ram.log import calls_of, tail_of
from contextfold.store.ram.views import ViewShelf
from contextfold.store.search import MemoryIndex, search_scope
from contextfold.store.tree import check_on_branch, check_seq, missing, on_branch, run_start


class RAMStore(ViewShelf, KeyRing):
    """Everything in dicts behind one lock; gone when the process ends."""

    abilities = Abilities(in_process=True, service=True)

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._sessions: dict[str, SessionRecord] = {}
        self._log: dict[str, list[LoggedMessage]] = {}
        self._keys: dict[str, dict[str, LoggedMessage]] = {}
        self._calls: dict[str, set[str]] = {}
        self._last_by_role: dict[str, dict[str, LoggedMessage]] = {}
        self._last: dict[str, int] = {}
        self._tree: dict[str, dict[int, tuple[int, int]]] = {}
        self._folds: dict[tuple[str, str], list[Fold]] = {}
        self._quarantined: dict[tuple[str, str], dict[str, str]] = {}
        self._versions: dict[tuple[str, str], int] = {}
        self._leases: dict[tuple[str, str], tuple[str, float]] = {}
        self._views: dict[str, dict[str, ViewRecord]] = {}
        self._index = MemoryIndex()

    def create_session(
        self,
        session_id: str,
        *,
        encoding: str,
        meta: dict[str, Any] | None = None,
        system: NewMessage | None = None,
    ) -> SessionRecord:
        if not session_id:
            raise InvalidInput("session id must not be empty", field="session_id")
        prompt = system_prompt(system)
        with self._lock:
            if session_id not in self._sessions:
                self._sessions[session_id] = SessionRecord(
                    session_id, encoding, dict(meta or {}), time.time()
                )
                self._log[session_id] = []
                self._last[session_id] = 0
                self._tree[session_id] = {}
                self._keys[session_id] = {}
                self._calls[session_id] = set()
                self._last_by_role[session_id] = {}
                self._views[session_id] = {}
            if prompt:
                self._append(session_id, prompt, calls_of(prompt))
            return self._sessions[session_id]

    def get_session(self, session_id: str) -> SessionRecord:
        with self._lock:
            record = self._sessions.get(session_id)
        if record is None:
            raise NotFound(f"no session {session_id!r}")
        return record

    def list_sessions(
        self,
        prefix: str = "",
        *,
        after: str | None = None,
        limit: int | None = None,
        search: str | None = None,
    ) -> list[str]:
        check_listing(prefix, after, limit, search)
        with self._lock:
            ids = list(self._sessions)
        return listed(ids, prefix, after, limit, search)

    def session_info(self, session_id: str) -> SessionInfo:
        record = self.get_session(session_id)
        with self._lock:
            log = self._log[session_id]
            return SessionInfo(
                record.id,
                record.encoding,
                json_copy(record.meta),
                record.created_at,
                self._last[session_id],
                len(log),
                sum(m.tokens for m in log),
                log[-1].created_at if log else record.created_at,
            )

    def delete_session(self, session_id: str) -> bool:
        with self._lock:
            if self._sessions.pop(session_id, None) is None:
                return False
            for per_session in (
                self._log,
                self._keys,
                self._calls,
                self._last_by_role,
                self._last,
                self._tree,
                self._views,
            ):
                per_session.pop(session_id, None)
            self._index.drop(session_id)
            for per_view in (self._folds, self._quarantined, self._versions, self._leases):
                for key in [k for k in per_view if k[0] == session_id]:
                    del per_view[key]
            return True

    def append(
        self,
        session_id: str,
        batch: Sequence[NewMessage],
        *,
        parent: int | None = None,
        whole_keys: bool = False,
    ) -> list[LoggedMessage]:
        after = check_seq(parent, "parent")
        self.get_session(session_id)
        calls = calls_of(batch)
        with self._lock:
            return self._append(session_id, batch, calls, after, whole_keys)

    def links(self, session_id: str) -> list[tuple[int, int]]:
        self.get_session(session_id)
        with self._lock:
            return [(m.seq, m.parent or 0) for m in self._log[session_id]]

    def _append(
        self,
        session_id: str,
        batch: Sequence[NewMessage],
        calls: list[list[str]],
        parent: int | None = None,
        whole_keys: bool = False,
    ) -> list[LoggedMessage]:
        """Check the batch against its branch's tail and log it; the caller holds the lock."""
        log, keys, tree = self._log[session_id], self._keys[session_id], self._tree[session_id]
        after = (log[-1].seq if log else 0) if parent is None else parent
        if after and after not in tree:
            raise missing("parent", after)
        after = resumed(batch, keys, after) or after
        check_batch(
            tail_of(log, keys, self._calls[session_id], after, batch),
            batch,
            lambda: self._path(session_id, after).length,
            whole_keys=whole_keys,
        )
        run = tree[after][1] if after else 0
        out: list[LoggedMessage] = []
        fresh: list[LoggedMessage] = []
        added: dict[str, LoggedMessage] = {}
        now = time.time()
        for i, new in enumerate(batch):
            known = (keys.get(new.key) or added.get(new.key)) if new.key else None
            if known is not None:
                out.append(copied(known))
                continue
            seq = self._last[session_id] + len(fresh) + 1
            run = run_start(after, seq, run)
            tree[seq] = (after, run)
            logged = LoggedMessage(seq, json_copy(new.message), new.tokens, new.key, now, after)
            after = seq
            if new.key:
                added[new.key] = logged
            fresh.append(logged)
            out.append(copied(logged))
            self._calls[session_id].update(calls[i])
        self._index.add(session_id, ((m.seq, m.message) for m in fresh))
        log.extend(fresh)
        self._last[session_id] += len(fresh)
        keys.update(added)
        self._last_by_role[session_id].update((m.role, m) for m in fresh)
        return out

    def messages(
        self, session_id: str, start: int = 1, end: int | None = None
    ) -> list[LoggedMessage]:
        self.get_session(session_id)
        log = self._log[session_id]
        lo = bisect.bisect_left(log, start, key=_seq)
        hi = len(log) if end is None else bisect.bisect_right(log, end, key=_seq)
        return copies(log[lo:hi])

    def token_counts(self, session_id: str, start: int, end: int) -> list[tuple[int, int]]:
        self.get_session(session_id)
        log = self._log[session_id]
        lo = bisect.bisect_left(log, start, key=_seq)
        hi = bisect.bisect_right(log, end, key=_seq)
        return [(m.seq, m.tokens) for m in log[lo:hi]]

    def messages_at(self, session_id: str, seqs: Sequence[int]) -> list[LoggedMessage]:
        self.get_session(session_id)
        log = self._log[session_id]
        found = []
        for seq in sorted(set(seqs)):
            i = bisect.bisect_left(log, seq, key=_seq)
            if i < len(log) and log[i].seq == seq:
                found.append(log[i])
        return copies(found)

    def messages_before(self, session_id: str, before: int, limit: int) -> list[LoggedMessage]:
        self.get_session(session_id)
        log = self._log[session_id]
        hi = bisect.bisect_left(log, before, key=_seq)
        lo = max(hi - max(limit, 0), 0)
        return copies(log[lo:hi][::-1])

    def last_seq(self, session_id: str) -> int:
        self.get_session(session_id)
        return self._last[session_id]

    def last_of_role(self, session_id: str, role: str) -> LoggedMessage | None:
        self.get_session(session_id)
        with self._lock:
            found = self._last_by_role[session_id].get(role)
        return None if found is None else copied(found)

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
        scope = search_scope(query, limit, before, after, roles)
        self.get_session(session_id)
        if not scope.terms:
            return []
        with self._lock:
            return self._index.search(session_id, scope, limit)

    def keyed(self, session_id: str, keys: Sequence[str]) -> dict[str, LoggedMessage]:
        self.get_session(session_id)
        with self._lock:
            stored = self._keys[session_id]
            return {k: copied(stored[k]) for k in set(keys) if k in stored}

    def folds(
        self,
        session_id: str,
        view: str,
        *,
        include_superseded: bool = False,
        known: Mapping[str, Fold] | None = None,
    ) -> list[Fold]:
        self.get_session(session_id)
        with self._lock:
            kept = [
                (i, f)
                for i, f in enumerate(self._folds.get((session_id, view), []))
                if include_superseded or getattr(f, "superseded_by", None) is None
            ]
            gone = dict(self._quarantined.get((session_id, view), {}))
        # Folds are frozen and replaced, never edited: they are copied outside the
        # lock, so a background reader does not hold up a turn's append.
        out = readable(session_id, view, kept, gone, raising=True, known=known)
        return sorted(out, key=lambda f: (f.start, f.created_at))

    def quarantine_fold(self, session_id: str, view: str, fold_id: str, reason: str) -> int:
        self.get_session(session_id)
        with self._lock:
            key = (session_id, view)
            version = self._versions.get(key, 0)
            ids = [fold_id_of(item, i) for i, item in enumerate(self._folds.get(key, []))]
            marks = self._quarantined.setdefault(key, {})
            if fold_id not in ids or fold_id in marks:
                return version
            marks[fold_id] = reason
            self._versions[key] = version + 1
            return version + 1

    def quarantined(self, session_id: str, view: str) -> list[Quarantined]:
        self.get_session(session_id)
        with self._lock:
            marks = self._quarantined.get((session_id, view), {})
            return [Quarantined(fold_id, reason) for fold_id, reason in marks.items()]

    def commit_folds(
        self,
        session_id: str,
        view: str,
        folds: Sequence[Fold],
        expected_version: int,
        *,
        branch: int | None = None,
    ) -> int:
        at = check_seq(branch, "branch")
        self.get_session(session_id)
        with self._lock:
            branch_path = None if at is None else self._path(session_id, at, "branch")
            check_on_branch(folds, branch_path)
            key = (session_id, view)
            version = self._versions.get(key, 0)
            if version != expected_version:
                raise FoldConflict(view, expected_version, version)
            current = list(self._folds.get(key, []))
            stored = {fold_id_of(f, i) for i, f in enumerate(current)}
            if any(f.id in stored for f in folds):
                raise InvalidInput("fold id is already stored", field="id")
            marked = self._quarantined.get(key, {})
            found = readable(session_id, view, list(enumerate(current)), marked, raising=False)
            active = on_branch([f for f in found if f.superseded_by is None], branch_path)
            superseded: dict[str, str] = {}
            for fold, gone in plan_commit(active, view, folds, self._last[session_id]):
                superseded.update((old, fold.id) for old in gone)
                current.append(fold_copy(fold))
            self._folds[key] = [
                replace(f, superseded_by=superseded[f.id])
                if isinstance(f, Fold) and f.id in superseded
                else f
                for f in current
            ]
            self._versions[key] = version + 1
            return version + 1

    def head(self, session_id: str, view: str, *, branch: int | None = None) -> Head:
        at = check_seq(branch, "branch")
        self.get_session(session_id)
        with self._lock:
            record = self._views[session_id].get(view)
            log = self._log[session_id]
            newest = log[-1].seq if log else 0
            return Head(
                self._last[session_id] if at is None else at,
                self._versions.get((session_id, view), 0),
                0 if record is None else record.version,
                self._path(session_id, newest if at is None else at, "branch"),
            )

    def _path(self, session_id: str, head: int, field: str = "parent") -> BranchPath:
        """The branch ending at ``head``, a run at a time; the caller holds the lock."""
        tree = self._tree[session_id]
        if head and head not in tree:
            raise missing(field, head)

        def run_of(seq: int) -> tuple[int, int]:
            first = tree[seq][1]
            return first, tree[first][0]

        return walk(head, run_of)

    def close(self) -> None:
        """Nothing to release: the search index's in-memory database goes with the store."""


def _seq(logged: LoggedMessage) -> int:
    return logged.seq
