"""Recall in a view: search the log for what the prompt lacks, in the room it leaves.

``recall_block`` makes the block for one rendered prompt of a view. It searches the store
(``Store.search``, indexed at append) with the query, reads each hit's whole
unit (a tool call and all its results, or one message), and keeps the units
none of whose raw messages the prompt shows, that the view's filter keeps, and
that hold no system message. A fold may quote part of a unit (the masking fold
keeps a call and masks its output): such a unit comes back whole, for what the
fold left out. ``contextfold.memory.recalled`` fits them into one block.

The room: what the prompt leaves free under the budget, and at most ``share``
of the budget. Recall never makes room by cutting: room taken from the folds
would lose what they keep, and room taken from the recent messages would leave
unfolded messages out of the prompt. A view's cycle folds it down to the
low-water mark, so a recalling view has between ``1 - high_water`` and
``1 - low_water`` of its budget free (lower the marks to give recall more).
Cost: one search and one read of the hits, beside the render: O(window + hits),
never the whole log.
"""

from __future__ import annotations

from collections.abc import Sequence

from contextfold.core.entries import Entry
from contextfold.core.log import LoggedMessage
from contextfold.core.render import Rendered
from contextfold.core.tokens import TokenCounter
from contextfold.core.units import unit_spans
from contextfold.memory.filters import MessageFilter
from contextfold.memory.recalled import Block, Recallable, RecallSettings, fit_block
from contextfold.store.base import Store
from contextfold.strategies.base import ViewState

# Messages read back from a tool result to find its call, at first and at most.
_REACH = 4
_MAX_REACH = 256
# Hits searched per unit wanted: some are shown already, hidden, or do not fit.
_HITS_PER_UNIT = 2

Unit = Sequence[LoggedMessage]


def recall_block(
    rendered: Rendered,
    *,
    store: Store,
    session_id: str,
    query: str,
    settings: RecallSettings,
    keep: MessageFilter | None,
    counter: TokenCounter,
    grows_to: int = 0,
) -> Block | None:
    """What ``query`` recalls from the log for ``rendered``, in the room it leaves (None:
    nothing found, or no room). ``grows_to``: the tokens the prompt may grow to while
    the block is kept (``turn_mark``); the block leaves room for them."""
    budget = rendered.budget
    used = max(rendered.tokens, grows_to)
    room = None if budget is None else min(int(settings.share * budget), budget - used)
    if room is not None and room <= 0:
        return None
    ranked = [
        Recallable.of(unit)
        for unit in found_units(
            store,
            session_id,
            query,
            limit=settings.limit,
            before=recent_start(rendered.shown),
            keep=keep,
        )
    ]
    return fit_block(outside(ranked, rendered), room, settings.limit, counter)


def turn_mark(
    system: Sequence[LoggedMessage], budget: int | None, high_water: float, counter: TokenCounter
) -> int:
    """What a turn's prompt may grow to while its block is kept: the view's high-water
    mark, where it folds (and a fold's new prompt gets a new block).

    A block that took all the room left would stop fitting at the turn's next
    append and be chosen anew, changing the prompt from the block on at every
    call of a tool loop, which a provider's prefix cache cannot serve.
    """
    if budget is None:
        return 0
    state = ViewState("", "", 0, tuple(system), (), None, counter, budget, high_water=high_water)
    return state.high_mark(budget)


def still_fits(rendered: Rendered, block: Block) -> bool:
    """Whether ``block``, chosen for an earlier prompt, fits ``rendered`` as it is: within
    its budget, and recalling nothing it now shows."""
    budget = rendered.budget
    room = None if budget is None else budget - rendered.tokens
    return (room is None or block.tokens <= room) and not set(block.seqs) & set(rendered.shown)


def outside(ranked: Sequence[Recallable], rendered: Rendered) -> list[Recallable]:
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
) -> list[Unit]:
    """The units of the best hits for ``query``, best first, each once; none with a
    system message (the system prompt's included) or a message the view's filter hides.

    ``limit`` units at most, from up to ``_HITS_PER_UNIT`` times as many hits: the
    search stops below the prompt's recent messages, so few hits are shown already.
    Hits are read ``limit`` at a time, each batch in one store read: a plain
    message is a unit of its own, and only a hit in a tool unit is read again
    with the messages around it.
    """
    hits = [
        hit.seq
        for hit in store.search(session_id, query, limit=limit * _HITS_PER_UNIT, before=before)
    ]
    units: list[Unit] = []
    taken: set[int] = set()
    for batch in range(0, len(hits), limit):
        wanted = hits[batch : batch + limit]
        read = {m.seq: m for m in store.messages_at(session_id, wanted)}
        for logged in (read[seq] for seq in wanted if seq in read and seq not in taken):
            plain = logged.role != "tool" and not logged.message.get("tool_calls")
            unit = [logged] if plain else unit_at(store, session_id, logged.seq)
            if unit is None:
                continue
            taken.update(m.seq for m in unit)
            if any(m.role in ("system", "developer") for m in unit):
                continue
            if keep is not None and not all(keep(m.message) for m in unit):
                continue
            units.append(unit)
            if len(units) == limit:
                return units
    return units


def unit_at(store: Store, session_id: str, seq: int) -> Unit | None:
    """The unit holding ``seq``: read with the message after it, and further back or
    on while the unit may reach past what was read; None for a unit reaching past
    ``_MAX_REACH`` messages either way."""
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
