"""Tool units and rounds, the spans nothing may split.

A tool unit is an assistant message with ``tool_calls`` plus every tool message
answering those ids (a result answers the nearest earlier call with its id, as
real logs reuse ids); anything standing between a call and its last result
belongs to the unit too. A round (a TaskWeaver round, an ADR-0041 turn) is a
user message and everything up to the next one; the last round is in progress
until an assistant message without tool calls closes it.

All spans are inclusive index ranges ``(i, j)`` into a list of entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from contextfold.core.entries import Entry


def unit_spans(entries: Sequence[Entry]) -> list[tuple[int, int]]:
    """Partition ``entries`` into units: tool units, and single entries otherwise."""
    caller: dict[str, int] = {}
    reach = list(range(len(entries)))
    for i, entry in enumerate(entries):
        msg = entry.message
        if msg is None:
            continue
        if msg["role"] == "assistant":
            for call in msg.get("tool_calls") or ():
                caller[call["id"]] = i
        elif msg["role"] == "tool":
            start = caller.get(msg.get("tool_call_id", ""))
            if start is not None:
                reach[start] = max(reach[start], i)
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(entries):
        end = reach[i]
        j = i
        while j < end:
            j += 1
            end = max(end, reach[j])
        spans.append((i, end))
        i = end + 1
    return spans


@dataclass(frozen=True)
class Round:
    """A round's span over entries; ``closed`` is False for the round in progress."""

    first: int
    last: int
    closed: bool
    has_user: bool


def round_spans(entries: Sequence[Entry]) -> list[Round]:
    """Rounds over ``entries``, never splitting a unit.

    Entries before the first user message form a round without a user
    (``has_user`` False), such as an opening greeting or a leading fold.
    """
    units = unit_spans(entries)
    starts: list[int] = []
    for i, (first, _) in enumerate(units):
        if i == 0 or entries[first].role == "user":
            starts.append(i)
    rounds: list[Round] = []
    for k, ui in enumerate(starts):
        uj = starts[k + 1] - 1 if k + 1 < len(starts) else len(units) - 1
        first, last = units[ui][0], units[uj][1]
        closed = k + 1 < len(starts) or _closes(entries[last])
        rounds.append(Round(first, last, closed, entries[first].role == "user"))
    return rounds


def _closes(entry: Entry) -> bool:
    msg = entry.message
    if msg is None:
        return True
    return msg["role"] == "assistant" and not msg.get("tool_calls")
