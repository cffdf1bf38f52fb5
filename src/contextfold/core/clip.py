"""Clipping: a message too big for the room left is shortened, with a visible marker.

Render clips the newest unit that does not fit (and a facts fold too big for
the budget) instead of dropping it, when the room left is worth using. Only
the longest string contents are shortened; the log keeps every message whole.
"""

from __future__ import annotations

from collections.abc import Sequence

from contextfold.core.entries import Entry
from contextfold.core.messages import Message, for_model
from contextfold.core.tokens import TokenCounter


def changed_seqs(unit: Sequence[Entry], fitted: Sequence[Message]) -> list[int]:
    """Seqs of the raw messages in ``unit`` that clipping shortened."""
    seqs: list[int] = []
    i = 0
    for entry in unit:
        if entry.fold is None and fitted[i] != for_model(entry.messages[0]):
            seqs.append(entry.start)
        i += len(entry.messages)
    return seqs


def clip_unit(
    unit: Sequence[Entry], room: int, counter: TokenCounter
) -> tuple[list[Message], int] | None:
    """A unit's messages shortened to cost at most ``room``, and their exact cost."""
    msgs = [for_model(m) for e in unit for m in e.messages]
    # A raw message's count is stored: a huge tool output is not tokenized again here.
    known = [e.tokens if e.fold is None else None for e in unit for _ in e.messages]
    return clip_messages(msgs, room, counter, known)


def clip_messages(
    msgs: list[Message],
    room: int,
    counter: TokenCounter,
    known: Sequence[int | None] | None = None,
) -> tuple[list[Message], int] | None:
    """Shorten the longest string contents until ``msgs`` cost at most ``room``: the
    messages and their exact cost, or None if impossible.

    ``known`` holds counts already known per message (None where not); a
    shortened message is counted afresh, so the cost follows what is kept.
    """
    msgs = [dict(m) for m in msgs]
    costs = [
        counter.message(m) if known is None or known[i] is None else int(known[i] or 0)
        for i, m in enumerate(msgs)
    ]
    for _ in range(8):
        over = sum(costs) - room
        if over <= 0:
            return msgs, sum(costs)
        sized = [
            (costs[i] - counter.message({**m, "content": ""}), i)
            for i, m in enumerate(msgs)
            if isinstance(m.get("content"), str)
        ]
        if not sized:
            return None
        size, i = max(sized)
        marker_cost = 40
        keep = size - over - marker_cost
        if keep <= 0:
            if size == 0:
                return None
            keep = 0
        overhead = costs[i] - size
        msgs[i]["content"], kept = _clipped(msgs[i]["content"], keep, size, counter)
        costs[i] = overhead + kept
    return (msgs, sum(costs)) if sum(costs) <= room else None


def _clipped(
    text: str, keep_tokens: int, total_tokens: int, counter: TokenCounter
) -> tuple[str, int]:
    """The head of ``text`` worth about ``keep_tokens``, then a marker saying what was cut;
    and the exact tokens of that, counted once in the usual case."""
    cut = max(0, int(len(text) * keep_tokens / max(total_tokens, 1)))
    while True:
        head = text[:cut]
        marker = _clip_marker(total_tokens - keep_tokens)
        clipped = head + marker
        tokens = counter.text(clipped)
        if not head or tokens - counter.text(marker) <= keep_tokens:
            return clipped, tokens
        cut = int(cut * 0.9)


def _clip_marker(left_out: int) -> str:
    return f"\n[contextfold: clipped, {left_out} tokens of this message left out; the log keeps it whole]"
