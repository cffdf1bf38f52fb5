"""Pins at render: what the view's pin rules select comes back verbatim after the folds.

A fold keeps what a summary keeps; an agent's to-do list, its rule files or
its plan must come back as they were, in their latest version. Render leaves
the prompt as folds and recent messages; then each unit the rules select
(``contextfold.memory.pin_rules``) that the prompt does not show goes right
after the folds, in log order, before the recall block and the recent
messages. A pinned unit the prompt shows (in the raw tail) is not repeated.

A unit comes back whole, as protocol messages: a call with all its results
(a call never answered is answered as render answers one, ``NO_RESULT``), so
the prompt stays valid for every provider. Pins take at most ``pins_share``
of the budget: room the prompt leaves free first, else the prompt is rendered
again within the budget less the pins (the bridge folds what that leaves
out). Beyond the share the oldest pins are left out, and one marker says how
many.

Which messages the rules select is found by scanning the branch once per
process and configuration version, then only what is appended
(``PinScan``, grown like the prompt cache); the prompt reads only the units
selected. Everything follows from the log, the folds and the settings, so
every process renders the same prompt.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from contextfold.core.errors import BudgetError
from contextfold.core.log import LoggedMessage
from contextfold.core.messages import Message, for_model
from contextfold.core.render import Rendered
from contextfold.core.tokens import TokenCounter
from contextfold.core.units import with_answers
from contextfold.memory.cache import Grown
from contextfold.memory.filters import MessageFilter
from contextfold.memory.pin_rules import PinRule, call_key
from contextfold.memory.recall import unit_at
from contextfold.store.base import Head, Store

Unit = tuple[LoggedMessage, ...]


@dataclass(frozen=True)
class PinScan:
    """What the rules select on a branch up to a seq: per rule, the newest seq by key
    (``latest``; None for a rule without one) or every seq (``all``); and each call's
    keys, for its results, when a rule has a key."""

    latest: tuple[Mapping[str | None, int], ...]
    every: tuple[tuple[int, ...], ...]
    call_keys: Mapping[str, Mapping[str, str | None]] = field(default_factory=dict)

    @classmethod
    def empty(cls, rules: Sequence[PinRule]) -> PinScan:
        return cls(tuple({} for _ in rules), tuple(() for _ in rules))

    def grown(self, rules: Sequence[PinRule], messages: Iterable[LoggedMessage]) -> PinScan:
        """This scan with ``messages`` (oldest first) scanned too."""
        latest = [dict(found) for found in self.latest]
        every = [list(found) for found in self.every]
        call_keys = dict(self.call_keys)
        keyed = {rule.key for rule in rules if rule.key is not None}
        for logged in messages:
            message = logged.message
            for call in message.get("tool_calls") or () if keyed else ():
                one = {**message, "tool_calls": [call]}
                call_keys[str(call["id"])] = {key: call_key(one, key) for key in keyed}
            for i, rule in enumerate(rules):
                if not rule.selects(message):
                    continue
                if rule.mode == "all":
                    every[i].append(logged.seq)
                    continue
                key = None
                if rule.key is not None:
                    if logged.role == "tool":
                        key = call_keys.get(str(message.get("tool_call_id")), {}).get(rule.key)
                    else:
                        key = call_key(message, rule.key)
                    if key is None:
                        continue  # a keyed rule pins what has a key
                latest[i][key] = logged.seq
        return PinScan(tuple(latest), tuple(tuple(e) for e in every), call_keys)

    def seqs(self) -> list[int]:
        """Every seq selected, oldest first, each once."""
        found = {seq for each in self.latest for seq in each.values()}
        found.update(seq for each in self.every for seq in each)
        return sorted(found)


def scanned(
    store: Store,
    session_id: str,
    head: Head,
    rules: Sequence[PinRule],
    after: int,
    scans: Grown[PinScan],
) -> PinScan:
    """The scan of the branch at ``head`` past seq ``after`` (the system prompt): grown by
    what was appended since the last one, or read afresh."""
    key = (head.view_version, after)

    def on_branch(messages: Iterable[LoggedMessage]) -> list[LoggedMessage]:
        return [m for m in messages if head.path.holds(m.seq)]

    def grow(base: PinScan, new: list[LoggedMessage]) -> PinScan:
        return base.grown(rules, on_branch(new))

    found = scans.grow(key, head, lambda seq: store.messages(session_id, seq + 1), grow)
    if found is None:
        logged = store.messages(session_id, after + 1, head.last_seq)
        found = PinScan.empty(rules).grown(rules, on_branch(logged))
        scans.put(key, head.last_seq, found)
    return found


def selected_units(
    store: Store, session_id: str, head: Head, seqs: Sequence[int], keep: MessageFilter | None
) -> list[Unit]:
    """The units holding ``seqs``, in log order, each once; none the view's filter hides
    or that reaches past the branch."""
    units: list[Unit] = []
    taken: set[int] = set()
    read = {m.seq: m for m in store.messages_at(session_id, list(seqs))}
    for seq in seqs:
        logged = read.get(seq)
        if logged is None or seq in taken:
            continue
        plain = logged.role != "tool" and not logged.message.get("tool_calls")
        unit = (logged,) if plain else tuple(unit_at(store, session_id, seq) or ())
        if not unit or not all(head.path.holds(m.seq) for m in unit):
            continue
        taken.update(m.seq for m in unit)
        if keep is None or all(keep(m.message) for m in unit):
            units.append(unit)
    return sorted(units, key=lambda u: u[0].seq)


@dataclass(frozen=True)
class Pins:
    """Pinned units as a prompt shows them: their messages, what they cost, the seqs they
    hold, and how many were left out beyond their room."""

    messages: tuple[Message, ...]
    tokens: int
    seqs: tuple[int, ...]
    left_out: int


def fit_pins(units: Sequence[Unit], room: int | None, counter: TokenCounter) -> Pins:
    """The newest ``units`` that fit ``room`` tokens, in log order, and a marker counting
    those left out (the oldest) when not all fit."""
    shown = [with_answers([for_model(m.message) for m in unit]) for unit in units]
    costs = [_cost(unit, messages, counter) for unit, messages in zip(units, shown, strict=True)]
    take = len(units)
    if room is not None and sum(costs) > room:
        left = room - _marker_cost(counter)
        take = 0
        for cost in reversed(costs):
            if cost > left:
                break
            left -= cost
            take += 1
    first = len(units) - take
    messages = [m for each in shown[first:] for m in each]
    tokens = sum(costs[first:])
    if first:
        marker = _marker(first)
        messages.insert(0, marker)
        tokens += counter.message(marker)
    seqs = tuple(m.seq for unit in units[first:] for m in unit)
    return Pins(tuple(messages), tokens, seqs, first)


def _cost(unit: Unit, messages: Sequence[Message], counter: TokenCounter) -> int:
    """The stored counts, and the synthetic answers render added counted afresh."""
    stored = sum(m.tokens for m in unit)
    return stored + sum(counter.message(m) for m in messages[len(unit) :])


def with_pinned(rendered: Rendered, pins: Pins) -> Rendered:
    """``rendered`` with ``pins`` after its folds (at ``recall_at``): the recall block,
    if any, goes after them."""
    if not pins.messages:
        return rendered
    at = len(rendered.messages) if rendered.recall_at is None else rendered.recall_at
    messages = [*rendered.messages[:at], *(dict(m) for m in pins.messages)]
    messages.extend(rendered.messages[at:])
    return replace(
        rendered,
        messages=messages,
        tokens=rendered.tokens + pins.tokens,
        shown=tuple(sorted({*rendered.shown, *pins.seqs})),
        recall_at=at + len(pins.messages),
        pinned=pins.seqs,
    )


def pinned_prompt(
    rendered: Rendered,
    units: Sequence[Unit],
    share: float,
    counter: TokenCounter,
    refit: Callable[[int], Rendered],
) -> Rendered:
    """``rendered`` with the ``units`` it does not show pinned, within ``share`` of its
    budget; rendered again by ``refit`` (at a smaller budget) when the room it leaves
    free is less than the pins need."""
    outside = _outside(units, rendered)
    if not outside:
        return rendered
    budget = rendered.budget
    if budget is None:
        return with_pinned(rendered, fit_pins(outside, None, counter))
    cap = int(share * budget)
    need = fit_pins(outside, cap, counter).tokens
    if rendered.tokens + need > budget:
        # When the floor leaves no room for them, only what is free is theirs.
        with contextlib.suppress(BudgetError):
            rendered = replace(refit(budget - need), budget=budget)
        outside = _outside(units, rendered)
    room = min(cap, budget - rendered.tokens)
    return with_pinned(rendered, fit_pins(outside, room, counter))


def _outside(units: Sequence[Unit], rendered: Rendered) -> list[Unit]:
    shown = set(rendered.shown)
    return [unit for unit in units if not any(m.seq in shown for m in unit)]


@functools.lru_cache(maxsize=16)
def _marker_cost(counter: TokenCounter) -> int:
    return counter.message(_marker(999_999))


def _marker(count: int) -> Message:
    noun = "pin" if count == 1 else "pins"
    return {
        "role": "system",
        "content": f"[contextfold: {count} older {noun} left out to fit their room]",
    }
