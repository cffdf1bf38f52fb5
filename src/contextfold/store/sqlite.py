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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from contextfold.core.errors import FoldConflict, InvalidInput, NotFound, StoreError
from contextfold.core.folds import Fold, plan_commit
from contextfold.core.log import LoggedMessage, NewMessage, SessionRecord
from contextfold.store.base import check_lease
from contextfold.store.migrations import migrate

_COLUMNS = "seq, message, tokens, key, created_at"
MESSAGES_BEFORE_SQL = (
    f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?"
)
LAST_OF_ROLE_SQL = (
    f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND role = ? ORDER BY seq DESC LIMIT 1"
)


@contextmanager
def _translated() -> Iterator[None]:
    """The one place driver errors become ``StoreError``."""
    try:
        yield
    except sqlite3.Error as exc:
        raise StoreError(f"sqlite: {exc}") from exc


def _dumps(value: Any, *, field: str, index: int | None = None) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"not JSON-serializable: {exc}", index=index, field=field) from exc


def _logged(row: tuple[Any, ...]) -> LoggedMessage:
    seq, message, tokens, key, created_at = row
    return LoggedMessage(seq, json.loads(message), tokens, key, created_at)


def _session(row: tuple[Any, ...]) -> SessionRecord:
    session_id, encoding, meta, created_at = row
    return SessionRecord(session_id, encoding, json.loads(meta), created_at)


def _fold(row: tuple[Any, ...]) -> Fold:
    data, superseded_by = row
    return Fold.from_dict({**json.loads(data), "superseded_by": superseded_by})


class SQLiteStore:
    """The log and folds in one SQLite file, reopened with everything kept."""

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 30.0) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        with _translated():
            conn = sqlite3.connect(
                self.path, timeout=timeout, isolation_level=None, check_same_thread=False
            )
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA foreign_keys=ON")
                migrate(conn)
            except BaseException:
                conn.close()
                raise
        self._conn: sqlite3.Connection | None = conn

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock, _translated():
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
        if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
            raise NotFound(f"no session {session_id!r}")

    @staticmethod
    def _last_seq(conn: sqlite3.Connection, session_id: str) -> int:
        row = conn.execute(
            "SELECT MAX(seq) FROM messages WHERE session_id = ?", (session_id,)
        ).fetchone()
        return int(row[0] or 0)

    def create_session(
        self, session_id: str, *, encoding: str, meta: dict[str, Any] | None = None
    ) -> SessionRecord:
        if not session_id:
            raise InvalidInput("session id must not be empty", field="session_id")
        meta_json = _dumps(dict(meta or {}), field="meta")
        with self._write() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO sessions VALUES (?, ?, ?, ?)",
                (session_id, encoding, meta_json, time.time()),
            )
            row = conn.execute(
                "SELECT id, encoding, meta, created_at FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
        return _session(row)

    def get_session(self, session_id: str) -> SessionRecord:
        with self._read() as conn:
            row = conn.execute(
                "SELECT id, encoding, meta, created_at FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
        if row is None:
            raise NotFound(f"no session {session_id!r}")
        return _session(row)

    def list_sessions(self) -> list[str]:
        with self._read() as conn:
            return [row[0] for row in conn.execute("SELECT id FROM sessions ORDER BY id")]

    def append(self, session_id: str, batch: Sequence[NewMessage]) -> list[LoggedMessage]:
        rows = [_prepare(i, new) for i, new in enumerate(batch)]
        with self._write() as conn:
            self._require(conn, session_id)
            seq = self._last_seq(conn, session_id)
            now = time.time()
            out: list[LoggedMessage] = []
            added: dict[str, LoggedMessage] = {}
            for new, role, message_json, calls in rows:
                known = self._known(conn, session_id, new.key, added)
                if known is not None:
                    out.append(known)
                    continue
                seq += 1
                key = new.key or None
                conn.execute(
                    "INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (session_id, seq, role, message_json, new.tokens, key, now),
                )
                if calls:
                    conn.executemany(
                        "INSERT OR IGNORE INTO tool_calls VALUES (?, ?, ?)",
                        [(session_id, call_id, seq) for call_id in calls],
                    )
                logged = LoggedMessage(seq, new.message, new.tokens, key, now)
                if key is not None:
                    added[key] = logged
                out.append(logged)
        return out

    @staticmethod
    def _known(
        conn: sqlite3.Connection,
        session_id: str,
        key: str | None,
        added: Mapping[str, LoggedMessage],
    ) -> LoggedMessage | None:
        """The record already logged under ``key``, earlier or in this batch."""
        if not key:
            return None
        if key in added:
            return added[key]
        row = conn.execute(
            f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND key = ?",
            (session_id, key),
        ).fetchone()
        return None if row is None else _logged(row)

    def messages(
        self, session_id: str, start: int = 1, end: int | None = None
    ) -> list[LoggedMessage]:
        with self._read() as conn:
            self._require(conn, session_id)
            # Two statements so that both bounds are index constraints.
            if end is None:
                rows = conn.execute(
                    f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND seq >= ? "
                    "ORDER BY seq",
                    (session_id, start),
                ).fetchall()
            else:
                rows = conn.execute(
                    f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? "
                    "AND seq BETWEEN ? AND ? ORDER BY seq",
                    (session_id, start, end),
                ).fetchall()
        return [_logged(row) for row in rows]

    def messages_before(self, session_id: str, before: int, limit: int) -> list[LoggedMessage]:
        with self._read() as conn:
            self._require(conn, session_id)
            if limit <= 0:  # SQLite reads a negative LIMIT as "no limit"
                return []
            rows = conn.execute(MESSAGES_BEFORE_SQL, (session_id, before, limit)).fetchall()
        return [_logged(row) for row in rows]

    def last_seq(self, session_id: str) -> int:
        with self._read() as conn:
            self._require(conn, session_id)
            return self._last_seq(conn, session_id)

    def last_of_role(self, session_id: str, role: str) -> LoggedMessage | None:
        with self._read() as conn:
            self._require(conn, session_id)
            row = conn.execute(LAST_OF_ROLE_SQL, (session_id, role)).fetchone()
        return None if row is None else _logged(row)

    def called_ids(self, session_id: str, ids: Iterable[str]) -> set[str]:
        wanted = json.dumps(sorted(set(ids)))
        with self._read() as conn:
            self._require(conn, session_id)
            rows = conn.execute(
                "SELECT DISTINCT call_id FROM tool_calls WHERE session_id = ? "
                "AND call_id IN (SELECT value FROM json_each(?))",
                (session_id, wanted),
            ).fetchall()
        return {row[0] for row in rows}

    def folds(self, session_id: str, view: str, *, include_superseded: bool = False) -> list[Fold]:
        with self._read() as conn:
            self._require(conn, session_id)
            rows = conn.execute(
                "SELECT fold, superseded_by FROM folds WHERE session_id = ? AND view = ? "
                "AND (? OR superseded_by IS NULL) ORDER BY start_seq, created_at, rowid",
                (session_id, view, include_superseded),
            ).fetchall()
        return [_fold(row) for row in rows]

    def fold_version(self, session_id: str, view: str) -> int:
        with self._read() as conn:
            self._require(conn, session_id)
            return self._version(conn, session_id, view)

    @staticmethod
    def _version(conn: sqlite3.Connection, session_id: str, view: str) -> int:
        row = conn.execute(
            "SELECT version FROM fold_versions WHERE session_id = ? AND view = ?",
            (session_id, view),
        ).fetchone()
        return 0 if row is None else int(row[0])

    def commit_folds(
        self, session_id: str, view: str, folds: Sequence[Fold], expected_version: int
    ) -> int:
        encoded = [_fold_json(i, fold) for i, fold in enumerate(folds)]
        with self._write() as conn:
            self._require(conn, session_id)
            version = self._version(conn, session_id, view)
            if version != expected_version:
                raise FoldConflict(view, expected_version, version)
            last = self._last_seq(conn, session_id)
            active = [
                _fold(row)
                for row in conn.execute(
                    "SELECT fold, superseded_by FROM folds WHERE session_id = ? AND view = ? "
                    "AND superseded_by IS NULL",
                    (session_id, view),
                )
            ]
            for (fold, gone), body_json in zip(
                plan_commit(active, view, folds, last), encoded, strict=True
            ):
                conn.executemany(
                    "UPDATE folds SET superseded_by = ? WHERE id = ?",
                    [(fold.id, fold_id) for fold_id in gone],
                )
                self._insert_fold(conn, session_id, fold, body_json)
            conn.execute(
                "INSERT INTO fold_versions VALUES (?, ?, ?) ON CONFLICT (session_id, view) "
                "DO UPDATE SET version = excluded.version",
                (session_id, view, version + 1),
            )
        return version + 1

    @staticmethod
    def _insert_fold(conn: sqlite3.Connection, session_id: str, fold: Fold, body: str) -> None:
        if conn.execute("SELECT 1 FROM folds WHERE id = ?", (fold.id,)).fetchone():
            raise InvalidInput(f"fold id {fold.id!r} is already stored", field="id")
        conn.execute(
            "INSERT INTO folds VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                fold.id,
                session_id,
                fold.view,
                fold.start,
                fold.end,
                fold.placement,
                fold.kind,
                body,
                fold.superseded_by,
                fold.created_at,
            ),
        )

    def acquire_lease(self, session_id: str, view: str, owner: str, ttl_s: float = 60.0) -> bool:
        """Read and take the lease in one ``BEGIN IMMEDIATE``: the file's write lock
        makes the check and the take atomic across processes."""
        check_lease(owner, ttl_s)
        with self._write() as conn:
            self._require(conn, session_id)
            now = time.time()
            row = conn.execute(
                "SELECT owner, expires_at FROM leases WHERE session_id = ? AND view = ?",
                (session_id, view),
            ).fetchone()
            if row is not None and row[0] != owner and row[1] > now:
                return False
            conn.execute(
                "INSERT INTO leases VALUES (?, ?, ?, ?) ON CONFLICT (session_id, view) "
                "DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at",
                (session_id, view, owner, now + ttl_s),
            )
        return True

    def release_lease(self, session_id: str, view: str, owner: str) -> bool:
        with self._write() as conn:
            self._require(conn, session_id)
            gone = conn.execute(
                "DELETE FROM leases WHERE session_id = ? AND view = ? AND owner = ?",
                (session_id, view, owner),
            ).rowcount
        return gone > 0

    def close(self) -> None:
        """Close the connection; later calls raise ``StoreError``."""
        with self._lock, _translated():
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _prepare(index: int, new: NewMessage) -> tuple[NewMessage, str, str, list[str]]:
    """Role, JSON and tool-call ids, worked out before any write begins."""
    message: Any = new.message
    role = message.get("role") if isinstance(message, Mapping) else None
    if not isinstance(role, str):
        raise InvalidInput("a logged message needs a string role", index=index, field="role")
    try:
        calls = [str(call["id"]) for call in message.get("tool_calls") or ()]
    except (KeyError, TypeError) as exc:
        raise InvalidInput("tool call without an id", index=index, field="tool_calls") from exc
    return new, role, _dumps(message, index=index, field="message"), calls


def _fold_json(index: int, fold: Fold) -> str:
    """The fold as stored; ``superseded_by`` lives in its own column only."""
    body = {k: v for k, v in fold.to_dict().items() if k != "superseded_by"}
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        field = next((k for k, v in body.items() if not _serializable(v)), "fold")
        raise InvalidInput(f"fold {index} is not JSON-serializable: {exc}", field=field) from exc


def _serializable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
