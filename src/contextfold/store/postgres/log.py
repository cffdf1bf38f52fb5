"""What a PostgreSQL append sends: the new messages as columns for the one statement
that numbers and inserts them (``sql.APPEND_SQL``).

Plain functions over the append's cursor, so ``PostgresStore.append`` runs
``insert`` alone (a batch no rule of ``contextfold.core.order`` reads the log
for: no keys, no tool results) or ``insert_checked`` inside the transaction
that holds the session's row lock while it reads the log's tail and checks the
batch against it; a concurrent append waits for that lock, so none slips in
between the check and the write.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from contextfold.core.branches import BranchPath
from contextfold.core.log import LoggedMessage, NewMessage
from contextfold.core.order import Tail, needs_calls, open_calls
from contextfold.store import rows
from contextfold.store.checks import check_batch, resumed
from contextfold.store.postgres import sql as q
from contextfold.store.postgres.pool import Cursor, one_row, require
from contextfold.store.search import index_text, term_counts
from contextfold.store.tree import missing, run_start

Prepared = tuple[NewMessage, str, str, list[str]]
"""A message checked for the log: itself, its role, its JSON and its tool call ids."""


def unchecked(prepared: Sequence[Prepared]) -> bool:
    """Whether no rule reads the log for this batch: no keys and no tool results."""
    batch = [p[0] for p in prepared]
    return not any(new.key for new in batch) and not needs_calls(new.message for new in batch)


def insert_checked(
    cur: Cursor,
    session_id: str,
    prepared: Sequence[Prepared],
    channel: str,
    parent: int | None = None,
    whole_keys: bool = False,
) -> tuple[list[LoggedMessage], bool]:
    """``insert`` after ``check_batch`` against the branch the batch continues (after
    ``parent``, else after the last seq, or after its leading messages when they are
    logged already under their keys), both under the session's row lock (taken here);
    the caller's transaction holds it until the commit."""
    batch = [p[0] for p in prepared]
    last = int(one_row(cur, q.LOCK_SESSION_SQL, (session_id,), session_id)[0])
    after = last if parent is None else parent
    place = None  # after the last seq, in the newest message's run (APPEND_SQL)
    if parent is not None:
        place = (parent, _run_after(cur, session_id, parent, last))
    keys = sorted({new.key for new in batch if new.key})
    known: dict[str, LoggedMessage] = {}
    if keys:
        for row in cur.execute(q.KEYS_SQL, (session_id, keys)).fetchall():
            logged = rows.logged(session_id, row)
            known[str(logged.key)] = logged
    at = resumed(batch, known, after)
    if at is not None and at != after:
        after = at
        place = (at, _run_after(cur, session_id, at, last))
    keyed = {key: logged.message for key, logged in known.items()}
    messages = [new.message for new in batch]
    tail = Tail(keyed=keyed)
    if needs_calls(messages):
        params = {"session": session_id, "head": after}
        chain = cur.execute(q.CHAIN_RUN_SQL, params).fetchall()
        answered = sorted({str(m.get("tool_call_id")) for m in messages})
        called = cur.execute(q.CALLED_IDS_SQL, (session_id, answered)).fetchall()
        tail = Tail(
            0,
            open_calls(rows.logged(session_id, row).message for row in chain),
            frozenset(str(row[0]) for row in called),
            keyed,
        )
    check_batch(
        tail,
        batch,
        lambda: read_path(cur, session_id, after, "parent").length,
        whole_keys=whole_keys,
    )
    return insert(cur, session_id, prepared, known, channel, place)


def _run_after(cur: Cursor, session_id: str, parent: int, last: int) -> int:
    """The run of a message appended after ``parent`` (a logged seq, or 0) as seq ``last + 1``."""
    found = cur.execute(q.RUN_OF_SQL, (session_id, parent)).fetchone() if parent else (0,)
    if found is None:
        raise missing("parent", parent)
    return run_start(parent, last + 1, int(found[0]))


def read_path(cur: Cursor, session_id: str, head: int, field: str) -> BranchPath:
    """The branch ending at ``head`` (a logged seq; 0: none), read a run at a time."""
    if head == 0:
        return BranchPath()
    found = cur.execute(q.PATH_SQL, {"session": session_id, "head": head}).fetchall()
    if not found:
        raise missing(field, head)
    return BranchPath(tuple((int(first), int(last)) for first, last in reversed(found)))


def insert(
    cur: Cursor,
    session_id: str,
    prepared: Sequence[Prepared],
    known: dict[str, LoggedMessage],
    channel: str,
    place: tuple[int, int] | None = None,
) -> tuple[list[LoggedMessage], bool]:
    """Log what ``known`` (records by key) does not hold yet: a record for each
    message, and whether anything new was logged (and so notified on ``channel``).

    ``place`` is the first new message's parent and run; None: after the last seq,
    in the newest message's run."""
    fresh: list[NewMessage] = []
    columns: dict[str, list[Any]] = {
        name: [] for name in ("roles", "messages", "tokens", "keys", "words", "call_ids", "call_at")
    }
    places: list[LoggedMessage | int] = []
    first: dict[str, int] = {}
    for new, role, message_json, call_ids in prepared:
        if new.key and new.key in known:
            places.append(known[new.key])
        elif new.key and new.key in first:
            places.append(first[new.key])
        else:
            fresh.append(new)
            index = len(fresh)
            for name, value in (
                ("roles", role),
                ("messages", message_json),
                ("tokens", new.tokens),
                ("keys", new.key or None),
                ("words", index_text(new.message)),
            ):
                columns[name].append(value)
            columns["call_ids"] += call_ids
            columns["call_at"] += [index] * len(call_ids)
            if new.key:
                first[new.key] = index
            places.append(index)
    if not fresh:
        require(cur, session_id)
        return [p for p in places if isinstance(p, LoggedMessage)], False
    now = time.time()
    counts = term_counts(columns["words"])
    params = {
        "terms": list(counts),
        "term_counts": list(counts.values()),
        "session": session_id,
        "n": len(fresh),
        "now": now,
        "channel": channel,
        "total": sum(columns["tokens"]),
        "parent": None if place is None else place[0],
        "run": None if place is None else place[1],
        **columns,
    }
    seq0, parent0, _ = one_row(cur, q.APPEND_SQL, params, session_id)
    seq0, parent0 = int(seq0), int(parent0)
    logged = [
        LoggedMessage(
            seq0 + i,
            new.message,
            new.tokens,
            new.key or None,
            now,
            parent0 if i == 1 else seq0 + i - 1,
        )
        for i, new in enumerate(fresh, 1)
    ]
    return [p if isinstance(p, LoggedMessage) else logged[p - 1] for p in places], True
