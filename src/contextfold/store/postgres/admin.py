"""The PostgreSQL store's statements for what a service asks beside the log: listings,
a session's figures, removing a session whole, and API keys.

Plain functions over a cursor, so ``PostgresStore`` runs each inside its own
read or write. Removing a session is one ``DELETE``: every table's rows of a
session go with it by ``ON DELETE CASCADE`` (``migrations``), and with its
row goes its last seq, so a session made again under that id starts at seq 1.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg

from contextfold.core.errors import InvalidInput, NotFound
from contextfold.core.log import ApiKey, SessionInfo
from contextfold.store import rows
from contextfold.store.checks import fold_ascii

# Ids are in the "C" collation: they sort by code point, and lower() folds ASCII
# letters only, which is what ServiceStore.list_sessions promises. ``below`` bounds the index
# scan to the prefix's range, so a small tenant in a large table is read alone.
LIST_SQL = (
    "SELECT id FROM sessions WHERE id >= %(prefix)s "
    "AND (%(below)s::text IS NULL OR id < %(below)s) AND starts_with(id, %(prefix)s) "
    "AND (%(after)s::text IS NULL OR id > %(after)s) "
    "AND (%(needle)s = '' OR strpos(lower(substr(id, %(skip)s) COLLATE \"C\"), %(needle)s) > 0) "
    "ORDER BY id LIMIT %(limit)s"
)
# One row: each append keeps the session's figures (migrations).
INFO_SQL = (
    "SELECT id, encoding, meta, created_at, last_seq, messages, tokens, last_at "
    "FROM sessions WHERE id = %s"
)
DELETE_SQL = "DELETE FROM sessions WHERE id = %s"

_KEY_COLUMNS = rows.API_KEY_COLUMNS
PUT_KEY_SQL = (
    f"INSERT INTO api_keys ({_KEY_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (id) DO NOTHING"
)
GET_KEY_SQL = f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE id = %s"
ALL_KEYS_SQL = f"SELECT {_KEY_COLUMNS} FROM api_keys ORDER BY created_at, id"
TENANT_KEYS_SQL = f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE tenant = %s ORDER BY created_at, id"
REVOKE_KEY_SQL = "UPDATE api_keys SET revoked_at = %s WHERE id = %s AND revoked_at IS NULL"

Cursor = psycopg.Cursor[tuple[Any, ...]]

_SURROGATES = range(0xD800, 0xE000)


def below(prefix: str) -> str | None:
    """The least string above every one starting with ``prefix``; None when there is none."""
    for end in range(len(prefix) - 1, -1, -1):
        code = ord(prefix[end]) + 1
        if code in _SURROGATES:
            code = _SURROGATES.stop
        if code <= 0x10FFFF:
            return prefix[:end] + chr(code)
    return None


def list_sessions(
    cur: Cursor, prefix: str, after: str | None, limit: int | None, search: str | None
) -> list[str]:
    params = {
        "prefix": prefix,
        "below": below(prefix),
        "after": after,
        "needle": fold_ascii(search or ""),
        "skip": len(prefix) + 1,
        "limit": limit,
    }
    return [row[0] for row in cur.execute(LIST_SQL, params)]


def session_info(cur: Cursor, session_id: str) -> SessionInfo:
    row = cur.execute(INFO_SQL, (session_id,)).fetchone()
    if row is None:
        raise NotFound(f"no session {session_id!r}")
    return rows.session_info(row)


def delete_session(cur: Cursor, session_id: str) -> bool:
    return cur.execute(DELETE_SQL, (session_id,)).rowcount > 0


def put_api_key(cur: Cursor, key: ApiKey) -> None:
    stored = cur.execute(
        PUT_KEY_SQL,
        rows.api_key_params(key),
    ).rowcount
    if not stored:
        raise InvalidInput(f"an API key with id {key.id!r} exists", field="id")


def get_api_key(cur: Cursor, key_id: str) -> ApiKey | None:
    row = cur.execute(GET_KEY_SQL, (key_id,)).fetchone()
    return None if row is None else rows.api_key(row)


def list_api_keys(cur: Cursor, tenant: str | None) -> list[ApiKey]:
    found = cur.execute(ALL_KEYS_SQL) if tenant is None else cur.execute(TENANT_KEYS_SQL, (tenant,))
    return [rows.api_key(row) for row in found]


def revoke_api_key(cur: Cursor, key_id: str) -> bool:
    return cur.execute(REVOKE_KEY_SQL, (time.time(), key_id)).rowcount > 0
