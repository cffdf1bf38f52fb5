"""The PostgreSQL store's search: one statement, planned for each query's words.

What ``PostgresStore.search`` runs on its read cursor; the terms are
``contextfold.store.search``'s, shared with every backend.
"""

from __future__ import annotations

from typing import Any

import psycopg

from contextfold.store.base import SearchHit
from contextfold.store.postgres import sql as q
from contextfold.store.postgres.pool import not_found
from contextfold.store.search import (
    CANDIDATES,
    Scope,
    searched_terms,
    seq_bound,
    session_tag,
    tsquery,
)

Cursor = psycopg.Cursor[tuple[Any, ...]]


def ranked(cur: Cursor, session_id: str, scope: Scope, limit: int) -> list[SearchHit]:
    """The hits of ``scope`` (already checked) in the session's log, best first."""
    counts = cur.execute(q.TERM_COUNTS_SQL, {"session": session_id, "terms": scope.terms})
    held = counts.fetchall()
    if not held:
        raise not_found(session_id)
    searched = searched_terms(scope.terms, {t: n for _, t, n in held if t is not None})
    if not searched.terms:
        return []
    tag = session_tag(held[0][0])
    params = {
        "query": tsquery(tag + term for term in searched.terms),
        "session": session_id,
        "before": seq_bound(scope.before),
        "after": -seq_bound(None) if scope.after is None else seq_bound(scope.after),
        "roles": scope.roles,
        "limit": limit,
        "skip": CANDIDATES - 1,
        "floor": 0,
    }
    # Planned for each call's words (never a prepared generic plan): a plan
    # that does not know how rare they are reads the whole session instead
    # of the index, over 100 ms at a 100k log.
    if searched.newest_only:
        row = cur.execute(q.FLOOR_SQL, params, prepare=False).fetchone()
        params["floor"] = 0 if row is None else row[0]
    found = cur.execute(q.SEARCH_SQL, params, prepare=False).fetchall()
    return [SearchHit(int(seq), float(score)) for seq, score in found]
