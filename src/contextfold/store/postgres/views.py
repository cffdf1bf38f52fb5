"""The PostgreSQL store's write of a view record: one statement per kind of update.

What ``PostgresStore.put_view`` runs in its transaction: an upsert, a create
that must find no record, or an update that must find ``expected_version``.
"""

from __future__ import annotations

from typing import Any

import psycopg

from contextfold.core.errors import ViewConflict
from contextfold.store.postgres import sql as q
from contextfold.store.postgres.pool import one_row, session_must_exist

Cursor = psycopg.Cursor[tuple[Any, ...]]


def write_view(
    cur: Cursor,
    session_id: str,
    name: str,
    config_json: str,
    expected_version: int | None,
    now: float,
) -> int:
    """Store the view's configuration; its new version, or ``ViewConflict``."""
    with session_must_exist(session_id):
        if expected_version is None:
            row = cur.execute(q.UPSERT_VIEW_SQL, (session_id, name, config_json, now)).fetchone()
        elif expected_version == 0:
            row = cur.execute(q.CREATE_VIEW_SQL, (session_id, name, config_json, now)).fetchone()
        else:
            row = cur.execute(
                q.UPDATE_VIEW_SQL, (config_json, now, session_id, name, expected_version)
            ).fetchone()
    if row is None:
        params = {"session": session_id, "view": name}
        actual = one_row(cur, q.VIEW_VERSION_SQL, params, session_id)[0]
        raise ViewConflict(name, int(expected_version or 0), int(actual or 0))
    return int(row[0])
