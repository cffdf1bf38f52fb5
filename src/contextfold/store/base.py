"""The store ports: what every backend promises, and to whom.

- ``Store`` is the library's port: only what ``memory/``, ``strategies/`` and
  ``runtime/`` call (the log, folds, views, leases, search).
- ``ServiceStore`` adds what the service alone asks (listings, session figures,
  the look-up of idempotency keys, API keys); every shipped backend is one.
- ``Abilities`` is what a backend declares it can do beyond the port (wake
  another process, answer without a network, serve the service); callers read
  it, never probe for methods.

Invariants, checked by ``contextfold.testing.store_contract`` against every backend:

- The log is append-only. ``seq`` runs 1, 2, 3... per session without gaps; a
  stored message never changes. An append is all-or-nothing.
- The log is a tree (``contextfold.core.branches``): every message has a
  ``parent``, the message before it on its branch (0 for a first one). An
  append names the parent of its first message, or continues the newest
  message's branch; each later message of the batch follows the one before
  it. A branch is the parent chain from its head; ``head`` reads it as
  ``BranchPath`` runs, and a log appended without parents is one run.
- What may follow what (``contextfold.core.order``: a tool result right after
  its call, once; the system prompt first; a key names one message) is checked
  by ``check_batch`` inside the append's write transaction, against the tail of
  the branch the batch continues (its parent chain), read under the same lock,
  so no concurrent append can slip in between.
  A batch breaking a rule raises ``InvalidInput`` and nothing of it is written.
- A message appended with an idempotency ``key`` already in the session is not
  stored again when it is the same message; the earlier record is returned in
  its place. Another message under a taken key is ``InvalidInput`` naming ``key``.
  A batch appended with ``whole_keys`` is stored whole or answered whole from
  its records: keys of it taken and others not is ``InvalidInput`` naming
  ``key``, decided inside the write, so two processes racing one request's
  keys store it once and never a part of a longer one.
- ``create_session`` with a system prompt creates the session with the prompt
  as message 1, or finds it with that prompt, in one transaction; a session
  with another prompt (or messages and none) is ``InvalidInput`` naming ``system``.
- Folds are per (session, view) and versioned: every successful commit bumps the
  view's version by one. ``commit_folds`` is atomic and refused with
  ``FoldConflict`` when the version is not the one the job was planned at, and
  with ``InvalidInput`` when a fold partly overlaps an active one of its
  branch (the folds whose end the branch holds). Folds a commit covers are
  marked superseded, never deleted.
- Views never see each other's folds.
- A fold found unfit to render (damaged, or at odds with the log) is quarantined
  by ``quarantine_fold``: kept and marked with the reason, never handed out by
  ``folds`` again, and the view's fold version moves so that caches and jobs
  planned over it notice. A fold row that cannot be read at all makes ``folds``
  raise ``DamagedFold`` naming it, so the caller can quarantine it.
- Stores hand out copies: editing a returned message, fold or record changes
  nothing stored.
- A seq once handed out is never handed out again, even if its row is deleted.
- A view's configuration is a JSON record with a version bumped by every
  ``put_view``; an update naming a stale ``expected_version`` is refused with
  ``ViewConflict`` and changes nothing.
- A (session, view) has at most one unexpired compaction lease. ``acquire_lease``
  takes a free or expired lease, or renews the caller's own, in one atomic
  step; an expired lease may be taken over, so a holder that died never blocks
  the view for longer than its ttl. Expiry is wall-clock time, so processes
  sharing a store agree on it. Leases never touch the log or the folds.
- ``delete_session`` removes a session whole (log, folds, views, leases), the
  only way anything logged goes away. A session created again under the same
  id starts a new log at seq 1.
- Every logged message is searchable from the append that logs it
  (``search``), within its own session only, until the session is deleted.
- (``ServiceStore``) Listings are ordered by id and paged by the last id seen
  (``after``), so a page never repeats or skips a session that existed throughout.
- (``ServiceStore``) API keys are stored by id with the hash of their secret,
  never the secret.
- ``abilities`` is honest: the contract checks each claim it makes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, cast, runtime_checkable

from contextfold.core.branches import BranchPath
from contextfold.core.errors import InvalidInput
from contextfold.core.folds import Fold
from contextfold.core.log import (
    ApiKey,
    LoggedMessage,
    NewMessage,
    SessionInfo,
    SessionRecord,
    ViewRecord,
)


class Head(NamedTuple):
    """A branch's last seq and path, and the view's fold and configuration versions."""

    last_seq: int
    fold_version: int
    view_version: int
    path: BranchPath = BranchPath()


class SearchHit(NamedTuple):
    """A logged message matching a search, and how well: higher scores rank first."""

    seq: int
    score: float


class Quarantined(NamedTuple):
    """A fold kept out of the view, and why."""

    fold_id: str
    reason: str


@dataclass(frozen=True)
class Abilities:
    """What a backend can do beyond the port, declared once; the contract checks each claim.

    A backend that declares nothing (``Abilities()``) is served by the library
    alone, in one process, with work offloaded to threads.
    """

    wake_across_processes: bool = False
    """``wake()`` (``contextfold.store.wake.WakingStore``) hands out a wake that hears
    appends made by other processes too (SQLite polls its file, PostgreSQL listens)."""
    in_process: bool = False
    """Answers from this process without waiting on a network (RAM, SQLite): a
    server may call it on its event loop instead of a worker thread."""
    service: bool = False
    """Implements ``ServiceStore``: what ``contextfold serve`` needs beside the library."""


@runtime_checkable
class Store(Protocol):
    """The library's port: what ``Memory``, views, compaction and runners call."""

    abilities: Abilities

    def create_session(
        self,
        session_id: str,
        *,
        encoding: str,
        meta: dict[str, Any] | None = None,
        system: NewMessage | None = None,
    ) -> SessionRecord:
        """Create a session; return the existing one if ``session_id`` is taken.

        ``system`` is logged as message 1 under ``SYSTEM_KEY`` in the same
        transaction, or found there; see the invariants above.
        """
        ...

    def get_session(self, session_id: str) -> SessionRecord:
        """The session, or ``NotFound``."""
        ...

    def delete_session(self, session_id: str) -> bool:
        """Remove the session and everything kept for it; False if there was none."""
        ...

    def append(
        self,
        session_id: str,
        batch: Sequence[NewMessage],
        *,
        parent: int | None = None,
        whole_keys: bool = False,
    ) -> list[LoggedMessage]:
        """Append atomically; one record a message, in order (earlier ones for known keys).

        The first message follows ``parent`` (a logged seq, or 0 to start a new
        root); None continues the branch of the newest message. A ``parent``
        not in the log is ``InvalidInput`` naming ``parent``. When the batch's
        leading messages are logged already under their keys, the first new one
        follows the last of them, so a batch resumed by another writer stays one chain.

        ``whole_keys``: the batch's keys go together (one request's), decided
        inside the write: every message needs a key, and they are taken all (by
        these messages: their records are returned, nothing is stored) or none
        (the batch is stored); some taken and some not is ``InvalidInput``
        naming ``key``, and nothing is stored.
        """
        ...

    def links(self, session_id: str) -> list[tuple[int, int]]:
        """``(seq, parent)`` of every logged message, oldest first: the tree, without
        the messages (what a listing of branches reads)."""
        ...

    def messages(
        self, session_id: str, start: int = 1, end: int | None = None
    ) -> list[LoggedMessage]:
        """Messages with ``start <= seq <= end``, oldest first."""
        ...

    def messages_before(self, session_id: str, before: int, limit: int) -> list[LoggedMessage]:
        """Up to ``limit`` messages with ``seq < before``, newest first (for render)."""
        ...

    def token_counts(self, session_id: str, start: int, end: int) -> list[tuple[int, int]]:
        """``(seq, tokens)`` of the messages with ``start <= seq <= end``, oldest first.

        The stored counts without the messages: what a fold saved is measured
        against its range of the log, which can be most of a long session.
        """
        ...

    def messages_at(self, session_id: str, seqs: Sequence[int]) -> list[LoggedMessage]:
        """The messages at these seqs, oldest first; a seq not in the log is left out.

        One read for scattered messages (a search's hits, for recall), where
        ``messages`` reads a range.
        """
        ...

    def last_seq(self, session_id: str) -> int:
        """The highest seq, 0 for an empty log."""
        ...

    def last_of_role(self, session_id: str, role: str) -> LoggedMessage | None: ...

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
        """The logged messages best matching ``query``, best first: those with ``after < seq
        < before`` (each bound when given) whose role is one of ``roles`` (any when None).

        ``query`` is plain text, never engine syntax: its words (letters and
        digits, stopwords dropped) are matched, any of them, against each
        message's text and tool calls (``contextfold.store.search``). A query
        without such words finds nothing.

        Only the query's rarest words are searched by, so that a search's time
        does not grow with the log: taken by how few of the session's messages
        hold them (ties by the word), for as long as those messages add up to at
        most ``search.CANDIDATES``, and always the rarest one; when even that
        one is in more than ``CANDIDATES`` messages, only the newest
        ``CANDIDATES`` of them are ranked. The bounds and roles are applied
        before that cut (the newest ``CANDIDATES`` are those in bounds and of the
        roles asked for): messages a filter leaves out never crowd out those
        it keeps. The counts are of the whole log of the session, never of another.
        Ties in score rank the newer message first.
        """
        ...

    def folds(
        self,
        session_id: str,
        view: str,
        *,
        include_superseded: bool = False,
        known: Mapping[str, Fold] | None = None,
    ) -> list[Fold]:
        """The view's folds ordered by start (superseded ones only on request).

        A committed fold never changes, so a fold whose id is in ``known`` (the
        caller's copy, as it read it before) is not read again: the caller's copy
        comes back, with its ``superseded_by`` as stored. Its row's start, end,
        placement and view must still agree with the copy, else ``DamagedFold``.
        """
        ...

    def quarantine_fold(self, session_id: str, view: str, fold_id: str, reason: str) -> int:
        """Keep the fold out of the view with ``reason``; the fold version after.

        The version moves by one when the fold was not quarantined yet, and
        stays when it was (or no such fold exists).
        """
        ...

    def commit_folds(
        self,
        session_id: str,
        view: str,
        folds: Sequence[Fold],
        expected_version: int,
        *,
        branch: int | None = None,
    ) -> int:
        """Commit folds atomically if the view is still at ``expected_version``; the new version.

        ``branch`` (a head seq) is the branch the folds were made on: they are
        checked against, and supersede, only the folds of that branch, and each
        must end on it. None: the whole log is one branch, as before branches.
        """
        ...

    def head(self, session_id: str, view: str, *, branch: int | None = None) -> Head:
        """A branch's last seq and path, and the view's fold and configuration versions.

        ``branch`` is a logged seq: the branch ending there. None: the branch
        of the newest message (``last_seq`` is then the log's, as it always
        was). What a cached render checks: when none moved, the last prompt
        still holds. A ``branch`` not in the log is ``InvalidInput`` naming ``branch``.
        """
        ...

    def put_view(
        self,
        session_id: str,
        name: str,
        config: Mapping[str, Any],
        expected_version: int | None = None,
    ) -> ViewRecord:
        """Store a view's configuration (JSON data), bumping its version by one.

        With ``expected_version`` the update is refused with ``ViewConflict``
        unless the stored version is that one (0: the view must be new).
        """
        ...

    def get_view(self, session_id: str, name: str) -> ViewRecord | None:
        """The stored view configuration, or None."""
        ...

    def list_views(self, session_id: str) -> list[ViewRecord]:
        """The session's stored views, by name."""
        ...

    def acquire_lease(self, session_id: str, view: str, owner: str, ttl_s: float = 60.0) -> bool:
        """Hold the view's compaction lease for ``ttl_s`` seconds from now.

        False, changing nothing, while another owner holds an unexpired lease.
        """
        ...

    def release_lease(self, session_id: str, view: str, owner: str) -> bool:
        """Give the lease up if ``owner`` holds it (expired or not); True when it did."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class ServiceStore(Store, Protocol):
    """The service's port: the library's, and listings, figures, key look-ups and API keys."""

    def list_sessions(
        self,
        prefix: str = "",
        *,
        after: str | None = None,
        limit: int | None = None,
        search: str | None = None,
    ) -> list[str]:
        """Ids starting with ``prefix`` and greater than ``after``, by id, at most ``limit``.

        ``search`` keeps the ids whose part after the prefix contains it, ASCII
        letters compared without case (every backend agrees on that; other
        characters must match exactly).
        """
        ...

    def session_info(self, session_id: str) -> SessionInfo:
        """The session with its counts and last activity, or ``NotFound``."""
        ...

    def keyed(self, session_id: str, keys: Sequence[str]) -> dict[str, LoggedMessage]:
        """The logged messages stored under any of these idempotency keys, by key.

        What a caller checks before appending under keys: which are taken, and
        by what (a retry is answered from them, a reused key is refused).
        """
        ...

    def put_api_key(self, key: ApiKey) -> None:
        """Store a new key; ``InvalidInput`` naming ``id`` if the id is taken."""
        ...

    def get_api_key(self, key_id: str) -> ApiKey | None: ...

    def list_api_keys(self, tenant: str | None = None) -> list[ApiKey]:
        """Every key (or the tenant's), by creation time, revoked ones included."""
        ...

    def revoke_api_key(self, key_id: str) -> bool:
        """Mark the key revoked; False if there is no such key or it was revoked already."""
        ...


SERVICE_METHODS = (
    "list_sessions",
    "session_info",
    "keyed",
    "put_api_key",
    "get_api_key",
    "list_api_keys",
    "revoke_api_key",
)
"""What ``ServiceStore`` adds to the library's port."""


def service_port(store: Store) -> ServiceStore:
    """``store`` as the service's port, when it declares and has it; else ``InvalidInput``
    naming ``store`` and what it lacks, so ``contextfold serve`` over a store written for
    the library only says so instead of failing on an attribute."""
    missing = [name for name in SERVICE_METHODS if not callable(getattr(store, name, None))]
    if missing or not store.abilities.service:
        lacks = f"it lacks {', '.join(missing)}" if missing else "it declares service=False"
        raise InvalidInput(
            f"the store {type(store).__name__} keeps no listings or API keys for the "
            f"service: {lacks}",
            field="store",
        )
    return cast(ServiceStore, store)
