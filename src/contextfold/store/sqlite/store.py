"""SQLite store: one file, safe for many threads and many processes.

Every write is one ``BEGIN IMMEDIATE`` transaction: it takes the file's write
lock before reading what it depends on (the last seq, the fold version), so two
processes appending to one file queue behind each other instead of racing, and
any error rolls the whole write back. WAL mode lets readers go on meanwhile.

One connection serves the whole store behind a lock: SQLite runs one writer at a
time anyway, and a single connection leaves nothing behind when threads end.
Opening a file and translating driver errors to ``StoreError`` are ``connect``'s.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from contextfold.core.errors import (
    FoldConflict,
    InvalidInput,
    StoreError,
    ViewConflict,
)
from contextfold.core.folds import Fold, plan_commit
from contextfold.core.log import (
    ApiKey,
    LoggedMessage,
    NewMessage,
    SessionInfo,
    SessionRecord,
    ViewRecord,
)
from contextfold.store import rows
from contextfold.store.base import Abilities, Head, Quarantined, SearchHit
from contextfold.store.checks import (
    check_api_key,
    check_lease,
    check_listing,
    system_prompt,
    view_config_json,
)
from contextfold.store.search import (
    RoleJoin,
    fts5_search,
    search_scope,
    searched_terms,
)
from contextfold.store.sqlite import admin as admin
from contextfold.store.sqlite import sql as q
from contextfold.store.sqlite.connect import SYNCHRONOUS, Durability, connect, translated
from contextfold.store.sqlite.folds import SPAN_SQL, insert_fold
from contextfold.store.sqlite.log import append, not_found, one_row, read_path
from contextfold.store.tree import check_on_branch, check_seq, head_of, spans_near
from contextfold.store.wake import LocalWake, PollingWake, shared_wake

EVENTS_KEPT_S = 300.0
"""How long an announced event stays for other processes' polls (which read every second
or so): long enough for a process paused a while, short enough that the table stays small."""


class SQLiteStore:
    """The log and folds in one SQLite file, reopened with everything kept.

    ``durability`` says what a write survives once the call has returned. Both
    settings use WAL, and neither can leave the file corrupt:

    - ``"process"`` (default): ``synchronous=NORMAL``. The commit is in the
      WAL file, so it survives the process being killed; a power loss or an OS
      crash may lose the last commits. Nothing waits for the disk on a commit
      (only at checkpoints), which is why it is the fast one.
    - ``"full"``: ``synchronous=FULL``. Every commit waits for the disk to
      flush (fsync), so it survives a power loss too, at a cost per write.
    """

    abilities = Abilities(wake_across_processes=True, in_process=True, service=True)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: Durability = "process",
        timeout: float = 30.0,
    ) -> None:
        if not isinstance(durability, str) or durability not in SYNCHRONOUS:
            raise InvalidInput(
                f"durability must be one of {sorted(SYNCHRONOUS)}, not {durability!r}",
                field="durability",
            )
        self.path = os.fspath(path)
        self.durability = durability
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = connect(self.path, durability, timeout)

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock, translated(self.path):
            if self._conn is None:
                raise StoreError(f"store {self.path!r} is closed")
            yield self._conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One transaction holding the file's write lock; rolled back on any error."""
        with self._read() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                conn.rollback()
                raise

    @staticmethod
    def _require(conn: sqlite3.Connection, session_id: str) -> None:
        """For reads that found nothing: was there nothing, or no session?"""
        if conn.execute(q.EXISTS_SQL, (session_id,)).fetchone() is None:
            raise not_found(session_id)

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
        meta_json = rows.dumps(dict(meta or {}), field="meta")
        prompt = system_prompt(system)
        with self._write() as conn:
            conn.execute(q.CREATE_SESSION_SQL, (session_id, encoding, meta_json, time.time()))
            row = conn.execute(q.SESSION_SQL, (session_id,)).fetchone()
            if prompt:
                append(conn, session_id, prompt)
        return rows.session(row)

    def get_session(self, session_id: str) -> SessionRecord:
        with self._read() as conn:
            return rows.session(one_row(conn, q.SESSION_SQL, (session_id,), session_id))

    def list_sessions(
        self,
        prefix: str = "",
        *,
        after: str | None = None,
        limit: int | None = None,
        search: str | None = None,
    ) -> list[str]:
        check_listing(prefix, after, limit, search)
        with self._read() as conn:
            return admin.list_sessions(conn, prefix, after, limit, search)

    def session_info(self, session_id: str) -> SessionInfo:
        with self._read() as conn:
            return admin.session_info(conn, session_id)

    def delete_session(self, session_id: str) -> bool:
        with self._write() as conn:
            return admin.delete_session(conn, session_id)

    def append(
        self,
        session_id: str,
        batch: Sequence[NewMessage],
        *,
        parent: int | None = None,
        whole_keys: bool = False,
    ) -> list[LoggedMessage]:
        after = check_seq(parent, "parent")
        with self._write() as conn:
            return append(conn, session_id, batch, after, whole_keys=whole_keys)

    def links(self, session_id: str) -> list[tuple[int, int]]:
        with self._read() as conn:
            found = conn.execute(q.LINKS_SQL, (session_id,)).fetchall()
            if not found:
                self._require(conn, session_id)
        return [(int(seq), int(parent)) for seq, parent in found]

    def messages(
        self, session_id: str, start: int = 1, end: int | None = None
    ) -> list[LoggedMessage]:
        with self._read() as conn:
            if end is None:
                found = conn.execute(q.MESSAGES_FROM_SQL, (session_id, start)).fetchall()
            else:
                found = conn.execute(q.MESSAGES_BETWEEN_SQL, (session_id, start, end)).fetchall()
            if not found:
                self._require(conn, session_id)
        return [rows.logged(session_id, row) for row in found]

    def token_counts(self, session_id: str, start: int, end: int) -> list[tuple[int, int]]:
        with self._read() as conn:
            found = conn.execute(q.TOKEN_COUNTS_SQL, (session_id, start, end)).fetchall()
            if not found:
                self._require(conn, session_id)
        return [(int(seq), int(tokens)) for seq, tokens in found]

    def messages_at(self, session_id: str, seqs: Sequence[int]) -> list[LoggedMessage]:
        wanted = json.dumps(sorted({int(s) for s in seqs}))
        with self._read() as conn:
            found = conn.execute(q.MESSAGES_AT_SQL, (session_id, wanted)).fetchall()
            if not found:
                self._require(conn, session_id)
        return [rows.logged(session_id, row) for row in found]

    def messages_before(self, session_id: str, before: int, limit: int) -> list[LoggedMessage]:
        with self._read() as conn:
            # SQLite reads a negative LIMIT as "no limit", so none is asked for then.
            found = (
                conn.execute(q.MESSAGES_BEFORE_SQL, (session_id, before, limit)).fetchall()
                if limit > 0
                else []
            )
            if not found:
                self._require(conn, session_id)
        return [rows.logged(session_id, row) for row in found]

    def last_seq(self, session_id: str) -> int:
        with self._read() as conn:
            return int(one_row(conn, q.LAST_SEQ_SQL, (session_id,), session_id)[0] or 0)

    def last_seqs(self, session_ids: Sequence[str]) -> dict[str, int]:
        """The last seq of each of ``session_ids`` that exists, in one read (the wake's poll)."""
        with self._read() as conn:
            found = conn.execute(q.LAST_SEQS_SQL, (json.dumps(list(session_ids)),)).fetchall()
        return {str(sid): int(last or 0) for sid, last in found}

    def last_of_role(self, session_id: str, role: str) -> LoggedMessage | None:
        with self._read() as conn:
            row = conn.execute(q.LAST_OF_ROLE_SQL, (session_id, role)).fetchone()
            if row is None:
                self._require(conn, session_id)
        return None if row is None else rows.logged(session_id, row)

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
        with self._read() as conn:
            if not scope.terms:
                self._require(conn, session_id)
                return []
            held = {"session": session_id, "terms": json.dumps(scope.terms)}
            counts = conn.execute(q.TERM_COUNTS_SQL, held).fetchall()
            if not counts:
                raise not_found(session_id)
            searched = searched_terms(scope.terms, {t: n for _, t, n in counts if t is not None})
            if not searched.terms:
                return []
            joined = RoleJoin(q.SEARCH_ROLE_JOIN_SQL, {"session": session_id})
            return fts5_search(conn, counts[0][0], searched, limit, scope, joined)

    def keyed(self, session_id: str, keys: Sequence[str]) -> dict[str, LoggedMessage]:
        wanted = json.dumps(sorted(set(keys)))
        with self._read() as conn:
            found = conn.execute(q.KEYED_SQL, (session_id, wanted)).fetchall()
            if not found:
                self._require(conn, session_id)
        logged = [rows.logged(session_id, row) for row in found]
        return {str(m.key): m for m in logged}

    def folds(
        self,
        session_id: str,
        view: str,
        *,
        include_superseded: bool = False,
        known: Mapping[str, Fold] | None = None,
    ) -> list[Fold]:
        sql = q.ALL_FOLDS_SQL if include_superseded else q.ACTIVE_FOLDS_SQL
        ids = json.dumps(list(known or ()))
        with self._read() as conn:
            found = conn.execute(sql, (ids, session_id, view)).fetchall()
            if not found:
                self._require(conn, session_id)
        return [rows.fold_known(session_id, row, known) for row in found]

    def quarantine_fold(self, session_id: str, view: str, fold_id: str, reason: str) -> int:
        params = {"session": session_id, "view": view}
        with self._write() as conn:
            version = int(one_row(conn, q.FOLD_VERSION_SQL, params, session_id)[0] or 0)
            marked = conn.execute(q.QUARANTINE_SQL, (reason, session_id, view, fold_id)).rowcount
            if not marked:
                return version
            conn.execute(q.SET_VERSION_SQL, (session_id, view, version + 1))
        return version + 1

    def quarantined(self, session_id: str, view: str) -> list[Quarantined]:
        with self._read() as conn:
            found = conn.execute(q.QUARANTINED_SQL, (session_id, view)).fetchall()
            if not found:
                self._require(conn, session_id)
        return [Quarantined(str(fold_id), str(reason)) for fold_id, reason in found]

    def head(self, session_id: str, view: str, *, branch: int | None = None) -> Head:
        at = check_seq(branch, "branch")
        params = {"session": session_id, "view": view, "branch": at}
        with self._read() as conn:
            found = conn.execute(q.HEAD_SQL, params).fetchone()
            return head_of(found, session_id, at, lambda seq: read_path(conn, session_id, seq, ""))

    def commit_folds(
        self,
        session_id: str,
        view: str,
        folds: Sequence[Fold],
        expected_version: int,
        *,
        branch: int | None = None,
    ) -> int:
        encoded = [rows.fold_json(i, fold) for i, fold in enumerate(folds)]
        params = {"session": session_id, "view": view}
        at = check_seq(branch, "branch")
        with self._write() as conn:
            last_row, version_row = one_row(conn, q.FOLD_HEAD_SQL, params, session_id)
            last, version = int(last_row or 0), int(version_row or 0)
            if version != expected_version:
                raise FoldConflict(view, expected_version, version)
            branch_path = None if at is None else read_path(conn, session_id, at, "branch")
            check_on_branch(folds, branch_path)
            active = spans_near(conn.execute, SPAN_SQL, params, folds, branch_path)
            for (fold, gone), body_json in zip(
                plan_commit(active, view, folds, last), encoded, strict=True
            ):
                conn.executemany(q.SUPERSEDE_SQL, [(fold.id, fold_id) for fold_id in gone])
                insert_fold(conn, session_id, fold, body_json)
            conn.execute(q.SET_VERSION_SQL, (session_id, view, version + 1))
        return version + 1

    def put_view(
        self,
        session_id: str,
        name: str,
        config: Mapping[str, Any],
        expected_version: int | None = None,
    ) -> ViewRecord:
        config_json = view_config_json(name, config)
        params = {"session": session_id, "name": name}
        with self._write() as conn:
            version = int(one_row(conn, q.VIEW_VERSION_SQL, params, session_id)[0] or 0)
            if expected_version is not None and expected_version != version:
                raise ViewConflict(name, expected_version, version)
            now = time.time()
            conn.execute(q.PUT_VIEW_SQL, (session_id, name, config_json, version + 1, now))
        return ViewRecord(session_id, name, json.loads(config_json), version + 1, now)

    def get_view(self, session_id: str, name: str) -> ViewRecord | None:
        params = {"session": session_id, "name": name}
        with self._read() as conn:
            row = one_row(conn, q.GET_VIEW_SQL, params, session_id)
        return None if row[0] is None else rows.view(session_id, row)

    def list_views(self, session_id: str) -> list[ViewRecord]:
        with self._read() as conn:
            found = conn.execute(q.LIST_VIEWS_SQL, (session_id,)).fetchall()
            if not found:
                self._require(conn, session_id)
        return [rows.view(session_id, row) for row in found]

    def acquire_lease(self, session_id: str, view: str, owner: str, ttl_s: float = 60.0) -> bool:
        """Read and take the lease in one ``BEGIN IMMEDIATE``: the file's write lock
        makes the check and the take atomic across processes."""
        check_lease(owner, ttl_s)
        params = {"session": session_id, "view": view}
        with self._write() as conn:
            holder, expires_at = one_row(conn, q.LEASE_SQL, params, session_id)
            now = time.time()
            if holder is not None and holder != owner and expires_at > now:
                return False
            conn.execute(q.TAKE_LEASE_SQL, (session_id, view, owner, now + ttl_s))
        return True

    def release_lease(self, session_id: str, view: str, owner: str) -> bool:
        with self._write() as conn:
            gone = conn.execute(q.RELEASE_LEASE_SQL, (session_id, view, owner)).rowcount
            if not gone:
                self._require(conn, session_id)
        return gone > 0

    def put_api_key(self, key: ApiKey) -> None:
        check_api_key(key)
        with self._write() as conn:
            admin.put_api_key(conn, key)

    def get_api_key(self, key_id: str) -> ApiKey | None:
        with self._read() as conn:
            return admin.get_api_key(conn, key_id)

    def list_api_keys(self, tenant: str | None = None) -> list[ApiKey]:
        with self._read() as conn:
            return admin.list_api_keys(conn, tenant)

    def revoke_api_key(self, key_id: str) -> bool:
        with self._write() as conn:
            return admin.revoke_api_key(conn, key_id)

    def wake(self) -> LocalWake:
        """Appends to this file by any process: every handle on it here shares one poll."""
        return shared_wake(f"file:{os.path.realpath(self.path)}", self._polling)

    def _polling(self) -> PollingWake:
        return PollingWake(self.last_seqs, events=self)

    def put_event(self, session_id: str, origin: str, data: str) -> None:
        """Keep an event for the other processes' polls (``PollingWake``), and forget those
        older than ``EVENTS_KEPT_S``."""
        now = time.time()
        with self._write() as conn:
            conn.execute(q.PUT_EVENT_SQL, (session_id, origin, data, now))
            conn.execute(q.PRUNE_EVENTS_SQL, (now - EVENTS_KEPT_S,))

    def events_after(self, after: int) -> list[tuple[int, str, str, str]]:
        with self._read() as conn:
            found = conn.execute(q.EVENTS_AFTER_SQL, (after,)).fetchall()
        return [(int(i), str(s), str(o), str(d)) for i, s, o, d in found]

    def last_event_id(self) -> int:
        with self._read() as conn:
            return int(conn.execute(q.LAST_EVENT_SQL).fetchone()[0])

    def close(self) -> None:
        """Close the connection; later calls raise ``StoreError``."""
        with self._lock, translated(self.path):
            if self._conn is not None:
                self._conn.close()
                self._conn = None
