"""The PostgreSQL store's connections, and the one boundary where driver errors are translated.

``Connections`` holds a ``psycopg_pool.ConnectionPool`` in autocommit mode.
Each pooled connection gets the store's schema first on its search path and
the durability the URL asked for (``synchronous_commit``). A connection unused
for longer than ``CHECK_IDLE_S`` is checked with the server before a call gets
it, so one the server dropped (a restart, a failover) is replaced instead of
failing a call, while one in steady use costs no extra round trip.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from contextfold.core.errors import InvalidInput, NotFound, StoreError
from contextfold.store.postgres import sql as q
from contextfold.store.postgres.options import SYNCHRONOUS_COMMIT, PostgresOptions

Connection = psycopg.Connection[tuple[Any, ...]]
Cursor = psycopg.Cursor[tuple[Any, ...]]

CHECK_IDLE_S = 1.0
"""A pooled connection unused for longer is checked with the server before a call gets it."""

NUL = "\x00"


@contextmanager
def translated(where: str) -> Iterator[None]:
    """The one place driver errors become ``StoreError``, naming the database.

    A NUL character, which PostgreSQL text cannot hold, is bad input, not a
    failing store: the writes name its field first (``nul_free``), and any
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


def nul_free(index: int | None = None, **texts: str | None) -> None:
    """Refuse a NUL character before anything is sent, naming its field."""
    for field, value in texts.items():
        if value is not None and NUL in value:
            raise InvalidInput(
                "PostgreSQL text cannot hold a NUL (0x00) character", index=index, field=field
            )


def not_found(session_id: str) -> NotFound:
    return NotFound(f"no session {session_id!r}")


def require(cur: Cursor, session_id: str) -> None:
    """For reads that found nothing: was there nothing, or no session?"""
    if cur.execute(q.EXISTS_SQL, (session_id,)).fetchone() is None:
        raise not_found(session_id)


def one_row(cur: Cursor, statement: str, params: Any, session_id: str) -> tuple[Any, ...]:
    """The one row of a statement over ``sessions``; none means an unknown session."""
    found = cur.execute(statement, params).fetchone()
    if found is None:
        raise not_found(session_id)
    return found


@contextmanager
def session_must_exist(session_id: str) -> Iterator[None]:
    """A write naming an unknown session fails its foreign key: that is ``NotFound``."""
    try:
        yield
    except psycopg.errors.ForeignKeyViolation as exc:
        raise not_found(session_id) from exc


class Connections:
    """The store's pool: ``read`` for one statement, ``write`` for one transaction."""

    def __init__(self, options: PostgresOptions) -> None:
        self.options = options
        self.where = options.display
        self._idle_since: weakref.WeakKeyDictionary[Connection, float] = weakref.WeakKeyDictionary()
        self._idle_lock = threading.Lock()
        with translated(self.where):
            self.pool: ConnectionPool[Connection] = ConnectionPool(
                options.conninfo,
                min_size=1,
                max_size=options.pool_size,
                kwargs={"autocommit": True},
                configure=self._configure,
                check=self._check,
                timeout=options.timeout,
                name=f"contextfold-{options.schema}",
                open=False,
            )
            try:
                self.pool.open(wait=True, timeout=options.timeout)
            except BaseException:
                self.pool.close()
                raise

    def _configure(self, conn: Connection) -> None:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.options.schema)))
        commit = SYNCHRONOUS_COMMIT[self.options.durability]
        conn.execute(sql.SQL("SET synchronous_commit TO {}").format(sql.SQL(commit)))

    def _check(self, conn: Connection) -> None:
        with self._idle_lock:
            since = self._idle_since.get(conn)
        if since is None or time.monotonic() - since > CHECK_IDLE_S:
            ConnectionPool.check_connection(conn)

    def _used(self, conn: Connection) -> None:
        """Note when ``conn`` was last used (the pool's ``reset`` hook would do, but it
        hands connections back through a worker, which spreads calls over all of them)."""
        with self._idle_lock:
            self._idle_since[conn] = time.monotonic()

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        with translated(self.where), self.pool.connection() as conn:
            try:
                yield conn
            finally:
                self._used(conn)

    @contextmanager
    def read(self) -> Iterator[Cursor]:
        with self.connection() as conn, conn.cursor() as cur:
            yield cur

    @contextmanager
    def write(self) -> Iterator[Cursor]:
        """One transaction; rolled back on any error, the store's own included."""
        with self.connection() as conn, conn.transaction(), conn.cursor() as cur:
            yield cur

    def close(self) -> None:
        with translated(self.where):
            self.pool.close()
