"""SQLite store: one file, safe for many threads and many processes.

Every write is one ``BEGIN IMMEDIATE`` transaction: it takes the file's write
lock before reading what it depends on (the last seq, the fold version), so two
processes appending to one file queue behind each other instead of racing, and
any error rolls the whole write back. WAL mode lets readers go on meanwhile.

One connection serves the whole store behind a lock: SQLite runs one writer at a
time anyway, and a single connection leaves nothing behind when threads end.
Driver errors are translated to ``StoreError`` in ``_translated``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal

from contextfold.core.errors import (
    FoldConflict,
    InvalidInput,
    NotFound,
    StoreError,
    ViewConflict,
)
from contextfold.core.folds import Fold, FoldSpan, Span, plan_commit
from contextfold.core.log import (
    ApiKey,
    LoggedMessage,
    NewMessage,
    SessionInfo,
    SessionRecord,
    ViewRecord,
)
from contextfold.core.order import Tail, needs_calls, open_calls
from contextfold.store import rows
from contextfold.store.base import Abilities, Head, Quarantined, SearchHit
from contextfold.store.checks import (
    check_api_key,
    check_batch,
    check_lease,
    check_listing,
    system_prompt,
    view_config_json,
)
from contextfold.store.search import (
    FTS5_INSERT_SQL,
    fts5_search,
    index_rowid,
    index_text,
    search_terms,
    searched_terms,
    session_tag,
    tagged,
    term_counts,
)
from contextfold.store.sqlite import admin as admin
from contextfold.store.sqlite import sql as q
from contextfold.store.sqlite.migrations import check_ours, migrate
from contextfold.store.wake import LocalWake, PollingWake, shared_wake

Durability = Literal["process", "full"]
# What ``PRAGMA synchronous`` each durability sets (the class docstring says why).
SYNCHRONOUS: dict[str, str] = {"process": "NORMAL", "full": "FULL"}


@contextmanager
def _translated(path: str) -> Iterator[None]:
    """The one place driver errors become ``StoreError``, naming the file."""
    try:
        yield
    except sqlite3.Error as exc:
        raise StoreError(f"sqlite {path}: {exc}") from exc


def _not_found(session_id: str) -> NotFound:
    return NotFound(f"no session {session_id!r}")


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
        with _translated(self.path):
            conn = sqlite3.connect(
                self.path, timeout=timeout, isolation_level=None, check_same_thread=False
            )
            try:
                # Nothing is written (not even the journal mode) to a file that is not ours.
                check_ours(conn, self.path)
                _use_wal(conn, timeout)
                conn.execute(f"PRAGMA synchronous={SYNCHRONOUS[durability]}")
                conn.execute("PRAGMA foreign_keys=ON")
                migrate(conn, self.path)
            except BaseException:
                conn.close()
                raise
        self._conn: sqlite3.Connection | None = conn

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock, _translated(self.path):
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
            raise _not_found(session_id)

    @staticmethod
    def _row(
        conn: sqlite3.Connection, sql: str, params: Mapping[str, Any] | tuple[Any, ...], sid: str
    ) -> tuple[Any, ...]:
        """The one row of a statement over ``sessions``; none means an unknown session."""
        row: tuple[Any, ...] | None = conn.execute(sql, params).fetchone()
        if row is None:
            raise _not_found(sid)
        return row

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
                self._append(conn, session_id, prompt)
        return rows.session(row)

    def get_session(self, session_id: str) -> SessionRecord:
        with self._read() as conn:
            return rows.session(self._row(conn, q.SESSION_SQL, (session_id,), session_id))

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

    def append(self, session_id: str, batch: Sequence[NewMessage]) -> list[LoggedMessage]:
        with self._write() as conn:
            return self._append(conn, session_id, batch)

    def _append(
        self, conn: sqlite3.Connection, session_id: str, batch: Sequence[NewMessage]
    ) -> list[LoggedMessage]:
        """Check the batch against the log's tail and log it, inside the caller's write."""
        prepared = [rows.prepare(i, new) for i, new in enumerate(batch)]
        last, number = self._row(conn, q.APPEND_HEAD_SQL, (session_id,), session_id)
        seq = int(last or 0)
        known = self._keyed(conn, session_id, batch)
        check_batch(self._tail(conn, session_id, seq, batch, known), batch)
        tag = session_tag(number)
        now = time.time()
        out: list[LoggedMessage] = []
        texts: list[str] = []
        for new, role, message_json, calls in prepared:
            if new.key and new.key in known:
                out.append(known[new.key])
                continue
            seq += 1
            key = new.key or None
            conn.execute(
                q.INSERT_MESSAGE_SQL,
                (session_id, seq, role, message_json, new.tokens, key, now),
            )
            texts.append(index_text(new.message))
            conn.execute(FTS5_INSERT_SQL, (index_rowid(number, seq), tagged(tag, texts[-1])))
            if calls:
                conn.executemany(
                    q.INSERT_CALL_SQL, [(session_id, call_id, seq) for call_id in calls]
                )
            logged = LoggedMessage(seq, new.message, new.tokens, key, now)
            if key is not None:
                known[key] = logged
            out.append(logged)
        conn.execute(q.SET_LAST_SEQ_SQL, (seq, session_id))
        counts = term_counts(texts)
        conn.executemany(q.COUNT_TERMS_SQL, [(session_id, *c) for c in counts.items()])
        return out

    @staticmethod
    def _keyed(
        conn: sqlite3.Connection, session_id: str, batch: Sequence[NewMessage]
    ) -> dict[str, LoggedMessage]:
        """The records logged under the batch's keys, read under the write lock."""
        keys = sorted({new.key for new in batch if new.key})
        if not keys:
            return {}
        found = conn.execute(q.KEYED_SQL, (session_id, json.dumps(keys))).fetchall()
        return {str(m.key): m for m in (rows.logged(session_id, row) for row in found)}

    @staticmethod
    def _tail(
        conn: sqlite3.Connection,
        session_id: str,
        last_seq: int,
        batch: Sequence[NewMessage],
        known: Mapping[str, LoggedMessage],
    ) -> Tail:
        """What ``first_violation`` needs of the log before ``batch``, under the write lock."""
        keyed = {key: logged.message for key, logged in known.items()}
        messages = [new.message for new in batch]
        if not needs_calls(messages):
            return Tail(last_seq, keyed=keyed)
        run = conn.execute(q.TAIL_RUN_SQL, (session_id, session_id)).fetchall()
        answered = json.dumps(sorted({str(m.get("tool_call_id")) for m in messages}))
        called = conn.execute(q.CALLED_IDS_SQL, (session_id, answered)).fetchall()
        return Tail(
            last_seq,
            open_calls(rows.logged(session_id, row).message for row in run),
            frozenset(row[0] for row in called),
            keyed,
        )

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
            return int(self._row(conn, q.LAST_SEQ_SQL, (session_id,), session_id)[0] or 0)

    def last_of_role(self, session_id: str, role: str) -> LoggedMessage | None:
        with self._read() as conn:
            row = conn.execute(q.LAST_OF_ROLE_SQL, (session_id, role)).fetchone()
            if row is None:
                self._require(conn, session_id)
        return None if row is None else rows.logged(session_id, row)

    def search(
        self, session_id: str, query: str, *, limit: int = 20, before: int | None = None
    ) -> list[SearchHit]:
        terms = search_terms(query, limit, before)
        with self._read() as conn:
            if not terms:
                self._require(conn, session_id)
                return []
            held = {"session": session_id, "terms": json.dumps(terms)}
            counts = conn.execute(q.TERM_COUNTS_SQL, held).fetchall()
            if not counts:
                raise _not_found(session_id)
            searched = searched_terms(terms, {t: n for _, t, n in counts if t is not None})
            if not searched.terms:
                return []
            return fts5_search(conn, counts[0][0], searched, limit, before)

    def keyed(self, session_id: str, keys: Sequence[str]) -> dict[str, LoggedMessage]:
        wanted = json.dumps(sorted(set(keys)))
        with self._read() as conn:
            found = conn.execute(q.KEYED_SQL, (session_id, wanted)).fetchall()
            if not found:
                self._require(conn, session_id)
        logged = [rows.logged(session_id, row) for row in found]
        return {str(m.key): m for m in logged}

    def folds(self, session_id: str, view: str, *, include_superseded: bool = False) -> list[Fold]:
        sql = q.ALL_FOLDS_SQL if include_superseded else q.ACTIVE_FOLDS_SQL
        with self._read() as conn:
            found = conn.execute(sql, (session_id, view)).fetchall()
            if not found:
                self._require(conn, session_id)
        return [rows.fold(session_id, row) for row in found]

    def quarantine_fold(self, session_id: str, view: str, fold_id: str, reason: str) -> int:
        params = {"session": session_id, "view": view}
        with self._write() as conn:
            version = int(self._row(conn, q.FOLD_VERSION_SQL, params, session_id)[0] or 0)
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

    def head(self, session_id: str, view: str) -> Head:
        params = {"session": session_id, "view": view}
        with self._read() as conn:
            last, folds, config = self._row(conn, q.HEAD_SQL, params, session_id)
        return Head(int(last or 0), int(folds or 0), int(config or 0))

    def commit_folds(
        self, session_id: str, view: str, folds: Sequence[Fold], expected_version: int
    ) -> int:
        encoded = [rows.fold_json(i, fold) for i, fold in enumerate(folds)]
        params = {"session": session_id, "view": view}
        with self._write() as conn:
            last_row, version_row = self._row(conn, q.FOLD_HEAD_SQL, params, session_id)
            last, version = int(last_row or 0), int(version_row or 0)
            if version != expected_version:
                raise FoldConflict(view, expected_version, version)
            active = self._spans_near(conn, params, folds)
            for (fold, gone), body_json in zip(
                plan_commit(active, view, folds, last), encoded, strict=True
            ):
                conn.executemany(q.SUPERSEDE_SQL, [(fold.id, fold_id) for fold_id in gone])
                self._insert_fold(conn, session_id, fold, body_json)
            conn.execute(q.SET_VERSION_SQL, (session_id, view, version + 1))
        return version + 1

    @staticmethod
    def _spans_near(
        conn: sqlite3.Connection, params: Mapping[str, Any], folds: Sequence[Fold]
    ) -> list[FoldSpan]:
        """The active folds a commit of ``folds`` can meet: read by index, not all of them.

        Active in-place folds never overlap, so those meeting ``lo..hi`` are the
        one starting before ``lo`` (if it reaches in) and those starting inside.
        """
        found = list(conn.execute(q.FACTS_SPANS_SQL, params))
        placed = [f for f in folds if f.placement == "in_place"]
        if placed:
            near = {**params, "lo": min(f.start for f in placed), "hi": max(f.end for f in placed)}
            found += conn.execute(q.SPAN_BEFORE_SQL, near).fetchall()
            found += conn.execute(q.SPANS_IN_SQL, near).fetchall()
        return [Span(str(i), int(start), int(end), str(at)) for i, start, end, at in found]

    @staticmethod
    def _insert_fold(conn: sqlite3.Connection, session_id: str, fold: Fold, body: str) -> None:
        if conn.execute(q.FOLD_ID_SQL, (fold.id,)).fetchone():
            raise InvalidInput(f"fold id {fold.id!r} is already stored", field="id")
        conn.execute(
            q.INSERT_FOLD_SQL,
            rows.fold_params(session_id, fold, body),
        )

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
            version = int(self._row(conn, q.VIEW_VERSION_SQL, params, session_id)[0] or 0)
            if expected_version is not None and expected_version != version:
                raise ViewConflict(name, expected_version, version)
            now = time.time()
            conn.execute(q.PUT_VIEW_SQL, (session_id, name, config_json, version + 1, now))
        return ViewRecord(session_id, name, json.loads(config_json), version + 1, now)

    def get_view(self, session_id: str, name: str) -> ViewRecord | None:
        params = {"session": session_id, "name": name}
        with self._read() as conn:
            row = self._row(conn, q.GET_VIEW_SQL, params, session_id)
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
            holder, expires_at = self._row(conn, q.LEASE_SQL, params, session_id)
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
        return PollingWake(self.last_seq)

    def close(self) -> None:
        """Close the connection; later calls raise ``StoreError``."""
        with self._lock, _translated(self.path):
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _use_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """Switch the file to WAL, waiting up to ``timeout`` for other processes.

    Two processes switching one file at once each hold a read lock and want the
    write lock; SQLite breaks that deadlock by answering one of them "locked" at
    once, without waiting, so the switch is retried until the other is done.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.01)
