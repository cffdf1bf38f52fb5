"""What a fold commit on SQLite reads and writes beside the version check.

Plain functions over the commit's connection, inside the write transaction
that holds the file's lock (``SQLiteStore.commit_folds``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.folds import Fold, FoldSpan, Span
from contextfold.store import rows
from contextfold.store.sqlite import sql as q


def spans_near(
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


def insert_fold(conn: sqlite3.Connection, session_id: str, fold: Fold, body: str) -> None:
    if conn.execute(q.FOLD_ID_SQL, (fold.id,)).fetchone():
        raise InvalidInput(f"fold id {fold.id!r} is already stored", field="id")
    conn.execute(
        q.INSERT_FOLD_SQL,
        rows.fold_params(session_id, fold, body),
    )
