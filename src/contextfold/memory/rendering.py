"""Rendering a view: its prompt for the next model call, from the prompt cache when
the view only grew, and with what recall finds.

A prompt whose view only grew by appends since the last render is that
prompt plus the new messages, when they fit: no fold moved, so nothing
before them can differ (``contextfold.memory.cache``). Anything else renders
afresh (``contextfold.core.render``). The recall block is made on top of that
prompt (``contextfold.memory.recall``): once per user message (a new query),
and kept while the turn goes on and it still fits; a query given by the caller
always searches, and its prompt is not cached.

A fresh prompt then gets the view's pins after its folds
(``contextfold.memory.pins``); a new message a pin rule selects renders
afresh, so a pin shown is always its latest version.

A fresh render that would leave messages out bridges them first
(``contextfold.memory.bridge``): provisional folds, made without a model,
stand where the cut would be until the view's own fold lands; a view with
``wait_for_fold_s`` first waits that long for a fold job running here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from contextfold.core.entries import Entry
from contextfold.core.errors import InvalidInput
from contextfold.core.folds import Fold, active_facts, active_in_place
from contextfold.core.log import LoggedMessage
from contextfold.core.messages import text_of
from contextfold.core.provider_items import folds_for
from contextfold.core.render import Rendered, render
from contextfold.core.units import answer_missing, whole_units
from contextfold.memory.bridge import FOLDING, Bridge, standing
from contextfold.memory.cache import PromptCache
from contextfold.memory.configuration import Configured
from contextfold.memory.filters import MessageFilter
from contextfold.memory.pin_rules import PinRule
from contextfold.memory.pins import pinned_prompt, scanned, selected_units
from contextfold.memory.reading import ViewReader, system_end
from contextfold.memory.recall import recall_block, still_fits, turn_mark
from contextfold.memory.recalled import Block, RecallSettings, with_block
from contextfold.store.base import Head


def view_prompt(
    reader: ViewReader,
    prompts: PromptCache,
    configured: Configured,
    head: Head,
    *,
    budget: int | None,
    query: str | None,
    target: str | None = None,
    bridge: Bridge | None = None,
) -> Rendered:
    """The view's prompt at ``head`` within ``budget`` (None: the view's own), with the
    recall block for ``query``, or for the latest user message when recall is on;
    rendered for the provider ``target`` (``contextfold.core.provider_items``)."""
    keep = configured.filter
    settings = configured.config.recall_settings
    wanted = budget if budget is not None else configured.config.budget
    wait_s = configured.config.wait_for_fold_s
    if configured.pipeline is None or not configured.pipeline.strategies:
        bridge = None  # a view that never folds (``disabled``) is cut, not bridged
    if query is not None:
        if settings is None:
            raise InvalidInput(
                f"recall is off for view {reader.name!r}: turn it on with recall=", field="query"
            )
        at, base, _ = fresh_prompt(reader, wanted, keep, target, bridge, wait_s)
        base = _pinned(
            reader, configured, at, base, lambda b: _refit(reader, b, keep, target, bridge)
        )
        block = _block(reader, base, query, settings, keep)
        return base if block is None else with_block(base, block)
    rules = configured.config.pin_rules
    cached = prompts.extend(head, wanted, keep, reader.read_after, _selecting(rules))
    if cached is None:
        head, base, asked = fresh_prompt(reader, wanted, keep, target, bridge, wait_s)
        base = _pinned(
            reader, configured, head, base, lambda b: _refit(reader, b, keep, target, bridge)
        )
        if not standing(base.folds):
            # A bridged prompt is rendered afresh each turn: its steps grow, a digest is
            # replaced by steps, a new user message joins two runs (``memory.bridge``).
            prompts.put(head, wanted, base)
    else:
        base, asked = cached, None if settings is None else reader.latest_user(head, keep)
    if settings is None or asked is None or not text_of(asked.message):
        return base
    found, block = prompts.recalled(head, wanted, asked.seq)
    if not found or (block is not None and not still_fits(base, block)):
        mark = turn_mark(reader.system(), wanted, configured.config.high_water, reader.counter)
        block = _block(reader, base, text_of(asked.message), settings, keep, mark)
        prompts.keep_block(head, wanted, asked.seq, block)
    return base if block is None else with_block(base, block)


def fresh_prompt(
    reader: ViewReader,
    budget: int | None,
    keep: MessageFilter | None,
    target: str | None = None,
    bridge: Bridge | None = None,
    wait_s: float = 0.0,
) -> tuple[Head, Rendered, LoggedMessage | None]:
    """The prompt read afresh from the store, without recall, and the latest user
    message it was rendered for (``ViewReader.latest_user``).

    With a ``bridge``, what it would leave out is bridged by provisional folds,
    after waiting up to ``wait_s`` seconds for a fold job of the view running here.
    """
    system = reader.system()
    end = system_end(system)
    head, folds = reader.sound_folds(end)
    latest = reader.latest_user(head, keep)
    facts = active_facts(folds)
    committed = active_in_place(folds)
    in_place = folds_for(committed, target, first_seq=end + 1, facts=facts)
    latest_user = None
    if latest is not None and not any(f.start <= latest.seq <= f.end for f in in_place):
        latest_user = Entry.of_message(latest)

    def fit(provisional: tuple[Fold, ...]) -> Rendered:
        placed = sorted([*in_place, *provisional], key=lambda f: f.start)
        entries = reader.newest_first(placed, after=end, last=head.last_seq)
        if keep is not None:
            entries = whole_units(entries, lambda e: e.message, keep)
        return render(
            system=[m.message for m in system],
            newest_first=answer_missing(entries, reader.counter),
            counter=reader.counter,
            budget=budget,
            facts=facts,
            latest_user=latest_user,
            first_seq=end + 1,
            system_tokens=sum(m.tokens for m in system),
        )

    rendered = fit(())
    if bridge is None or budget is None:
        return head, rendered, latest
    bridge.replaced(reader.session_id, reader.name, committed, reader.callbacks)
    if rendered.whole:
        return head, rendered, latest
    # Over budget, by the view's counts: what render would cut, or clip to fit (a clip of
    # the newest unit can make room for all the rest, and the next append undo that).
    state = reader.live_state(head, keep)
    if state.version != head.fold_version:
        return fresh_prompt(reader, budget, keep, target, bridge, wait_s)  # a fold landed
    if not rendered.omitted and state.tokens <= budget:
        return head, rendered, latest
    if wait_s > 0 and FOLDING.wait(reader.session_id, reader.name, wait_s):
        return fresh_prompt(reader, budget, keep, target, bridge)
    state = replace(state, budget=budget)

    def over(provisional: Sequence[Fold]) -> int:
        saved = sum(f.tokens_before - f.tokens_after for f in provisional)
        return state.tokens - saved - budget

    bridged = bridge.folds(state, over, reader.callbacks)
    if not bridged.folds:
        return head, rendered, latest
    return head, fit(bridged.folds), latest


def _pinned(
    reader: ViewReader,
    configured: Configured,
    head: Head,
    rendered: Rendered,
    refit: Callable[[int], Rendered],
) -> Rendered:
    """``rendered`` with what the view's pin rules select and it does not show
    (``contextfold.memory.pins``)."""
    rules = configured.config.pin_rules
    if not rules:
        return rendered
    store, session_id = reader.store, reader.session_id
    end = system_end(reader.system())
    scan = scanned(store, session_id, head, rules, end, reader.caches.pins)
    units = selected_units(store, session_id, head, scan.seqs(), configured.filter)
    share = configured.config.pins_share
    return pinned_prompt(rendered, units, share, reader.counter, refit)


def _refit(
    reader: ViewReader,
    budget: int,
    keep: MessageFilter | None,
    target: str | None,
    bridge: Bridge | None,
) -> Rendered:
    """The prompt rendered afresh within ``budget``, to leave room for pins."""
    return fresh_prompt(reader, budget, keep, target, bridge)[1]


def _selecting(rules: Sequence[PinRule]) -> MessageFilter | None:
    """Whether a message is one a pin rule selects (None: the view pins nothing)."""
    if not rules:
        return None
    return lambda message: any(rule.selects(message) for rule in rules)


def _block(
    reader: ViewReader,
    base: Rendered,
    query: str,
    settings: RecallSettings,
    keep: MessageFilter | None,
    grows_to: int = 0,
) -> Block | None:
    return recall_block(
        base,
        store=reader.store,
        session_id=reader.session_id,
        query=query,
        settings=settings,
        keep=keep,
        counter=reader.counter,
        grows_to=grows_to,
    )
