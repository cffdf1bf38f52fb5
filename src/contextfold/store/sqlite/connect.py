"""Opening a SQLite store's file: checked as ours, switched to WAL, migrated; and the
one place driver errors become ``StoreError``.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from contextfold.core.errors import StoreError
from contextfold.store.sqlite.migrations import check_ours, migrate

Durability = Literal["process", "full"]
# What ``PRAGMA synchronous`` each durability sets (the class docstring says why).
SYNCHRONOUS: dict[str, str] = {"process": "NORMAL", "full": "FULL"}


@contextmanager
def translated(path: str) -> Iterator[None]:
    """The one place driver errors become ``StoreError``, naming the file."""
    try:
        yield
    except sqlite3.Error as exc:
        raise StoreError(f"sqlite {path}: {exc}") from exc


def connect(path: str, durability: Durability, timeout: float) -> sqlite3.Connection:
    """The store's one connection to ``path``, migrated; nothing written to a file not ours."""
    with translated(path):
        conn = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
        try:
            # Nothing is written (not even the journal mode) to a file that is not ours.
            check_ours(conn, path)
            use_wal(conn, timeout)
            conn.execute(f"PRAGMA synchronous={SYNCHRONOUS[durability]}")
            conn.execute("PRAGMA foreign_keys=ON")
            migrate(conn, path)
        except BaseException:
            conn.close()
            raise
    return conn


def use_wal(conn: sqlite3.Connection, timeout: float) -> None:
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
