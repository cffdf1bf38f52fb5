"""Render: the message list for one model call, within a token budget.

Order: system prompt, the facts fold if any, then folds and raw messages in log
order. Entries are consumed newest first from a lazy iterator and reading stops
at the first unit that does not fit, so the cost grows with what is returned,
not with the history behind it.

When folds alone do not fit, a deterministic last-resort cut keeps the newest
whole units and puts one marker where the older ones were (counts are of
logged messages, found from ``seq`` numbers without reading them). It never
drops the system prompt, the latest user message or part of a tool unit. The
newest unit that does not fit is clipped with a visible marker instead of
dropped, when the room left is worth using; the log keeps it whole. Room for
the markers is held back while reading, so the prompt never exceeds the budget.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from contextfold.core.entries import Entry
from contextfold.core.errors import BudgetError
from contextfold.core.folds import Fold
from contextfold.core.log import LoggedMessage
from contextfold.core.messages import Message, for_model
from contextfold.core.tokens import REPLY_PRIMING, TokenCounter
from contextfold.core.units import units_newest_first

MIN_CLIP_TOKENS = 64
_LARGEST_COUNT = 999_999_999


@dataclass(frozen=True)
class Rendered:
    """A rendered prompt and what render did to fit it."""

    messages: list[Message]
    tokens: int
    omitted: int
    clipped: tuple[int, ...]
    folds: tuple[str, ...]
    whole: bool = True
    """Nothing left out and nothing shortened, folds and facts included (``clipped``
    names raw messages only): the prompt is the view as it is."""
    budget: int | None = None
    """The budget the prompt was fit to (None: no budget)."""
    shown: tuple[int, ...] = ()
    """Seqs of the raw messages in the prompt (whole or clipped): what recall leaves out."""
    recall_at: int | None = None
    """Where a recall block goes in ``messages``: after the folds, before the run of
    recent raw messages that ends the prompt (``contextfold.memory.recalled``)."""
    recalled: tuple[int, ...] = ()
    """Seqs of the logged messages recalled into the prompt, in log order."""


def floor(system_tokens: int, latest_user: Entry | LoggedMessage | None) -> int:
    """The smallest budget ``render`` takes (below it, ``BudgetError``): the reply
    priming, the system prompt and the latest user message, which nothing may cut."""
    return REPLY_PRIMING + system_tokens + (latest_user.tokens if latest_user is not None else 0)


def render(
    *,
    system: Sequence[Message],
    newest_first: Iterable[Entry],
    counter: TokenCounter,
    budget: int | None = None,
    facts: Fold | None = None,
    latest_user: Entry | None = None,
    first_seq: int = 1,
    system_tokens: int | None = None,
) -> Rendered:
    """Fit ``system``, ``facts`` and the entries (newest first) into ``budget`` tokens.

    ``latest_user`` is the raw entry of the latest user message, if it is not
    folded: it is always rendered, and an error is raised if it cannot be.
    ``first_seq`` is the lowest seq the entries can start at (the first after
    the system prompt); markers count the messages left out from there.
    ``system_tokens`` is the system prompt's stored count, when the caller has it.

    Token totals add the counts stored with messages and folds; only what
    render itself writes (markers, clipped text) is tokenized here. Besides
    being cheaper, that keeps a turn from giving up the GIL (tokenizers release
    it) to a compaction running in another thread.
    """
    head = [for_model(m) for m in system]
    if system_tokens is None:
        system_tokens = sum(counter.message(m) for m in head)
    head_tokens = REPLY_PRIMING + system_tokens
    least = floor(system_tokens, latest_user)
    user_tokens = least - head_tokens
    marker_tokens = _marker_cost(counter)
    facts_msgs = [for_model(m) for m in facts.messages] if facts else []
    facts_tokens = facts.tokens_after if facts else 0
    left: int | None = None
    shortened = False
    if budget is not None:
        if least > budget:
            raise BudgetError(budget, least)
        room = budget - least
        if facts is not None and facts.tokens_after > room - 2 * marker_tokens:
            facts_msgs, facts_tokens = _clip_messages(
                facts_msgs, room - 2 * marker_tokens, counter
            ) or ([], 0)
            shortened = True
        left = room - facts_tokens

    taken: list[list[Message]] = []
    raw_units: list[bool] = []  # per taken unit: it holds no fold
    shown: set[int] = set()
    taken_tokens = 0
    fold_ids: list[str] = [facts.id] if facts is not None and facts_msgs else []
    clipped: list[int] = []
    edge: int | None = None  # lowest seq rendered from the entries so far
    user_seen = latest_user is None

    def holds_user(unit: Sequence[Entry]) -> bool:
        return latest_user is not None and any(
            e.fold is None and e.start == latest_user.start for e in unit
        )

    def cost_of(unit: Sequence[Entry]) -> int:
        return sum(e.tokens for e in unit) - (user_tokens if holds_user(unit) else 0)

    def take(unit: Sequence[Entry], fitted: tuple[list[Message], int] | None = None) -> None:
        """Take a unit whole, or as ``fitted`` (clipped messages and their exact cost)."""
        nonlocal edge, user_seen, taken_tokens, shortened
        if fitted is None:
            taken.append([for_model(m) for e in unit for m in e.messages])
            taken_tokens += sum(e.tokens for e in unit)
        else:
            shortened = True
            taken.append(fitted[0])
            taken_tokens += fitted[1]
        fold_ids.extend(e.fold.id for e in unit if e.fold is not None)
        raw_units.append(all(e.fold is None for e in unit))
        shown.update(e.start for e in unit if e.fold is None)
        edge = unit[0].start
        user_seen = user_seen or holds_user(unit)

    cut = False
    units = units_newest_first(newest_first)
    for unit in units:
        cost = cost_of(unit)
        if left is None:
            take(unit)
            continue
        # Hold back room for the markers a cut further back would need.
        markers = marker_tokens * (1 if user_seen or holds_user(unit) else 2)
        if cost + markers <= left:
            take(unit)
            left -= cost
            continue
        # Everything older, if it fits in what is left at all (read once, bounded by it).
        rest = _rest_within(units, left, cost_of)
        rest_cost = None if rest is None else sum(cost_of(u) for u in rest)
        # It fits only in that room: take it if everything older fits as well.
        if rest is not None and rest_cost is not None and cost + rest_cost <= left:
            for older in (unit, *rest):
                take(older)
            break
        # Too big beside what is older: clip it rather than cut the older entries,
        # which are mostly folds saying what happened before.
        if rest and rest_cost is not None and not holds_user(unit):
            room_left = left - rest_cost
            fitted = _clip_unit(unit, room_left, counter) if room_left >= MIN_CLIP_TOKENS else None
            if fitted is not None:
                take(unit, fitted)
                clipped.extend(_changed(unit, fitted[0]))
                for older in rest:
                    take(older)
                break
        cut = True
        if edge is None:
            edge = unit[-1].end + 1
        room_left = left - markers
        if not holds_user(unit) and (room_left >= MIN_CLIP_TOKENS or (not taken and room_left > 0)):
            fitted = _clip_unit(unit, room_left, counter)
            if fitted is not None:
                take(unit, fitted)
                clipped.extend(_changed(unit, fitted[0]))
        break

    before = after = 0
    pinned: list[Message] = []
    if latest_user is not None and not user_seen:
        pinned = [for_model(latest_user.messages[0])]
        shown.add(latest_user.start)
        if edge is not None:
            after = max(edge - 1 - latest_user.start, 0)
        before = max(latest_user.start - first_seq, 0) if cut else 0
    elif cut and edge is not None:
        before = max(edge - first_seq, 0)
    tail = [m for unit_msgs in reversed(taken) for m in unit_msgs]
    body_tokens = head_tokens + facts_tokens + taken_tokens + (user_tokens if pinned else 0)
    out = _assemble(head + facts_msgs, before, pinned, after, tail)
    marker_costs = [counter.message(_marker(n)) for n in (before, after) if n]
    total = body_tokens + sum(marker_costs)
    if budget is not None and total > budget:
        # Only when the budget left no room for markers at all: the prompt goes without them.
        out = head + facts_msgs + pinned + tail
        total = body_tokens
    whole = not shortened and before + after == 0
    recent = 0  # messages in the newest units holding no fold
    for unit_msgs, raw in zip(taken, raw_units, strict=True):
        if not raw:
            break
        recent += len(unit_msgs)
    return Rendered(
        out,
        total,
        before + after,
        tuple(sorted(clipped)),
        tuple(fold_ids),
        whole,
        budget,
        tuple(sorted(shown)),
        len(out) - recent,
    )


@functools.lru_cache(maxsize=16)
def _marker_cost(counter: TokenCounter) -> int:
    """What the widest marker costs with ``counter``: room held back for a cut."""
    return counter.message(_marker(_LARGEST_COUNT))


def _assemble(
    head: list[Message], before: int, pinned: list[Message], after: int, tail: list[Message]
) -> list[Message]:
    out = list(head)
    if before:
        out.append(_marker(before))
    out.extend(pinned)
    if after:
        out.append(_marker(after))
    out.extend(tail)
    return out


def _rest_within(
    units: Iterator[list[Entry]], room: int, cost_of: Callable[[Sequence[Entry]], int]
) -> list[list[Entry]] | None:
    """All remaining units if they fit in ``room`` together, else None.

    Reads at most what fits in ``room`` plus one unit.
    """
    rest: list[list[Entry]] = []
    for unit in units:
        room -= cost_of(unit)
        if room < 0:
            return None
        rest.append(unit)
    return rest


def _marker(count: int) -> Message:
    noun = "message" if count == 1 else "messages"
    return {
        "role": "system",
        "content": f"[contextfold: {count} earlier {noun} left out to fit the token budget]",
    }


def _changed(unit: Sequence[Entry], fitted: Sequence[Message]) -> list[int]:
    """Seqs of the raw messages in ``unit`` that clipping shortened."""
    seqs: list[int] = []
    i = 0
    for entry in unit:
        if entry.fold is None and fitted[i] != for_model(entry.messages[0]):
            seqs.append(entry.start)
        i += len(entry.messages)
    return seqs


def _clip_unit(
    unit: Sequence[Entry], room: int, counter: TokenCounter
) -> tuple[list[Message], int] | None:
    msgs = [for_model(m) for e in unit for m in e.messages]
    # A raw message's count is stored: a huge tool output is not tokenized again here.
    known = [e.tokens if e.fold is None else None for e in unit for _ in e.messages]
    return _clip_messages(msgs, room, counter, known)


def _clip_messages(
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


def clip_text(text: str, keep_tokens: int, total_tokens: int, counter: TokenCounter) -> str:
    """The head of ``text`` worth about ``keep_tokens``, then a marker saying what was cut."""
    return _clipped(text, keep_tokens, total_tokens, counter)[0]


def _clipped(
    text: str, keep_tokens: int, total_tokens: int, counter: TokenCounter
) -> tuple[str, int]:
    """``clip_text`` and the exact tokens of what it returns, counted once in the usual case."""
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
