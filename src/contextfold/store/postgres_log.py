"""What a PostgreSQL append sends: the new messages as columns for the one statement
that numbers and inserts them (``postgres_sql.APPEND_SQL``).

A plain function over the append's cursor, so ``PostgresStore.append`` runs it
alone (no keys) or inside the transaction that holds the session's lock while
it looks the keys up.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from contextfold.core.log import LoggedMessage, NewMessage
from contextfold.store import postgres_sql as q
from contextfold.store.postgres_pool import Cursor, one_row, require
from contextfold.store.search import index_text, term_counts

Prepared = tuple[NewMessage, str, str, list[str]]
"""A message checked for the log: itself, its role, its JSON and its tool call ids."""


def insert(
    cur: Cursor,
    session_id: str,
    prepared: Sequence[Prepared],
    known: dict[str, LoggedMessage],
    channel: str,
) -> tuple[list[LoggedMessage], bool]:
    """Log what ``known`` (records by key) does not hold yet: a record for each
    message, and whether anything new was logged (and so notified on ``channel``)."""
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
        **columns,
    }
    seq0 = int(one_row(cur, q.APPEND_SQL, params, session_id)[0])
    logged = [
        LoggedMessage(seq0 + i, new.message, new.tokens, new.key or None, now)
        for i, new in enumerate(fresh, 1)
    ]
    return [p if isinstance(p, LoggedMessage) else logged[p - 1] for p in places], True
