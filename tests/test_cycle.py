"""The one compaction cycle: events from one place, the model chosen once, nothing cut untold."""

from __future__ import annotations

import random

import pytest
from conftest import load_rows

from contextfold import BudgetError, Memory, ModelError
from contextfold.core.events import Event
from contextfold.core.messages import Message
from contextfold.core.units import tool_unit_faults
from contextfold.memory.bridge import settled
from contextfold.memory.cache import PromptCache, StateCache
from contextfold.memory.cycle import RESCUE, plan, run_cycle
from contextfold.memory.recalled import HEADER
from contextfold.strategies import Pipeline, RollingCompactor, preset_names
from contextfold.strategies.triggers import Never
from contextfold.testing import ScriptedModel


def chat(rounds: int, words: int = 80) -> list[dict[str, str]]:
    text = " ".join(f"w{i}" for i in range(words))
    out = []
    for r in range(rounds):
        out.append({"role": "user", "content": f"question {r}: {text}"})
        out.append({"role": "assistant", "content": f"answer {r}: {text}."})
    return out


class Failing(ScriptedModel):
    def complete(self, *args: object, **kwargs: object):  # type: ignore[no-untyped-def,override]
        raise ModelError("upstream 503")


def test_each_event_comes_once_from_the_cycle() -> None:
    events: list[Event] = []
    session = Memory().session("s", system="sys")
    session.extend(chat(8))
    view = session.view("v", pipeline=Pipeline([RollingCompactor(threshold=3, retain_recent=1)]))
    view.on_event.append(events.append)
    report = run_cycle(view)
    assert [e.kind for e in events] == ["planned", "started", "committed"]
    assert len(report.folds) == 1 and report.failed == ()


def test_a_failing_model_degrades_the_view_and_commits_nothing() -> None:
    events: list[Event] = []
    session = Memory().session("s", system="sys")
    session.extend(chat(8))
    view = session.view("v", preset="rolling", threshold=3, retain_recent=1, llm=Failing())
    view.on_event.append(events.append)
    report = view.compact()
    assert report.folds == () and report.failed == ("rolling",)
    assert [e.kind for e in events] == ["planned", "started", "failed", "degraded"]
    assert view.folds() == []


def test_without_a_model_the_offline_stand_in_is_chosen_by_the_engine() -> None:
    session = Memory().session("s", system="sys")
    session.extend(chat(8))
    view = session.view("v", preset="rolling", threshold=3, retain_recent=1)
    (fold,) = view.compact().folds
    assert fold.usage is not None and fold.usage["model"] == "offline"


def test_over_budget_the_rescue_folds_what_render_would_cut() -> None:
    session = Memory().session("s", system="sys")
    session.extend(chat(30, words=300))
    # Rolling folds all but the 3 newest rounds: those alone are over the budget.
    view = session.view("v", preset="rolling", budget=1500)
    report = view.compact()
    assert RESCUE.name in {f.strategy for f in report.folds}
    rendered = view.render_report()
    assert rendered.omitted == 0 and rendered.tokens <= 1500
    assert rendered.messages[-1]["content"].startswith("answer 29")
    assert any("[Folded to fit the token budget" in str(m["content"]) for m in rendered.messages)


def test_the_rescue_folds_down_to_its_mark_of_the_room_beside_the_system_prompt() -> None:
    budget = 4000
    session = Memory().session("s", system="rules " * 900)  # a large part of the budget
    session.extend(chat(30, words=60))
    state = session.view("v", preset="disabled", budget=budget).state()
    job = RESCUE.plan(state)
    assert job is not None
    target = state.mark(budget, min(RESCUE.depth, state.low_water))
    assert state.fixed < target < state.fixed + int(budget * RESCUE.depth)  # not of the budget
    user = state.latest_user
    folded = [i for i, e in enumerate(state.entries) if job.start <= e.start <= job.end]
    kept = state.tokens - sum(state.entries[i].tokens for i in folded if i != user)
    assert kept + job.params["fold_tokens"] <= target
    # The job is as short as that allows: one unit fewer would stay above the mark.
    first, _ = next(u for u in reversed(state.units) if u[1] == folded[-1])
    last_unit = sum(state.entries[i].tokens for i in range(first, folded[-1] + 1) if i != user)
    assert kept + last_unit + job.params["fold_tokens"] > target


def test_when_the_model_fails_the_rescue_folds_extractively() -> None:
    session = Memory().session("s", system="sys")
    session.extend(chat(30))
    view = session.view("v", preset="rolling", budget=1500, llm=Failing())
    view.compact()
    rescued = [f for f in view.folds() if f.strategy == RESCUE.name]
    assert rescued and all(f.usage and f.usage["model"] == "offline" for f in rescued)
    assert view.render_report().omitted == 0


def test_the_disabled_preset_never_folds() -> None:
    session = Memory().session("s", system="sys")
    session.extend(chat(30))
    view = session.view("v", preset="disabled", budget=1500)
    assert view.compact().folds == ()
    assert view.render_report().omitted > 0


def test_rescue_keeps_the_latest_user_message_verbatim() -> None:
    session = Memory().session("s", system="sys")
    session.append({"role": "user", "content": "the task: fix the loader"})
    for i in range(40):
        session.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "read", "arguments": "{}"},
                    }
                ],
            }
        )
        session.append({"role": "tool", "tool_call_id": f"c{i}", "content": "x " * 200})
    view = session.view("v", preset="tool-calls", budget=2500)
    view.compact()
    prompt = view.render_report()
    assert prompt.omitted == 0 and tool_unit_faults(prompt.messages) == []
    assert {"role": "user", "content": "the task: fix the loader"} in prompt.messages


@pytest.mark.parametrize("preset", ["offline", "keep-recent", "rolling", "token-budget"])
def test_cached_prompts_and_states_equal_fresh_ones(preset: str) -> None:
    """Appending one message at a time, the cached prompt is always the fresh render."""
    rng = random.Random(7)
    rows = load_rows("taubench_airline_dev", limit=6)
    for row in rows:
        messages = row["messages"]
        budget = rng.randint(800, 4000)
        session = Memory().session("s")
        view = session.view("v", preset=preset, budget=budget)
        for message in messages:
            session.append(message)
            if rng.random() < 0.3:
                view.compact()
            cached = view.render_report()
            for _ in range(100):  # a digest a render stood past its deadline is not cached
                if settled(cached.folds):
                    break
                cached = view.render_report()
            state = view.state()
            view.binding.prompts = PromptCache()
            view.binding.reading.states = StateCache()
            fresh = view.render_report()
            if view.config.recall_settings is None:
                assert fresh == cached
            else:
                # A recall block is chosen when the user's message arrives and kept while
                # the turn's appends fit; a fresh render may choose it again.
                assert without_recall(fresh.messages) == without_recall(cached.messages)
                assert cached.tokens <= budget and not set(cached.recalled) & set(cached.shown)
            assert view.state().entries == state.entries


def without_recall(messages: list[Message]) -> list[Message]:
    return [m for m in messages if not str(m.get("content", "")).startswith(HEADER)]


def test_every_folding_preset_leaves_nothing_cut_on_agent_runs() -> None:
    rows = load_rows("openhands_example") + load_rows("taubench_airline_dev", limit=5)
    for preset in preset_names():
        if preset == "disabled":
            continue
        for row in rows:
            session = Memory().session("s")
            session.extend(row["messages"])
            view = session.view("v", preset=preset, budget=4000)
            view.compact()
            rendered = view.render_report()
            assert rendered.omitted == 0, (preset, row.get("id"))
            assert rendered.tokens <= 4000


def test_with_no_usable_summary_the_rescue_leaves_each_messages_opening() -> None:
    session = Memory().session("s", system="sys")
    session.extend(chat(30))
    state = session.view("v", preset="rolling", budget=1500).state()
    job = RESCUE.plan(state)
    assert job is not None
    (fold,) = RESCUE.digest(job, session.counter)
    assert fold.data["digest"] and fold.strategy == "rescue"
    assert fold.text.startswith(f"[Folded to fit the token budget: a summary of seq {job.start}-")
    assert "user: question 0: w0 w1" in fold.text


@pytest.mark.parametrize(
    ("preset", "options"),
    [
        ("offline", {}),
        ("rolling", {"threshold": 3, "retain_recent": 1}),
        ("whole-history", {"max_messages": 10}),
    ],
)
def test_a_budget_below_system_and_latest_user_changes_nothing_and_says_why(
    preset: str, options: dict[str, int]
) -> None:
    # Issue 9: compact() committed folds for a budget no prompt could meet.
    events: list[Event] = []
    session = Memory().session("s", system="You are a careful agent. " * 20)
    session.extend(chat(30))
    view = session.view("v", preset=preset, **options)
    view.on_event.append(events.append)
    system_and_user = view.state().fixed + session.counter.message(session.history()[-2])
    budget = system_and_user - 1
    with pytest.raises(BudgetError) as info:
        view.compact(budget)
    assert (info.value.budget, info.value.required) == (budget, system_and_user)
    assert view.folds(include_superseded=True) == [] and events == []
    # A runner plans nothing for it either, and a budget that holds both does fold.
    assert plan(view.require_pipeline().strategies, view.state(budget)) is None
    assert view.compact(system_and_user + 2_000).folds


def test_a_second_rescue_reads_the_previous_summary_without_its_pins_and_carries_them() -> None:
    def facts(first: int, count: int) -> list[dict[str, str]]:
        out = []
        for r in range(first, first + count):
            words = " ".join(f"w{i}" for i in range(120))
            out.append({"role": "user", "content": f"step {r}: edit /srv/app/mod_{r}.py {words}"})
            out.append({"role": "assistant", "content": f"done {r}: wrote /srv/app/mod_{r}.py."})
        return out

    model = ScriptedModel(default="I edited the app's modules one by one.")
    session = Memory().session("s", system="sys")
    session.extend(facts(0, 12))
    pipeline = Pipeline([RollingCompactor(trigger=Never())])
    view = session.view("v", pipeline=pipeline, budget=1500, llm=model)
    (first,) = [f for f in view.compact().folds if f.strategy == RESCUE.name]
    assert first.data["pinned"] and f"- {first.data['pinned'][-1]}" in first.text
    plain = " ".join(["the loader reads its settings once"] * 25)
    session.extend(
        m
        for _ in range(4)
        for m in ({"role": "user", "content": plain}, {"role": "assistant", "content": plain})
    )
    second = next(f for f in view.compact().folds if f.start == first.start)
    sent = model.calls[-1].messages[-1]["content"]
    history = sent.split("<history>\n", 1)[1]
    # The previous summary without its pinned list, then only what came after it.
    assert history.startswith(first.text.split("\n\nPinned", 1)[0])
    assert "Pinned" not in sent
    assert f"step {first.end}" not in sent and "mod_0.py" not in sent
    assert sent.count(plain) >= 6
    # What the answer left out of the previous pins is pinned again, the newest first.
    assert set(first.data["pinned"][-4:]) <= set(second.data["pinned"])
    assert len(model.calls) == 2
