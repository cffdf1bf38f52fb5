"""What a fold commit on SQLite reads and writes beside the version check.

Plain functions over the commit's connection, inside the write transaction
that holds the file's lock (``SQLiteStore.commit_folds``).
"""

from __future__ import annotations

import sqlite3

from contextfold.core.errors import InvalidInput
from contextfold.core.folds import Fold
from contextfold.store import rows
from contextfold.store.sqlite import sql as q
from contextfold.store.tree import SpanSql

SPAN_SQL = SpanSql(q.FACTS_SPANS_SQL, q.SPAN_BEFORE_SQL, q.SPANS_BEFORE_SQL, q.SPANS_IN_SQL)
"""This backend's reads for ``contextfold.store.tree.spans_near``."""


def insert_fold(conn: sqlite3.Connection, session_id: str, fold: Fold, body: str) -> None:
    if conn.execute(q.FOLD_ID_SQL, (fold.id,)).fetchone():
        raise InvalidInput(f"fold id {fold.id!r} is already stored", field="id")
    conn.execute(
        q.INSERT_FOLD_SQL,
        rows.fold_params(session_id, fold, body),
    )
