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

from contextfold.core.branches import BranchPath
from contextfold.core.errors import NotFound
from contextfold.core.log import LoggedMessage, NewMessage
from contextfold.core.order import Tail, needs_calls, open_calls
from contextfold.store import rows
from contextfold.store.checks import check_batch, resumed
from contextfold.store.search import (
    FTS5_INSERT_SQL,
    index_rowid,
    index_text,
    session_tag,
    tagged,
    term_counts,
)
from contextfold.store.sqlite import sql as q
from contextfold.store.tree import missing, run_start


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
    conn: sqlite3.Connection,
    session_id: str,
    batch: Sequence[NewMessage],
    parent: int | None = None,
    *,
    whole_keys: bool = False,
) -> list[LoggedMessage]:
    """Check the batch against the tail of the branch it continues and log it, inside the
    caller's write: its first message after ``parent`` (None: the newest message), or
    after its leading messages when they are logged already under their keys."""
    prepared = [rows.prepare(i, new) for i, new in enumerate(batch)]
    last, number, newest, newest_run = one_row(conn, q.APPEND_HEAD_SQL, (session_id,), session_id)
    seq = int(last or 0)
    if parent is None:
        after, run = int(newest or 0), int(newest_run or 0)
    else:
        after, run = parent, _run_of(conn, session_id, parent)
    known = _keyed(conn, session_id, batch)
    at = resumed(batch, known, after)
    if at is not None and at != after:
        after, run = at, _run_of(conn, session_id, at)
    check_batch(
        _tail(conn, session_id, after, batch, known),
        batch,
        lambda: read_path(conn, session_id, after, "parent").length,
        whole_keys=whole_keys,
    )
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
        run = run_start(after, seq, run)
        conn.execute(
            q.INSERT_MESSAGE_SQL,
            (session_id, seq, role, message_json, new.tokens, key, now, after, run),
        )
        texts.append(index_text(new.message))
        conn.execute(FTS5_INSERT_SQL, (index_rowid(number, seq), tagged(tag, texts[-1])))
        if calls:
            conn.executemany(q.INSERT_CALL_SQL, [(session_id, call_id, seq) for call_id in calls])
        logged = LoggedMessage(seq, new.message, new.tokens, key, now, after)
        if key is not None:
            known[key] = logged
        out.append(logged)
        after = seq
    conn.execute(q.SET_LAST_SEQ_SQL, (seq, session_id))
    counts = term_counts(texts)
    conn.executemany(q.COUNT_TERMS_SQL, [(session_id, *c) for c in counts.items()])
    return out


def _run_of(conn: sqlite3.Connection, session_id: str, seq: int) -> int:
    """The run ``seq`` belongs to (0 for no message); a seq not logged is refused."""
    if seq == 0:
        return 0
    row = conn.execute(q.RUN_OF_SQL, (session_id, seq)).fetchone()
    if row is None:
        raise missing("parent", seq)
    return int(row[0])


def read_path(conn: sqlite3.Connection, session_id: str, head: int, field: str) -> BranchPath:
    """The branch ending at ``head`` (a logged seq; 0: none), read a run at a time."""
    if head == 0:
        return BranchPath()
    found = conn.execute(q.PATH_SQL, {"session": session_id, "head": head}).fetchall()
    if not found:
        raise missing(field, head)
    return BranchPath(tuple((int(first), int(last)) for first, last in reversed(found)))


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
    after: int,
    batch: Sequence[NewMessage],
    known: Mapping[str, LoggedMessage],
) -> Tail:
    """What ``first_violation`` needs of the branch before ``batch`` (the message ``after``
    and its tail of tool results), under the write lock; its length is ``check_batch``'s."""
    keyed = {key: logged.message for key, logged in known.items()}
    messages = [new.message for new in batch]
    if not needs_calls(messages):
        return Tail(keyed=keyed)
    params = {"session": session_id, "head": after}
    run = conn.execute(q.CHAIN_RUN_SQL, params).fetchall()
    answered = json.dumps(sorted({str(m.get("tool_call_id")) for m in messages}))
    called = conn.execute(q.CALLED_IDS_SQL, (session_id, answered)).fetchall()
    return Tail(
        0,
        open_calls(rows.logged(session_id, row).message for row in run),
        frozenset(row[0] for row in called),
        keyed,
    )
