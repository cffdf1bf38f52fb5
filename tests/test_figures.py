"""The figures a view is shown with: what each fold saved against the log range it
covers, and the view's floor (the smallest budget it renders at)."""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

import pytest

from contextfold import BudgetError, Memory, Session
from contextfold.core.tokens import REPLY_PRIMING
from contextfold.store import RAMStore

SYSTEM = {"role": "system", "content": "You are Patch, a careful coding agent."}


def demo_session() -> Session:
    text = files("contextfold").joinpath("data/demo_session.json").read_text(encoding="utf-8")
    session = Memory(RAMStore()).session("demo")
    session.extend(json.loads(text))
    return session


def logged_tokens(session: Session, start: int, end: int) -> int:
    return sum(m.tokens for m in session.store.messages(session.id, start, end))


def test_a_fold_is_measured_against_the_log_range_it_covers() -> None:
    session = demo_session()
    view = session.view("default", preset="offline", budget=12_000)
    view.compact()
    every = view.folds(include_superseded=True)
    measured = view.log_tokens(every)
    assert set(measured) == {f.id for f in every}
    for fold in every:
        assert measured[fold.id] == logged_tokens(session, fold.start, fold.end), fold
    # The summary folded over masked tool results: against them it saved far less
    # than against the log it stands for.
    [summary] = [f for f in every if f.kind == "summary" and f.superseded_by is None]
    superseded = [f for f in every if f.superseded_by == summary.id]
    assert superseded
    assert measured[summary.id] > summary.tokens_before > summary.tokens_after
    assert measured[summary.id] == logged_tokens(session, summary.start, summary.end)
    assert view.log_tokens([]) == {}


def test_the_floor_is_the_smallest_budget_render_takes() -> None:
    session = Memory(RAMStore()).session("s")
    session.extend(
        [SYSTEM, {"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]
    )
    view = session.view("default", preset="offline", budget=4000)
    system, user = session.store.messages(session.id, 1, 2)
    assert view.floor() == REPLY_PRIMING + system.tokens + user.tokens
    check_floor(view)

    long = {"role": "user", "content": "why does the cache keep stale entries? " * 40}
    session.append(long)
    latest = session.store.last_of_role(session.id, "user")
    assert latest is not None and latest.tokens > user.tokens
    assert view.floor() == REPLY_PRIMING + system.tokens + latest.tokens
    check_floor(view)

    # A view that does not show user messages needs room for its system prompt alone.
    quiet = session.view("quiet", preset="offline", budget=4000, filter={"not": {"role": "user"}})
    assert quiet.floor() == REPLY_PRIMING + system.tokens
    check_floor(quiet)


def check_floor(view: Any) -> None:
    floor = view.floor()
    assert view.render_report(floor).tokens <= floor
    with pytest.raises(BudgetError):
        view.render(floor - 1)
