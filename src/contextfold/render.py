"""Render: the message list for one model call, within a token budget.

Order: system prompt, the facts fold if any, then folds and raw messages in log
order. Entries are consumed newest first from a lazy iterator, so the cost grows
with what is returned, not with the history behind it.

When folds alone do not fit, a deterministic last-resort cut keeps the newest
whole units and puts one marker where the older ones were. It never drops the
system prompt, the latest user message or part of a tool unit. The newest unit
that does not fit is clipped with a visible marker instead of dropped, when the
room left is worth using; the log keeps it whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from contextfold.entries import Entry
from contextfold.errors import BudgetError
from contextfold.folds import Fold
from contextfold.messages import Message, for_model
from contextfold.tokens import REPLY_PRIMING, TokenCounter

MIN_CLIP_TOKENS = 64
_MARKER_TOKENS = 24


@dataclass(frozen=True)
class Rendered:
    """A rendered prompt and what render did to fit it."""

    messages: list[Message]
    tokens: int
    omitted: int
    clipped: tuple[int, ...]
    folds: tuple[str, ...]


def render(
    *,
    system: Sequence[Message],
    newest_first: Iterable[Entry],
    counter: TokenCounter,
    budget: int | None = None,
    facts: Fold | None = None,
    latest_user: Entry | None = None,
) -> Rendered:
    """Fit ``system``, ``facts`` and the entries (newest first) into ``budget`` tokens.

    ``latest_user`` is the raw entry of the latest user message, if it is not
    folded: it is always rendered, and an error is raised if it cannot be.
    """
    head = [for_model(m) for m in system]
    head_tokens = REPLY_PRIMING + sum(counter.message(m) for m in head)
    user_tokens = latest_user.tokens if latest_user is not None else 0
    facts_msgs = [for_model(m) for m in facts.messages] if facts else []
    left: int | None = None
    if budget is not None:
        if head_tokens + user_tokens > budget:
            raise BudgetError(budget, head_tokens + user_tokens)
        room = budget - head_tokens - user_tokens
        if facts is not None and facts.tokens_after > room:
            facts_msgs = _clip_messages(facts_msgs, room, counter) or []
        left = room - sum(counter.message(m) for m in facts_msgs) - 2 * _MARKER_TOKENS

    taken: list[list[Message]] = []
    fold_ids: list[str] = [facts.id] if facts is not None and facts_msgs else []
    clipped: list[int] = []
    pinned: list[Message] = []
    omitted = {"before_user": 0, "after_user": 0}
    seen_user = False
    cut = False
    for unit in _units_newest_first(newest_first):
        if latest_user is not None and unit[0].fold is None and unit[0].start == latest_user.start:
            seen_user = True
            if cut:
                pinned = [for_model(latest_user.messages[0])]
            else:
                taken.append([for_model(latest_user.messages[0])])
            continue
        if cut:
            omitted["before_user" if seen_user or latest_user is None else "after_user"] += _size(
                unit
            )
            continue
        cost = sum(e.tokens for e in unit)
        if left is None or cost <= left:
            taken.append([for_model(m) for e in unit for m in e.messages])
            fold_ids.extend(e.fold.id for e in unit if e.fold is not None)
            if left is not None:
                left -= cost
            continue
        cut = True
        fitted = None
        if left >= MIN_CLIP_TOKENS or (not taken and left > 0):
            fitted = _clip_unit(unit, left, counter)
        if fitted is None:
            omitted["before_user" if seen_user or latest_user is None else "after_user"] += _size(
                unit
            )
            continue
        taken.append(fitted)
        fold_ids.extend(e.fold.id for e in unit if e.fold is not None)
        clipped.extend(e.start for e in unit if e.fold is None)

    body: list[Message] = []
    if omitted["before_user"]:
        body.append(_marker(omitted["before_user"]))
    body.extend(pinned)
    if omitted["after_user"]:
        body.append(_marker(omitted["after_user"]))
    for unit_msgs in reversed(taken):
        body.extend(unit_msgs)
    out = head + facts_msgs + body
    return Rendered(
        out,
        counter.messages(out),
        omitted["before_user"] + omitted["after_user"],
        tuple(sorted(clipped)),
        tuple(fold_ids),
    )


def _size(unit: Sequence[Entry]) -> int:
    """Log messages a unit stands for (a fold stands for its whole range)."""
    return sum(e.end - e.start + 1 for e in unit)


def _units_newest_first(entries: Iterable[Entry]) -> Iterator[list[Entry]]:
    """Group entries, read newest first, into whole tool units (oldest entry first).

    Tool results whose call is not in the stream (a view that filtered the call
    out) are dropped: an orphan result is an invalid prompt.
    """
    pending: set[str] = set()
    unit: list[Entry] = []
    for entry in entries:
        msg = entry.message
        if msg is not None and msg["role"] == "tool":
            pending.add(str(msg.get("tool_call_id")))
            unit.append(entry)
            continue
        if msg is not None and msg["role"] == "assistant" and msg.get("tool_calls"):
            pending -= {c["id"] for c in msg["tool_calls"]}
        unit.append(entry)
        if not pending:
            yield unit[::-1]
            unit = []
    if unit:
        orphans = [e for e in unit if e.message is None or e.message["role"] != "tool"]
        if orphans:
            yield orphans[::-1]


def _marker(count: int) -> Message:
    noun = "message" if count == 1 else "messages"
    return {
        "role": "system",
        "content": f"[contextfold: {count} earlier {noun} left out to fit the token budget]",
    }


def _clip_unit(unit: Sequence[Entry], room: int, counter: TokenCounter) -> list[Message] | None:
    msgs = [for_model(m) for e in unit for m in e.messages]
    return _clip_messages(msgs, room, counter)


def _clip_messages(msgs: list[Message], room: int, counter: TokenCounter) -> list[Message] | None:
    """Shorten the longest string contents until ``msgs`` cost at most ``room``; None if impossible."""
    msgs = [dict(m) for m in msgs]
    for _ in range(8):
        over = sum(counter.message(m) for m in msgs) - room
        if over <= 0:
            return msgs
        sized = [
            (counter.text(m["content"]), i)
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
        msgs[i]["content"] = clip_text(msgs[i]["content"], keep, size, counter)
    return msgs if sum(counter.message(m) for m in msgs) <= room else None


def clip_text(text: str, keep_tokens: int, total_tokens: int, counter: TokenCounter) -> str:
    """The head of ``text`` worth about ``keep_tokens``, then a marker saying what was cut."""
    cut = max(0, int(len(text) * keep_tokens / max(total_tokens, 1)))
    head = text[:cut]
    while head and counter.text(head) > keep_tokens:
        head = head[: int(len(head) * 0.9)]
    left_out = total_tokens - counter.text(head)
    return f"{head}\n[contextfold: clipped, {left_out} tokens of this message left out; the log keeps it whole]"
