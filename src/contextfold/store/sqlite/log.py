"""The SQLite store's append: the batch checked against the log's tail, read under
the file's write lock, then logged with its index rows.

Plain functions over the connection, run inside ``SQLiteStore``'s ``BEGIN
IMMEDIATE`` transaction, so no other process's append can come between the
check and the write.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Mapping, Sequence
from typing import Any

from contextfold.core.errors import NotFound
from contextfold.core.log import LoggedMessage, NewMessage
from contextfold.core.order import Tail, needs_calls, open_calls
from contextfold.store import rows
from contextfold.store.checks import check_batch
from contextfold.store.search import (
    FTS5_INSERT_SQL,
    index_rowid,
    index_text,
    session_tag,
    tagged,
    term_counts,
)
from contextfold.store.sqlite import sql as q


def not_found(session_id: str) -> NotFound:
    return NotFound(f"no session {session_id!r}")


def one_row(
    conn: sqlite3.Connection, sql: str, params: Mapping[str, Any] | tuple[Any, ...], sid: str
) -> tuple[Any, ...]:
    """The one row of a statement over ``sessions``; none means an unknown session."""
    row: tuple[Any, ...] | None = conn.execute(sql, params).fetchone()
    if row is None:
        raise not_found(sid)
    return row


def append(
    conn: sqlite3.Connection, session_id: str, batch: Sequence[NewMessage]
) -> list[LoggedMessage]:
    """Check the batch against the log's tail and log it, inside the caller's write."""
    prepared = [rows.prepare(i, new) for i, new in enumerate(batch)]
    last, number = one_row(conn, q.APPEND_HEAD_SQL, (session_id,), session_id)
    seq = int(last or 0)
    known = _keyed(conn, session_id, batch)
    check_batch(_tail(conn, session_id, seq, batch, known), batch)
    tag = session_tag(number)
    now = time.time()
    out: list[LoggedMessage] = []
    texts: list[str] = []
    for new, role, message_json, calls in prepared:
        if new.key and new.key in known:
            out.append(known[new.key])
            continue
        seq += 1
        key = new.key or None
        conn.execute(
            q.INSERT_MESSAGE_SQL,
            (session_id, seq, role, message_json, new.tokens, key, now),
        )
        texts.append(index_text(new.message))
        conn.execute(FTS5_INSERT_SQL, (index_rowid(number, seq), tagged(tag, texts[-1])))
        if calls:
            conn.executemany(q.INSERT_CALL_SQL, [(session_id, call_id, seq) for call_id in calls])
        logged = LoggedMessage(seq, new.message, new.tokens, key, now)
        if key is not None:
            known[key] = logged
        out.append(logged)
    conn.execute(q.SET_LAST_SEQ_SQL, (seq, session_id))
    counts = term_counts(texts)
    conn.executemany(q.COUNT_TERMS_SQL, [(session_id, *c) for c in counts.items()])
    return out


def _keyed(
    conn: sqlite3.Connection, session_id: str, batch: Sequence[NewMessage]
) -> dict[str, LoggedMessage]:
    """The records logged under the batch's keys, read under the write lock."""
    keys = sorted({new.key for new in batch if new.key})
    if not keys:
        return {}
    found = conn.execute(q.KEYED_SQL, (session_id, json.dumps(keys))).fetchall()
    return {str(m.key): m for m in (rows.logged(session_id, row) for row in found)}


def _tail(
    conn: sqlite3.Connection,
    session_id: str,
    last_seq: int,
    batch: Sequence[NewMessage],
    known: Mapping[str, LoggedMessage],
) -> Tail:
    """What ``first_violation`` needs of the log before ``batch``, under the write lock."""
    keyed = {key: logged.message for key, logged in known.items()}
    messages = [new.message for new in batch]
    if not needs_calls(messages):
        return Tail(last_seq, keyed=keyed)
    run = conn.execute(q.TAIL_RUN_SQL, (session_id, session_id)).fetchall()
    answered = json.dumps(sorted({str(m.get("tool_call_id")) for m in messages}))
    called = conn.execute(q.CALLED_IDS_SQL, (session_id, answered)).fetchall()
    return Tail(
        last_seq,
        open_calls(rows.logged(session_id, row).message for row in run),
        frozenset(row[0] for row in called),
        keyed,
    )
