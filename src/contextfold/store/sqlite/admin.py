"""The SQLite store's statements for what a service asks beside the log: listings,
a session's figures, removing a session whole, and API keys.

Plain functions over an open connection, so ``SQLiteStore`` runs each inside
its own read or write transaction.
"""

from __future__ import annotations

import sqlite3
import time

from contextfold.core.errors import InvalidInput, NotFound
from contextfold.core.log import ApiKey, SessionInfo
from contextfold.store import rows
from contextfold.store.checks import fold_ascii
from contextfold.store.search import SEQ_BITS

# SQLite's lower() folds ASCII letters only, which is what ServiceStore.list_sessions promises.
LIST_SQL = (
    "SELECT id FROM sessions WHERE id >= :prefix AND substr(id, 1, :n) = :prefix "
    "AND (:after IS NULL OR id > :after) "
    "AND (:needle = '' OR instr(lower(substr(id, :n + 1)), :needle) > 0) "
    "ORDER BY id LIMIT :limit"
)
INFO_SQL = (
    "SELECT s.id, s.encoding, s.meta, s.created_at, "
    "MAX(s.last_seq, COALESCE(MAX(m.seq), 0)), COUNT(m.seq), COALESCE(SUM(m.tokens), 0), "
    "MAX(m.created_at) "
    "FROM sessions AS s LEFT JOIN messages AS m ON m.session_id = s.id WHERE s.id = ? "
    "GROUP BY s.id"
)
# Children before parents: the foreign keys are enforced. The search index's rows
# are the range of rowids under the session's search number (search.index_rowid).
_NUMBER = "(SELECT search_number FROM sessions WHERE id = ?1)"
DELETE_SQL = (
    f"DELETE FROM message_text WHERE rowid > {_NUMBER} << {SEQ_BITS} "
    f"AND rowid < ({_NUMBER} + 1) << {SEQ_BITS}",
    *(
        f"DELETE FROM {table} WHERE {column} = ?"
        for table, column in (
            ("search_terms", "session_id"),
            ("tool_calls", "session_id"),
            ("folds", "session_id"),
            ("fold_versions", "session_id"),
            ("leases", "session_id"),
            ("views", "session_id"),
            ("messages", "session_id"),
            ("sessions", "id"),
        )
    ),
)
_KEY_COLUMNS = rows.API_KEY_COLUMNS
PUT_KEY_SQL = f"INSERT INTO api_keys ({_KEY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"
GET_KEY_SQL = f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE id = ?"
ALL_KEYS_SQL = f"SELECT {_KEY_COLUMNS} FROM api_keys ORDER BY created_at, id"
TENANT_KEYS_SQL = f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE tenant = ? ORDER BY created_at, id"
REVOKE_KEY_SQL = "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL"


def list_sessions(
    conn: sqlite3.Connection, prefix: str, after: str | None, limit: int | None, search: str | None
) -> list[str]:
    params = {
        "prefix": prefix,
        "n": len(prefix),
        "after": after,
        "needle": fold_ascii(search or ""),
        "limit": -1 if limit is None else limit,
    }
    return [row[0] for row in conn.execute(LIST_SQL, params)]


def session_info(conn: sqlite3.Connection, session_id: str) -> SessionInfo:
    row = conn.execute(INFO_SQL, (session_id,)).fetchone()
    if row is None:
        raise NotFound(f"no session {session_id!r}")
    return rows.session_info(row)


def delete_session(conn: sqlite3.Connection, session_id: str) -> bool:
    gone = 0
    for statement in DELETE_SQL:
        gone = conn.execute(statement, (session_id,)).rowcount
    return gone > 0


def put_api_key(conn: sqlite3.Connection, key: ApiKey) -> None:
    if conn.execute(GET_KEY_SQL, (key.id,)).fetchone() is not None:
        raise InvalidInput(f"an API key with id {key.id!r} exists", field="id")
    conn.execute(
        PUT_KEY_SQL,
        rows.api_key_params(key),
    )


def get_api_key(conn: sqlite3.Connection, key_id: str) -> ApiKey | None:
    row = conn.execute(GET_KEY_SQL, (key_id,)).fetchone()
    return None if row is None else rows.api_key(row)


def list_api_keys(conn: sqlite3.Connection, tenant: str | None) -> list[ApiKey]:
    found = (
        conn.execute(ALL_KEYS_SQL) if tenant is None else conn.execute(TENANT_KEYS_SQL, (tenant,))
    )
    return [rows.api_key(row) for row in found]


def revoke_api_key(conn: sqlite3.Connection, key_id: str) -> bool:
    return conn.execute(REVOKE_KEY_SQL, (time.time(), key_id)).rowcount > 0
