"""Triggers: small predicates over a view's counts, composable with | and &."""

from __future__ import annotations

from contextfold import Memory
from contextfold.strategies import (
    Always,
    Characters,
    KeepRecent,
    MessageCount,
    Never,
    OverBudget,
    Pipeline,
    Predicate,
    Rounds,
    Tokens,
    UnfoldedRounds,
)
from contextfold.strategies.base import HIGH_WATER, ViewState
from contextfold.strategies.triggers import AllOf, AnyOf


def state_of(rounds: int, *, budget: int | None = None) -> ViewState:
    session = Memory().session("s", system="Be brief.")
    for r in range(rounds):
        session.append({"role": "user", "content": f"question {r} " + "word " * 20})
        session.append({"role": "assistant", "content": f"answer {r} " + "word " * 20})
    return session.view("v").state(budget)


def test_count_triggers_fire_strictly_above_their_limit() -> None:
    state = state_of(5)
    assert state.message_count == 11 and len(state.rounds) == 5
    assert MessageCount(10)(state) and not MessageCount(11)(state)
    assert Rounds(4)(state) and not Rounds(5)(state)
    assert UnfoldedRounds(4)(state) and not UnfoldedRounds(5)(state)
    assert Tokens(state.tokens - 1)(state) and not Tokens(state.tokens)(state)
    assert Characters(state.characters - 1)(state) and not Characters(state.characters)(state)


def test_over_budget_needs_a_budget_and_scales_with_ratio() -> None:
    assert not OverBudget()(state_of(5))
    tokens = state_of(5).tokens
    assert OverBudget(1.0)(state_of(5, budget=tokens - 1))
    assert not OverBudget(1.0)(state_of(5, budget=tokens))
    assert OverBudget(0.5)(state_of(5, budget=tokens))
    # Without a ratio, the view's high-water mark: fires before the budget is reached.
    assert OverBudget()(state_of(5, budget=tokens))
    assert not OverBudget()(state_of(5, budget=int(tokens / HIGH_WATER) + 1))


def test_composition_with_or_and_and() -> None:
    state = state_of(3)
    yes, no = MessageCount(1), MessageCount(100)
    assert isinstance(yes | no, AnyOf) and (yes | no)(state)
    assert isinstance(yes & no, AllOf) and not (yes & no)(state)
    assert (no | (yes & Always()))(state)
    assert not (Never() | no)(state)


def test_predicate_sees_the_view_state() -> None:
    seen: list[ViewState] = []
    trigger = Predicate(lambda s: seen.append(s) or s.message_count > 5)
    state = state_of(3)
    assert trigger(state) and seen == [state]
    assert not Predicate(lambda s: False)(state)


def test_unfolded_rounds_count_only_rounds_after_the_last_summary() -> None:
    session = Memory().session("s", system="Be brief.")
    for r in range(6):
        session.append({"role": "user", "content": f"question {r} " + "word " * 30})
        session.append({"role": "assistant", "content": f"answer {r} " + "word " * 30})
    view = session.view("v", pipeline=Pipeline([KeepRecent()]))
    before = view.state()
    view.compact(before.tokens // 2)
    after = view.state()
    assert after.entries[0].fold is not None
    assert len(after.unfolded_rounds) < len(before.unfolded_rounds) == 6
    assert UnfoldedRounds(len(after.unfolded_rounds) - 1)(after)
