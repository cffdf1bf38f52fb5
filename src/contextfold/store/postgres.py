"""PostgreSQL store: many processes on many machines share one database.

``PostgresStore("postgresql://user@host:5432/db?schema=chat")`` keeps every
table in one schema (``public`` unless ``?schema=`` names another; it is made
on first open), migrated on open (``contextfold.store.postgres_schema``).

Connections come from a ``psycopg_pool.ConnectionPool`` in autocommit mode:
a read, and an append without idempotency keys, is one statement; other writes
are one explicit transaction, rolled back on any error. Concurrent writers are
made safe by row locks, not by retries:

- an append locks its session's row, which holds the last seq handed out, by
  the ``UPDATE`` that moves it on (an append with keys takes the lock first and
  then looks its keys up), so appends to one session queue and seqs stay
  contiguous; a unique index on ``(session_id, key)`` backs the keys;
- a fold commit or quarantine locks the view's row in ``fold_versions``, so
  the version check and the bump are one step, and appends are not held up;
- a lease is taken by one ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` the
  current one is expired or the caller's, atomic on the lease's row. Expiry is
  the callers' wall clock (``time.time()``), as in every store.

Driver errors become ``StoreError`` in ``_translated``, the one boundary;
a foreign-key failure on a write means the session is unknown (``NotFound``).
Every append that logs something sends ``NOTIFY`` in its own statement, so
runners in other processes wake when it commits (``LISTEN``, in
``contextfold.store.postgres_wake``, whose wake ``wake()`` hands out).
"""

from __future__ import annotations

import json
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

try:
    import psycopg
    from psycopg_pool import ConnectionPool
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "the PostgreSQL store needs psycopg 3 and its pool: pip install 'contextfold[postgres]'"
    ) from exc

from contextfold.core.errors import FoldConflict, InvalidInput, NotFound, StoreError, ViewConflict
from contextfold.core.folds import Fold, plan_commit
from contextfold.core.log import (
    ApiKey,
    LoggedMessage,
    NewMessage,
    SessionInfo,
    SessionRecord,
    ViewRecord,
)
from contextfold.store import postgres_admin as admin
from contextfold.store import postgres_sql as q
from contextfold.store import rows
from contextfold.store.base import (
    Head,
    Quarantined,
    check_api_key,
    check_lease,
    check_listing,
    view_config_json,
)
from contextfold.store.postgres_folds import insert_fold, spans_near
from contextfold.store.postgres_options import SYNCHRONOUS_COMMIT, PostgresOptions, parse_url
from contextfold.store.postgres_schema import migrate
from contextfold.store.postgres_wake import PostgresWake, channel_for
from contextfold.store.sqlite import _dumps, _fold_json, _prepare

Cursor = psycopg.Cursor[tuple[Any, ...]]

CHECK_IDLE_S = 1.0
"""A pooled connection unused for longer is checked with the server before a call gets it."""


NUL = "\x00"


@contextmanager
def _translated(where: str) -> Iterator[None]:
    """The one place driver errors become ``StoreError``, naming the database.

    A NUL character, which PostgreSQL text cannot hold, is bad input, not a
    failing store: the writes name its field first (``_nul_free``), and any
    other call carrying one gets ``InvalidInput`` here; so does a lone
    surrogate, which the driver cannot encode.
    """
    try:
        yield
    except psycopg.DataError as exc:
        if "NUL" not in str(exc):
            raise StoreError(f"postgresql {where}: {exc}") from exc
        raise InvalidInput(f"PostgreSQL text cannot hold a NUL (0x00) character: {exc}") from exc
    except psycopg.Error as exc:
        raise StoreError(f"postgresql {where}: {exc}") from exc
    except UnicodeEncodeError as exc:  # a lone surrogate, which no UTF-8 database holds
        raise InvalidInput(f"text that is not valid Unicode cannot be stored: {exc}") from exc


def _nul_free(index: int | None = None, **texts: str | None) -> None:
    """Refuse a NUL character before anything is sent, naming its field."""
    for field, value in texts.items():
        if value is not None and NUL in value:
            raise InvalidInput(
                "PostgreSQL text cannot hold a NUL (0x00) character", index=index, field=field
            )


def _not_found(session_id: str) -> NotFound:
    return NotFound(f"no session {session_id!r}")


class PostgresStore:
    """The log, folds, views and leases in one PostgreSQL schema, shared by processes."""

    def __init__(self, url: str, *, pool_size: int | None = None) -> None:
        self.options: PostgresOptions = parse_url(url, pool_size=pool_size)
        self.schema = self.options.schema
        self.channel = channel_for(self.schema)
        self._where = self.options.display
        self._wake: PostgresWake | None = None
        self._wake_lock = threading.Lock()
        self._idle_since: weakref.WeakKeyDictionary[psycopg.Connection[Any], float] = (
            weakref.WeakKeyDictionary()
        )
        self._idle_lock = threading.Lock()
        with _translated(self._where):
            self._pool: ConnectionPool[psycopg.Connection[tuple[Any, ...]]] = ConnectionPool(
                self.options.conninfo,
                min_size=1,
                max_size=self.options.pool_size,
                kwargs={"autocommit": True},
                configure=self._configure,
                check=self._check,
                timeout=self.options.timeout,
                name=f"contextfold-{self.schema}",
                open=False,
            )
            try:
                self._pool.open(wait=True, timeout=self.options.timeout)
                with self._pool.connection() as conn:
                    self.applied = migrate(conn, self.schema)
            except BaseException:
                self._pool.close()
                raise

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        """Every pooled connection finds the store's tables first, in its schema, and
        commits as durably as the URL asked."""
        conn.execute(
            psycopg.sql.SQL("SET search_path TO {}").format(psycopg.sql.Identifier(self.schema))
        )
        commit = SYNCHRONOUS_COMMIT[self.options.durability]
        conn.execute(
            psycopg.sql.SQL("SET synchronous_commit TO {}").format(psycopg.sql.SQL(commit))
        )

    def _check(self, conn: psycopg.Connection[Any]) -> None:
        """Ask the server before handing out a connection idle for ``CHECK_IDLE_S``.

        A connection the server dropped (a restart, a failover) is then replaced
        instead of failing a call; one in steady use costs no extra round trip.
        """
        with self._idle_lock:
            since = self._idle_since.get(conn)
        if since is None or time.monotonic() - since > CHECK_IDLE_S:
            ConnectionPool.check_connection(conn)

    @contextmanager
    def _read(self) -> Iterator[Cursor]:
        with _translated(self._where), self._pool.connection() as conn:
            try:
                with conn.cursor() as cur:
                    yield cur
            finally:
                self._used(conn)

    @contextmanager
    def _write(self) -> Iterator[Cursor]:
        """One transaction; rolled back on any error, the store's own included."""
        with _translated(self._where), self._pool.connection() as conn:
            try:
                with conn.transaction(), conn.cursor() as cur:
                    yield cur
            finally:
                self._used(conn)

    def _used(self, conn: psycopg.Connection[Any]) -> None:
        """Note when ``conn`` was last used (the pool's ``reset`` hook would do, but it
        hands connections back through a worker, which spreads calls over all of them)."""
        with self._idle_lock:
            self._idle_since[conn] = time.monotonic()

    @staticmethod
    def _require(cur: Cursor, session_id: str) -> None:
        """For reads that found nothing: was there nothing, or no session?"""
        if cur.execute(q.EXISTS_SQL, (session_id,)).fetchone() is None:
            raise _not_found(session_id)

    @staticmethod
    def _row(cur: Cursor, sql: str, params: Any, session_id: str) -> tuple[Any, ...]:
        """The one row of a statement over ``sessions``; none means an unknown session."""
        row = cur.execute(sql, params).fetchone()
        if row is None:
            raise _not_found(session_id)
        return row

    @contextmanager
    def _session_must_exist(self, session_id: str) -> Iterator[None]:
        """A write naming an unknown session fails its foreign key: that is ``NotFound``."""
        try:
            yield
        except psycopg.errors.ForeignKeyViolation as exc:
            raise _not_found(session_id) from exc

    # -- sessions ---------------------------------------------------------

    def create_session(
        self, session_id: str, *, encoding: str, meta: dict[str, Any] | None = None
    ) -> SessionRecord:
        if not session_id:
            raise InvalidInput("session id must not be empty", field="session_id")
        _nul_free(session_id=session_id, encoding=encoding)
        meta_json = _dumps(dict(meta or {}), field="meta")
        with self._write() as cur:
            cur.execute(q.CREATE_SESSION_SQL, (session_id, encoding, meta_json, time.time()))
            row = self._row(cur, q.SESSION_SQL, (session_id,), session_id)
        return rows.session(row)

    def get_session(self, session_id: str) -> SessionRecord:
        with self._read() as cur:
            return rows.session(self._row(cur, q.SESSION_SQL, (session_id,), session_id))

    def list_sessions(
        self,
        prefix: str = "",
        *,
        after: str | None = None,
        limit: int | None = None,
        search: str | None = None,
    ) -> list[str]:
        check_listing(prefix, after, limit, search)
        if NUL in prefix or NUL in (search or ""):
            return []  # no stored id holds one
        if after is not None:
            after = after.partition(NUL)[0]  # the same ids are greater than what precedes it
        with self._read() as cur:
            return admin.list_sessions(cur, prefix, after, limit, search)

    def session_info(self, session_id: str) -> SessionInfo:
        with self._read() as cur:
            return admin.session_info(cur, session_id)

    def delete_session(self, session_id: str) -> bool:
        with self._read() as cur:
            return admin.delete_session(cur, session_id)

    # -- the log ------------------------------------------------------------

    def append(self, session_id: str, batch: Sequence[NewMessage]) -> list[LoggedMessage]:
        """One statement without keys; with keys, they are looked up under the session's lock.

        The statement also sends the wake's ``NOTIFY``; while this process
        listens, its echo is expected (``PostgresWake``), and given up if the
        append fails or stores nothing new.
        """
        prepared = [_prepare(i, new) for i, new in enumerate(batch)]
        for i, (new, _, _, call_ids) in enumerate(prepared):
            _nul_free(i, key=new.key, tool_calls="".join(call_ids))
        keys = sorted({new.key for new in batch if new.key})
        wake = self._wake
        echo = wake is not None and wake.expect_echo(session_id)
        try:
            logged, notified = self._append(session_id, prepared, keys)
        except BaseException:
            if wake is not None and echo:
                wake.echo_lost(session_id)
            raise
        if wake is not None and echo and not notified:
            wake.echo_lost(session_id)
        return logged

    def _append(
        self,
        session_id: str,
        prepared: Sequence[tuple[NewMessage, str, str, list[str]]],
        keys: list[str],
    ) -> tuple[list[LoggedMessage], bool]:
        if not keys:
            with self._read() as cur:
                return self._insert(cur, session_id, prepared, {})
        with self._write() as cur:
            self._row(cur, q.LOCK_SESSION_SQL, (session_id,), session_id)
            known = {}
            for row in cur.execute(q.KEYS_SQL, (session_id, keys)).fetchall():
                logged = rows.logged(session_id, row)
                known[str(logged.key)] = logged
            return self._insert(cur, session_id, prepared, known)

    def _insert(
        self,
        cur: Cursor,
        session_id: str,
        prepared: Sequence[tuple[NewMessage, str, str, list[str]]],
        known: dict[str, LoggedMessage],
    ) -> tuple[list[LoggedMessage], bool]:
        """Log what ``known`` (records by key) does not hold yet: a record for each
        message, and whether anything new was logged (and so notified)."""
        fresh: list[NewMessage] = []
        columns: dict[str, list[Any]] = {
            name: [] for name in ("roles", "messages", "tokens", "keys", "call_ids", "call_at")
        }
        places: list[LoggedMessage | int] = []
        first: dict[str, int] = {}
        for new, role, message_json, call_ids in prepared:
            if new.key and new.key in known:
                places.append(known[new.key])
            elif new.key and new.key in first:
                places.append(first[new.key])
            else:
                fresh.append(new)
                index = len(fresh)
                for name, value in (
                    ("roles", role),
                    ("messages", message_json),
                    ("tokens", new.tokens),
                    ("keys", new.key or None),
                ):
                    columns[name].append(value)
                columns["call_ids"] += call_ids
                columns["call_at"] += [index] * len(call_ids)
                if new.key:
                    first[new.key] = index
                places.append(index)
        if not fresh:
            self._require(cur, session_id)
            return [p for p in places if isinstance(p, LoggedMessage)], False
        now = time.time()
        params = {
            "session": session_id,
            "n": len(fresh),
            "now": now,
            "channel": self.channel,
            "total": sum(columns["tokens"]),
            **columns,
        }
        seq0 = int(self._row(cur, q.APPEND_SQL, params, session_id)[0])
        logged = [
            LoggedMessage(seq0 + i, new.message, new.tokens, new.key or None, now)
            for i, new in enumerate(fresh, 1)
        ]
        return [p if isinstance(p, LoggedMessage) else logged[p - 1] for p in places], True

    def messages(
        self, session_id: str, start: int = 1, end: int | None = None
    ) -> list[LoggedMessage]:
        with self._read() as cur:
            if end is None:
                found = cur.execute(q.MESSAGES_FROM_SQL, (session_id, start)).fetchall()
            else:
                found = cur.execute(q.MESSAGES_BETWEEN_SQL, (session_id, start, end)).fetchall()
            if not found:
                self._require(cur, session_id)
        return [rows.logged(session_id, row) for row in found]

    def messages_before(self, session_id: str, before: int, limit: int) -> list[LoggedMessage]:
        with self._read() as cur:
            found = (
                cur.execute(q.MESSAGES_BEFORE_SQL, (session_id, before, limit)).fetchall()
                if limit > 0
                else []
            )
            if not found:
                self._require(cur, session_id)
        return [rows.logged(session_id, row) for row in found]

    def last_seq(self, session_id: str) -> int:
        with self._read() as cur:
            return int(self._row(cur, q.LAST_SEQ_SQL, (session_id,), session_id)[0])

    def last_of_role(self, session_id: str, role: str) -> LoggedMessage | None:
        with self._read() as cur:
            row = cur.execute(q.LAST_OF_ROLE_SQL, (session_id, role)).fetchone()
            if row is None:
                self._require(cur, session_id)
        return None if row is None else rows.logged(session_id, row)

    def called_ids(self, session_id: str, ids: Iterable[str]) -> set[str]:
        wanted = sorted({str(i) for i in ids})
        with self._read() as cur:
            found = cur.execute(q.CALLED_IDS_SQL, (session_id, wanted)).fetchall()
            if not found:
                self._require(cur, session_id)
        return {row[0] for row in found}

    # -- folds ----------------------------------------------------------------

    def folds(self, session_id: str, view: str, *, include_superseded: bool = False) -> list[Fold]:
        sql = q.ALL_FOLDS_SQL if include_superseded else q.ACTIVE_FOLDS_SQL
        with self._read() as cur:
            found = cur.execute(sql, (session_id, view)).fetchall()
            if not found:
                self._require(cur, session_id)
        return [rows.fold(session_id, row) for row in found]

    def _lock_version(self, cur: Cursor, session_id: str, view: str) -> tuple[int, int]:
        """The view's fold version and the log's last seq, the version row locked."""
        with self._session_must_exist(session_id):
            cur.execute(q.ENSURE_VERSION_SQL, (session_id, view))
        version, last = self._row(cur, q.LOCK_VERSION_SQL, (session_id, view), session_id)
        return int(version), int(last)

    def quarantine_fold(self, session_id: str, view: str, fold_id: str, reason: str) -> int:
        with self._write() as cur:
            version, _ = self._lock_version(cur, session_id, view)
            if not cur.execute(q.QUARANTINE_SQL, (reason, session_id, view, fold_id)).rowcount:
                return version
            cur.execute(q.SET_VERSION_SQL, (version + 1, session_id, view))
        return version + 1

    def quarantined(self, session_id: str, view: str) -> list[Quarantined]:
        with self._read() as cur:
            found = cur.execute(q.QUARANTINED_SQL, (session_id, view)).fetchall()
            if not found:
                self._require(cur, session_id)
        return [Quarantined(str(fold_id), str(reason)) for fold_id, reason in found]

    def fold_version(self, session_id: str, view: str) -> int:
        params = {"session": session_id, "view": view}
        with self._read() as cur:
            return int(self._row(cur, q.FOLD_VERSION_SQL, params, session_id)[0] or 0)

    def head(self, session_id: str, view: str) -> Head:
        params = {"session": session_id, "view": view}
        with self._read() as cur:
            last, folds, config = self._row(cur, q.HEAD_SQL, params, session_id)
        return Head(int(last), int(folds or 0), int(config or 0))

    def commit_folds(
        self, session_id: str, view: str, folds: Sequence[Fold], expected_version: int
    ) -> int:
        encoded = [_fold_json(i, fold) for i, fold in enumerate(folds)]
        with self._write() as cur:
            version, last = self._lock_version(cur, session_id, view)
            if version != expected_version:
                raise FoldConflict(view, expected_version, version)
            active = spans_near(cur, session_id, view, folds)
            for (fold, gone), body_json in zip(
                plan_commit(active, view, folds, last), encoded, strict=True
            ):
                if gone:
                    cur.executemany(q.SUPERSEDE_SQL, [(fold.id, fold_id) for fold_id in gone])
                insert_fold(cur, session_id, fold, body_json)
            cur.execute(q.SET_VERSION_SQL, (version + 1, session_id, view))
        return version + 1

    # -- views ----------------------------------------------------------------

    def put_view(
        self,
        session_id: str,
        name: str,
        config: Mapping[str, Any],
        expected_version: int | None = None,
    ) -> ViewRecord:
        config_json = view_config_json(name, config)
        _nul_free(view=name)
        now = time.time()
        with self._write() as cur:
            with self._session_must_exist(session_id):
                if expected_version is None:
                    row = cur.execute(
                        q.UPSERT_VIEW_SQL, (session_id, name, config_json, now)
                    ).fetchone()
                elif expected_version == 0:
                    row = cur.execute(
                        q.CREATE_VIEW_SQL, (session_id, name, config_json, now)
                    ).fetchone()
                else:
                    row = cur.execute(
                        q.UPDATE_VIEW_SQL, (config_json, now, session_id, name, expected_version)
                    ).fetchone()
            if row is None:
                params = {"session": session_id, "view": name}
                actual = self._row(cur, q.VIEW_VERSION_SQL, params, session_id)[0]
                raise ViewConflict(name, int(expected_version or 0), int(actual or 0))
        return ViewRecord(session_id, name, json.loads(config_json), int(row[0]), now)

    def get_view(self, session_id: str, name: str) -> ViewRecord | None:
        params = {"session": session_id, "view": name}
        with self._read() as cur:
            row = self._row(cur, q.GET_VIEW_SQL, params, session_id)
        return None if row[0] is None else rows.view(session_id, row)

    def list_views(self, session_id: str) -> list[ViewRecord]:
        with self._read() as cur:
            found = cur.execute(q.LIST_VIEWS_SQL, (session_id,)).fetchall()
            if not found:
                self._require(cur, session_id)
        return [rows.view(session_id, row) for row in found]

    # -- leases ---------------------------------------------------------------

    def acquire_lease(self, session_id: str, view: str, owner: str, ttl_s: float = 60.0) -> bool:
        check_lease(owner, ttl_s)
        _nul_free(owner=owner)
        now = time.time()
        params = {
            "session": session_id,
            "view": view,
            "owner": owner,
            "expires": now + ttl_s,
            "now": now,
        }
        with self._read() as cur, self._session_must_exist(session_id):
            return cur.execute(q.TAKE_LEASE_SQL, params).fetchone() is not None

    def release_lease(self, session_id: str, view: str, owner: str) -> bool:
        with self._read() as cur:
            gone = cur.execute(q.RELEASE_LEASE_SQL, (session_id, view, owner)).fetchone()
            if gone is None:
                self._require(cur, session_id)
        return gone is not None

    # -- API keys ---------------------------------------------------------------

    def put_api_key(self, key: ApiKey) -> None:
        check_api_key(key)
        _nul_free(id=key.id, tenant=key.tenant, secret_hash=key.secret_hash, label=key.label)
        with self._read() as cur:
            admin.put_api_key(cur, key)

    def get_api_key(self, key_id: str) -> ApiKey | None:
        with self._read() as cur:
            return admin.get_api_key(cur, key_id)

    def list_api_keys(self, tenant: str | None = None) -> list[ApiKey]:
        with self._read() as cur:
            return admin.list_api_keys(cur, tenant)

    def revoke_api_key(self, key_id: str) -> bool:
        with self._read() as cur:
            return admin.revoke_api_key(cur, key_id)

    # -- wake-ups and lifetime --------------------------------------------------

    def wake(self) -> PostgresWake:
        """This store's wake-up port: appends ``NOTIFY``, a thread ``LISTEN``s."""
        with self._wake_lock:
            if self._wake is None:
                self._wake = PostgresWake(self.options.conninfo, self.channel, where=self._where)
            return self._wake

    def close(self) -> None:
        """Stop the wake's listener and close the pool; later calls raise ``StoreError``."""
        with self._wake_lock:
            wake, self._wake = self._wake, None
        if wake is not None:
            wake.close()
        with _translated(self._where):
            self._pool.close()
