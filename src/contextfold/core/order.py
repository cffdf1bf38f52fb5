"""What may follow what in a log: the one rule every store checks inside its write.

A check made before the write transaction lets a concurrent append slip in
between (a user message between a call and its result, a call answered
twice), and a prompt in that order is refused by providers on every later
turn. So each store reads the log's ``Tail`` under its write lock (SQLite's
``BEGIN IMMEDIATE``, PostgreSQL's session row lock, the RAM store's lock) and
asks ``first_violation`` whether the batch may follow it; nothing of a batch
with a violation is written. The rules:

- a tool result answers one of the ids still open in the call unit the log
  (or the batch so far) ends with: it follows its call directly, in the run of
  tool messages after it, and answers each id once. A call left unanswered when
  another message follows is answered at render (``core.units.answer_missing``);
  its late result is refused;
- the session's system prompt (logged under ``SYSTEM_KEY``) is the first
  message of the log, and there is one;
- an idempotency key names one message: a key already logged with the same
  message is a retry (that message is not written again), with another message
  a conflict.

The function is pure (no store, no I/O), so every backend shares it, and
``core.messages.validate_messages`` checks a whole conversation with it too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextfold.core.errors import InvalidInput

SYSTEM_KEY = "contextfold:system"
"""The idempotency key the session's system prompt is logged under."""


@dataclass(frozen=True)
class Tail:
    """What the rules need of the log before a batch, read under the store's write lock.

    ``open_calls``: ids of the call unit the log ends with that no result has
    answered yet (empty unless the log ends with a call and its results so far).
    ``called``: which of the batch's result ids any logged message called, only
    to say why a late result is refused. ``keyed``: the logged message under
    each of the batch's keys that is taken.
    """

    last_seq: int = 0
    open_calls: frozenset[str] = frozenset()
    called: frozenset[str] = frozenset()
    keyed: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


def call_ids(message: Mapping[str, Any]) -> set[str]:
    """The ids a message calls as tools (none for anything but an assistant call)."""
    return {str(c.get("id")) for c in message.get("tool_calls") or ()}


def open_calls(run: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The ids left open by a log ending with ``run``: its messages from the last
    one that is not a tool result, oldest first."""
    pending: set[str] = set()
    for message in run:
        if message.get("role") == "tool":
            pending.discard(str(message.get("tool_call_id")))
        else:
            pending = call_ids(message)
    return frozenset(pending)


def needs_calls(messages: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a batch holds a tool result, so its store must read the open calls."""
    return any(m.get("role") == "tool" for m in messages)


def first_violation(
    tail: Tail,
    messages: Sequence[Mapping[str, Any]],
    keys: Sequence[str | None] = (),
) -> InvalidInput | None:
    """The first rule the batch breaks after ``tail``, or None when it may be logged.

    The error's ``index`` is the message's place in the log counted from 0
    (``tail.last_seq`` plus its index in the batch), as every input error
    names it, and its ``field`` the one at fault.
    """
    pending = set(tail.open_calls)
    called = set(tail.called)
    written: dict[str, Mapping[str, Any]] = {}
    logged = tail.last_seq
    for i, message in enumerate(messages):
        index = tail.last_seq + i
        key = keys[i] if i < len(keys) else None
        if key:
            earlier = written.get(key, tail.keyed.get(key))
            if earlier is not None:
                if dict(earlier) != dict(message):
                    return _reused(key, index)
                continue  # a retry: logged already, not written again
            written[key] = message
        if key == SYSTEM_KEY and logged:
            return InvalidInput(
                f"the system prompt must be the first message, and the log holds {logged} "
                "without one",
                index=index,
                field="system",
            )
        if message.get("role") == "tool":
            call_id = str(message.get("tool_call_id"))
            if call_id not in pending:
                return InvalidInput(_late(call_id, called), index=index, field="tool_call_id")
            pending.discard(call_id)
        else:
            pending = call_ids(message)
            called |= pending
        logged += 1
    return None


def _reused(key: str, index: int) -> InvalidInput:
    if key == SYSTEM_KEY:
        return InvalidInput(
            "the session has another system prompt; a session keeps the one it was created with",
            index=index,
            field="system",
        )
    return InvalidInput(
        f"idempotency key {key!r} names another message already; use a new key for a new message",
        index=index,
        field="key",
    )


def _late(call_id: str, called: set[str]) -> str:
    if call_id not in called:
        return f"tool result answers id {call_id!r}, which no earlier assistant message called"
    return (
        f"tool result for call {call_id!r} must follow its call: it belongs to the run of "
        "tool messages right after the assistant message that called it, and answers it "
        "once (another message came between, or the call is answered already)"
    )
