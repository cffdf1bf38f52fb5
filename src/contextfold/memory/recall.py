"""Recall in a view: search the log for what the prompt lacks, and make room for it.

``recall_render`` wraps one render of a view. It renders as usual, searches
the store (``Store.search``, indexed at append) with the query, reads each hit's
whole unit (a tool call and all its results, or one message), and keeps the
units none of whose raw messages the prompt shows, that the view's filter
keeps, and that hold no system message. A fold may quote part of a unit (the
masking fold keeps a call and masks its output): such a unit comes back whole,
for what the fold left out. ``contextfold.core.recall`` fits them into one block.

The room: recall may take up to ``share`` of the budget, and only what it uses.
The best block that fits the share is made first; when the room the render
left holds it, it goes there and the render stands. Otherwise the view is
rendered again with the block's tokens held back (the window gives up its
oldest units) and the block goes in the room so made (fit again, should that
window show part of it), so the prompt never exceeds the budget and no room is
held back for nothing. Cost: at most two renders, one search, one short read
per hit: O(window + hits), never the whole log.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from contextfold.core.entries import Entry
from contextfold.core.errors import BudgetError
from contextfold.core.log import LoggedMessage
from contextfold.core.recall import Candidate, RecallSettings, fit, with_block
from contextfold.core.render import Rendered
from contextfold.core.tokens import TokenCounter
from contextfold.core.units import unit_spans
from contextfold.memory.filters import MessageFilter
from contextfold.store.base import Store

# Messages read back from a tool result to find its call, at first and at most.
_REACH = 4
_MAX_REACH = 256
# Hits searched per unit wanted: some are shown already, hidden, or do not fit.
_HITS_PER_UNIT = 2

Unit = Sequence[LoggedMessage]


def recall_render(
    render_at: Callable[[int | None], Rendered],
    *,
    store: Store,
    session_id: str,
    query: str,
    settings: RecallSettings,
    budget: int | None,
    keep: MessageFilter | None,
    system: int,
    counter: TokenCounter,
) -> Rendered:
    """The prompt ``render_at(budget)`` gives, with what ``query`` recalls from the log."""
    first = render_at(budget)
    ranked = [
        Candidate.of(unit, counter)
        for unit in found_units(
            store,
            session_id,
            query,
            limit=settings.limit,
            before=recent_start(first.shown),
            keep=keep,
            system=system,
        )
    ]
    if not ranked:
        return first
    if budget is None:
        unbounded = fit(outside(ranked, first), None, settings.limit, counter)
        return first if unbounded is None else with_block(first, unbounded)
    share = int(settings.share * budget)
    wanted = fit(outside(ranked, first), share, settings.limit, counter)
    if wanted is None:
        return first
    if wanted.tokens <= budget - first.tokens:
        return with_block(first, wanted)
    try:
        second = replace(render_at(budget - wanted.tokens), budget=budget)
    except BudgetError:  # the system prompt and the latest user message need that room
        room = min(share, budget - first.tokens)
        here = fit(outside(ranked, first), room, settings.limit, counter)
        return first if here is None else with_block(first, here)
    shown = set(second.shown)
    if wanted.tokens <= budget - second.tokens and not shown.intersection(wanted.seqs):
        return with_block(second, wanted)
    block = fit(
        outside(ranked, second), min(share, budget - second.tokens), settings.limit, counter
    )
    return second if block is None else with_block(second, block)


def outside(ranked: Sequence[Candidate], rendered: Rendered) -> list[Candidate]:
    """The units none of whose messages ``rendered`` shows."""
    shown = set(rendered.shown)
    return [c for c in ranked if not any(m.seq in shown for m in c.messages)]


def recent_start(shown: Sequence[int]) -> int | None:
    """The first seq of the unbroken run of shown seqs that ends the prompt: nothing
    from there on needs recalling, so the search stops below it."""
    if not shown:
        return None
    start = shown[-1]
    for seq in reversed(shown):
        if seq < start - 1:
            break
        start = seq
    return start


def found_units(
    store: Store,
    session_id: str,
    query: str,
    *,
    limit: int,
    before: int | None,
    keep: MessageFilter | None,
    system: int,
) -> list[Unit]:
    """The units of the best hits for ``query``, best first, each once; none of the
    system prompt, of system messages, or with a message the view's filter hides.

    ``limit`` units at most, from up to ``_HITS_PER_UNIT`` times as many hits: the
    search stops below the prompt's recent messages, so few hits are shown already.
    """
    units: list[Unit] = []
    taken: set[int] = set()
    for hit in store.search(session_id, query, limit=limit * _HITS_PER_UNIT, before=before):
        if hit.seq in taken or hit.seq <= system:
            continue
        unit = unit_at(store, session_id, hit.seq)
        if unit is None:
            continue
        taken.update(m.seq for m in unit)
        if any(m.role in ("system", "developer") for m in unit):
            continue
        if keep is not None and not all(keep(m.message) for m in unit):
            continue
        units.append(unit)
        if len(units) == limit:
            break
    return units


def unit_at(store: Store, session_id: str, seq: int) -> Unit | None:
    """The unit holding ``seq``: read with the message after it (enough for a plain
    message), and further back or on while the unit may reach past what was read;
    None for a unit reaching past ``_MAX_REACH`` messages either way."""
    back, on = 0, 1
    while back <= _MAX_REACH and on <= _MAX_REACH:
        around = store.messages(session_id, max(1, seq - back), seq + on)
        for i, j in unit_spans([Entry.of_message(m) for m in around]):
            if around[i].seq <= seq <= around[j].seq:
                opens_before = i == 0 and around[0].role == "tool" and around[0].seq > 1
                goes_on = j == len(around) - 1 and around[j].seq == seq + on
                if not opens_before and not goes_on:
                    return around[i : j + 1]
                back = max(_REACH, 4 * back) if opens_before else back
                on = 4 * on if goes_on else on
                break
        else:
            return None  # no message at seq: not in this log
    return None
