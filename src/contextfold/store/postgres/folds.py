"""What a fold commit on PostgreSQL reads and writes beside the version check.

Plain functions over the commit's cursor, inside the transaction that holds
the view's fold version row (``PostgresStore.commit_folds``).
"""

from __future__ import annotations

from typing import Any

import psycopg

from contextfold.core.errors import InvalidInput
from contextfold.core.folds import Fold
from contextfold.store import rows
from contextfold.store.postgres import sql as q
from contextfold.store.tree import SpanSql

Cursor = psycopg.Cursor[tuple[Any, ...]]


SPAN_SQL = SpanSql(q.FACTS_SPANS_SQL, q.SPAN_BEFORE_SQL, q.SPANS_BEFORE_SQL, q.SPANS_IN_SQL)
"""This backend's reads for ``contextfold.store.tree.spans_near``."""


def insert_fold(cur: Cursor, session_id: str, fold: Fold, body: str) -> None:
    if cur.execute(q.FOLD_ID_SQL, (fold.id,)).fetchone():
        raise InvalidInput(f"fold id {fold.id!r} is already stored", field="id")
    cur.execute(
        q.INSERT_FOLD_SQL,
        rows.fold_params(session_id, fold, body),
    )
