"""What a fold commit on SQLite reads and writes beside the version check.

Plain functions over the commit's connection, inside the write transaction
that holds the file's lock (``SQLiteStore.commit_folds``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from contextfold.core.branches import BranchPath
from contextfold.core.errors import InvalidInput
from contextfold.core.folds import Fold, FoldSpan, Span
from contextfold.store import rows
from contextfold.store.sqlite import sql as q
from contextfold.store.tree import on_branch


def spans_near(
    conn: sqlite3.Connection,
    params: Mapping[str, Any],
    folds: Sequence[Fold],
    branch: BranchPath | None = None,
) -> list[FoldSpan]:
    """The active folds of the branch a commit of ``folds`` can meet: read by index, not
    all of them (``branch`` None: the whole log is one branch).

    Active in-place folds of a branch never overlap, so those meeting ``lo..hi``
    are the branch's nearest one starting before ``lo`` (if it reaches in) and
    those starting inside.
    """
    found = [_span(row) for row in conn.execute(q.FACTS_SPANS_SQL, params)]
    placed = [f for f in folds if f.placement == "in_place"]
    if placed:
        near = {**params, "lo": min(f.start for f in placed), "hi": max(f.end for f in placed)}
        if branch is None:
            found += [_span(row) for row in conn.execute(q.SPAN_BEFORE_SQL, near)]
        else:
            before = (_span(row) for row in conn.execute(q.SPANS_BEFORE_SQL, near))
            nearest = next((span for span in before if branch.holds(span.end)), None)
            found += [] if nearest is None else [nearest]
        found += [_span(row) for row in conn.execute(q.SPANS_IN_SQL, near)]
    return list(on_branch(found, branch))


def _span(row: tuple[Any, ...]) -> Span:
    fold_id, start, end, placement = row
    return Span(str(fold_id), int(start), int(end), str(placement))


def insert_fold(conn: sqlite3.Connection, session_id: str, fold: Fold, body: str) -> None:
    if conn.execute(q.FOLD_ID_SQL, (fold.id,)).fetchone():
        raise InvalidInput(f"fold id {fold.id!r} is already stored", field="id")
    conn.execute(
        q.INSERT_FOLD_SQL,
        rows.fold_params(session_id, fold, body),
    )
