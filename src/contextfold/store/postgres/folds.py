"""What a fold commit on PostgreSQL reads and writes beside the version check.

Plain functions over the commit's cursor, inside the transaction that holds
the view's fold version row (``PostgresStore.commit_folds``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from contextfold.core.errors import InvalidInput
from contextfold.core.folds import Fold, FoldSpan, Span
from contextfold.store import rows
from contextfold.store.postgres import sql as q

Cursor = psycopg.Cursor[tuple[Any, ...]]


def spans_near(cur: Cursor, session_id: str, view: str, folds: Sequence[Fold]) -> list[FoldSpan]:
    """The active folds a commit of ``folds`` can meet: read by index, not all of them.

    Active in-place folds never overlap, so those meeting ``lo..hi`` are the
    one starting before ``lo`` (if it reaches in) and those starting inside.
    """
    params: dict[str, Any] = {"session": session_id, "view": view}
    found = cur.execute(q.FACTS_SPANS_SQL, params).fetchall()
    placed = [f for f in folds if f.placement == "in_place"]
    if placed:
        params.update(lo=min(f.start for f in placed), hi=max(f.end for f in placed))
        found += cur.execute(q.SPAN_BEFORE_SQL, params).fetchall()
        found += cur.execute(q.SPANS_IN_SQL, params).fetchall()
    return [Span(str(i), int(start), int(end), str(at)) for i, start, end, at in found]


def insert_fold(cur: Cursor, session_id: str, fold: Fold, body: str) -> None:
    if cur.execute(q.FOLD_ID_SQL, (fold.id,)).fetchone():
        raise InvalidInput(f"fold id {fold.id!r} is already stored", field="id")
    cur.execute(
        q.INSERT_FOLD_SQL,
        rows.fold_params(session_id, fold, body),
    )
