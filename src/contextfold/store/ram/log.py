"""What the in-memory store checks an append against: the log's tail and each
message's tool calls, read under the store's lock like a database's write.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence

from contextfold.core.errors import InvalidInput
from contextfold.core.log import LoggedMessage, NewMessage
from contextfold.core.order import Tail, needs_calls, open_calls


def tail_of(
    log: Sequence[LoggedMessage],
    keys: Mapping[str, LoggedMessage],
    calls: set[str],
    after: int,
    batch: Sequence[NewMessage],
) -> Tail:
    """What ``first_violation`` needs of the branch before ``batch``; the caller holds the lock.

    ``keys`` are the session's keyed records, ``calls`` every tool-call id it logged,
    ``after`` the message the batch follows; the branch's length is ``check_batch``'s.
    """
    messages = [new.message for new in batch]
    if not needs_calls(messages):
        pending: frozenset[str] = frozenset()
        called: frozenset[str] = frozenset()
    else:
        run: list[LoggedMessage] = []
        seq = after
        while seq > 0:
            logged = log[bisect.bisect_left(log, seq, key=lambda m: m.seq)]
            run.append(logged)
            if logged.role != "tool":
                break
            seq = logged.parent or 0
        pending = open_calls(m.message for m in reversed(run))
        answered = {str(m.get("tool_call_id")) for m in messages}
        called = frozenset(answered & calls)
    keyed = {new.key: keys[new.key].message for new in batch if new.key and new.key in keys}
    return Tail(0, pending, called, keyed)


def calls_of(batch: Sequence[NewMessage]) -> list[list[str]]:
    """Each message's tool-call ids, checked before the log is touched."""
    return [checked_call_ids(i, new) for i, new in enumerate(batch)]


def checked_call_ids(index: int, new: NewMessage) -> list[str]:
    """Tool-call ids of a message, checked before the log is touched."""
    try:
        return [str(call["id"]) for call in new.message.get("tool_calls") or ()]
    except (KeyError, TypeError) as exc:
        raise InvalidInput("tool call without an id", index=index, field="tool_calls") from exc
