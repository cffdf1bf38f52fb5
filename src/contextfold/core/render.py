"""Render: the message list for one model call, within a token budget.

Order: system prompt, the facts fold if any, then folds and raw messages in log
order. Entries are consumed newest first from a lazy iterator and reading stops
at the first unit that does not fit, so the cost grows with what is returned,
not with the history behind it.

When folds alone do not fit, a deterministic last-resort cut keeps the newest
whole units and puts one marker where the older ones were (counts are of
logged messages, found from ``seq`` numbers without reading them). It never
drops the system prompt, the latest user message or part of a tool unit. The
newest unit that does not fit is clipped (``contextfold.core.clip``) instead of
dropped, when the room left is worth using; the log keeps it whole. Room for
the markers is held back while reading, so the prompt never exceeds the budget.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from contextfold.core.clip import changed_seqs, clip_messages, clip_unit
from contextfold.core.entries import Entry
from contextfold.core.errors import BudgetError
from contextfold.core.folds import Fold
from contextfold.core.log import LoggedMessage, json_copy
from contextfold.core.messages import Message, for_model
from contextfold.core.provider_items import for_prompt
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
    pinned: tuple[int, ...] = ()
    """Seqs of the logged messages pinned after the folds (``contextfold.memory.pins``)."""


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
    least = floor(system_tokens, latest_user)
    if budget is not None and least > budget:
        raise BudgetError(budget, least)
    room = None if budget is None else budget - least
    marker_tokens = _marker_cost(counter)
    facts_msgs, facts_tokens, facts_clipped = _fit_facts(facts, room, marker_tokens, counter)
    taken = _Taken(
        latest_user,
        user_tokens=least - REPLY_PRIMING - system_tokens,
        shortened=facts_clipped,
        fold_ids=[facts.id] if facts is not None and facts_msgs else [],
    )
    left = None if room is None else room - facts_tokens
    cut = _take_newest(units_newest_first(newest_first), taken, left, marker_tokens, counter)
    before, pinned, after = _pin_latest_user(taken, cut, first_seq)
    tail = [m for unit in reversed(taken.units) for m in unit]
    body_tokens = least - taken.user_tokens + facts_tokens + taken.tokens
    body_tokens += taken.user_tokens if pinned else 0
    out = _assemble(head + facts_msgs, before, pinned, after, tail)
    total = body_tokens + sum(counter.message(_marker(n)) for n in (before, after) if n)
    if budget is not None and total > budget:
        # Only when the budget left no room for markers at all: the prompt goes without them.
        out = head + facts_msgs + pinned + tail
        total = body_tokens
    return Rendered(
        out,
        total,
        before + after,
        tuple(sorted(taken.clipped)),
        tuple(taken.fold_ids),
        not taken.shortened and before + after == 0,
        budget,
        tuple(sorted(taken.shown)),
        len(out) - taken.recent(),
    )


def _fit_facts(
    facts: Fold | None, room: int | None, marker_tokens: int, counter: TokenCounter
) -> tuple[list[Message], int, bool]:
    """The facts fold's messages and their cost, clipped to leave room for two markers
    when they do not fit beside them; and whether they were clipped."""
    if facts is None:
        return [], 0, False
    msgs = [json_copy(for_model(m)) for m in facts.messages]
    if room is None or facts.tokens_after <= room - 2 * marker_tokens:
        return msgs, facts.tokens_after, False
    fitted = clip_messages(msgs, room - 2 * marker_tokens, counter) or ([], 0)
    return fitted[0], fitted[1], True


@dataclass
class _Taken:
    """What render took from the entries so far, newest unit first, and what that did."""

    latest_user: Entry | None
    user_tokens: int
    """The latest user message's tokens, already counted in render's floor."""
    shortened: bool
    fold_ids: list[str]
    units: list[list[Message]] = field(default_factory=list)
    raw: list[bool] = field(default_factory=list)
    """Per taken unit: it holds no fold."""
    shown: set[int] = field(default_factory=set)
    tokens: int = 0
    clipped: list[int] = field(default_factory=list)
    edge: int | None = None
    """The lowest seq rendered from the entries so far."""
    user_seen: bool = False

    def __post_init__(self) -> None:
        self.user_seen = self.latest_user is None

    def holds_user(self, unit: Sequence[Entry]) -> bool:
        user = self.latest_user
        return user is not None and any(e.fold is None and e.start == user.start for e in unit)

    def cost_of(self, unit: Sequence[Entry]) -> int:
        """What taking ``unit`` adds: the latest user message is paid for in the floor."""
        return sum(e.tokens for e in unit) - (self.user_tokens if self.holds_user(unit) else 0)

    def take(self, unit: Sequence[Entry], fitted: tuple[list[Message], int] | None = None) -> None:
        """Take a unit whole, or as ``fitted`` (clipped messages and their exact cost)."""
        if fitted is None:
            self.units.append([_shown(e, m) for e in unit for m in e.messages])
            self.tokens += sum(e.tokens for e in unit)
        else:
            self.shortened = True
            self.units.append(fitted[0])
            self.tokens += fitted[1]
        self.fold_ids.extend(e.fold.id for e in unit if e.fold is not None)
        self.raw.append(all(e.fold is None for e in unit))
        self.shown.update(e.start for e in unit if e.fold is None)
        self.edge = unit[0].start
        self.user_seen = self.user_seen or self.holds_user(unit)

    def clip(self, unit: Sequence[Entry], room: int, counter: TokenCounter) -> bool:
        """Take ``unit`` clipped to ``room``; False (nothing taken) when it cannot be."""
        fitted = clip_unit(unit, room, counter)
        if fitted is None:
            return False
        self.take(unit, fitted)
        self.clipped.extend(changed_seqs(unit, fitted[0]))
        return True

    def recent(self) -> int:
        """Messages in the newest units that hold no fold: where a recall block goes before."""
        count = 0
        for unit, raw in zip(self.units, self.raw, strict=True):
            if not raw:
                break
            count += len(unit)
        return count


def _take_newest(
    units: Iterator[list[Entry]],
    taken: _Taken,
    left: int | None,
    marker_tokens: int,
    counter: TokenCounter,
) -> bool:
    """Take units newest first while they fit in ``left`` tokens; True when older ones
    were cut. Room for the markers a cut further back would need is held back."""
    for unit in units:
        cost = taken.cost_of(unit)
        if left is None:
            taken.take(unit)
            continue
        markers = marker_tokens * (1 if taken.user_seen or taken.holds_user(unit) else 2)
        if cost + markers > left:
            return _take_last(unit, units, taken, left, markers, counter)
        taken.take(unit)
        left -= cost
    return False


def _take_last(
    unit: list[Entry],
    older: Iterator[list[Entry]],
    taken: _Taken,
    left: int,
    markers: int,
    counter: TokenCounter,
) -> bool:
    """The first unit that does not fit beside the markers: taken with everything older
    when all of it fits, clipped when only it is too big, else cut there (True)."""
    # Everything older, if it fits in what is left at all (read once, bounded by it).
    rest = _rest_within(older, left, taken.cost_of)
    if rest is not None:
        rest_cost = sum(taken.cost_of(u) for u in rest)
        if taken.cost_of(unit) + rest_cost <= left:
            for each in (unit, *rest):
                taken.take(each)
            return False
        # Too big beside what is older: clip it rather than cut the older entries,
        # which are mostly folds saying what happened before.
        room = left - rest_cost
        clippable = rest and not taken.holds_user(unit) and room >= MIN_CLIP_TOKENS
        if clippable and taken.clip(unit, room, counter):
            for each in rest:
                taken.take(each)
            return False
    if taken.edge is None:
        taken.edge = unit[-1].end + 1
    room = left - markers
    if not taken.holds_user(unit) and (room >= MIN_CLIP_TOKENS or (not taken.units and room > 0)):
        taken.clip(unit, room, counter)
    return True


def _shown(entry: Entry, message: Message) -> Message:
    """A message as the prompt holds it: a fold's keeps the items its provider made, and
    is a copy (a reader keeps the fold itself and renders it again)."""
    return for_model(message) if entry.fold is None else json_copy(for_prompt(message))


def _pin_latest_user(taken: _Taken, cut: bool, first_seq: int) -> tuple[int, list[Message], int]:
    """The markers' counts, before and after the latest user message, and that message
    when it was not taken with its unit (it is pinned where it stands)."""
    user = taken.latest_user
    if user is not None and not taken.user_seen:
        taken.shown.add(user.start)
        after = 0 if taken.edge is None else max(taken.edge - 1 - user.start, 0)
        before = max(user.start - first_seq, 0) if cut else 0
        return before, [for_model(user.messages[0])], after
    if cut and taken.edge is not None:
        return max(taken.edge - first_seq, 0), [], 0
    return 0, [], 0


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
