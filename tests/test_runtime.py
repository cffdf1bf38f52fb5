"""Runners in one process: off the hot path, single-flight, coalescing, stopping."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
from crash_worker import (
    WAIT,
    Gate,
    Slow,
    SlowToFinish,
    SummarizeRounds,
    chat,
    kinds,
    new_session,
    ranges,
    summarizing_view,
)

from contextfold import Fold, InvalidInput, Memory, ModelError, Session, View
from contextfold.core.events import Event
from contextfold.runtime import Cooldown, InlineRunner, ThreadRunner
from contextfold.store import RAMStore
from contextfold.strategies import KeepRecent, Pipeline, register_strategy
from contextfold.testing import ScriptedModel


def held_at_gate(runner: ThreadRunner) -> tuple[Gate, Session, View]:
    """A 6-round session watched by ``runner``, its first job held inside the model call."""
    gate = Gate()
    session = new_session(rounds=6)
    view = summarizing_view(session, gate.model())
    runner.watch(view)
    assert gate.entered.acquire(timeout=WAIT)
    return gate, session, view


def test_inline_runner_compacts_inside_append() -> None:
    events: list[Event] = []
    session = new_session()
    view = summarizing_view(session, ScriptedModel(default="short"))
    runner = InlineRunner(on_event=[events.append])
    runner.watch(view)
    session.extend(chat(4))
    assert view.folds() == []
    session.append({"role": "user", "content": "one more question"})
    assert ranges(view.folds()) == [(2, 7)]
    assert kinds(events) == ["planned", "started", "committed"]
    committed = events[-1]
    assert (committed.session, committed.view, committed.start, committed.end) == (
        "s",
        "default",
        2,
        7,
    )
    assert committed.tokens_before > committed.tokens_after > 0
    assert committed.usage is not None and committed.usage["calls"] == 1
    assert committed.duration_s > 0
    assert view.render()[1]["content"].startswith("[SUMMARY 2..7]")
    assert runner.stop()


def test_watch_plans_a_long_session_at_once() -> None:
    session = new_session(rounds=8)
    view = summarizing_view(session, ScriptedModel(default="short"))
    InlineRunner().watch(view)
    assert ranges(view.folds()) == [(2, 13)]


def test_watch_needs_a_pipeline_and_unwatch_stops_compaction() -> None:
    session = new_session()
    session.view("local", pipeline=Pipeline([KeepRecent()]), local=True)
    elsewhere = Memory(session.store).session(session.id).view("local")
    with pytest.raises(InvalidInput) as info:
        InlineRunner().watch(elsewhere)  # its pipeline lives with the first Memory
    assert info.value.field == "pipeline"
    view = summarizing_view(session, ScriptedModel(default="short"))
    runner = InlineRunner()
    runner.watch(view)
    runner.unwatch(view)
    assert session.memory.wake.sessions() == [] and view.on_event == []
    session.extend(chat(8))
    assert view.folds() == []


def test_thread_runner_serves_committed_folds_while_a_job_runs() -> None:
    runner = ThreadRunner()
    gate, session, view = held_at_gate(runner)
    job = runner.running(view)
    assert job is not None and (job.start, job.end) == (2, 9)
    began = time.perf_counter()
    session.append({"role": "user", "content": "next question"})
    prompt = view.render()
    assert time.perf_counter() - began < 0.5
    assert prompt[-1]["content"] == "next question"
    assert view.folds() == [] and "[SUMMARY" not in str(prompt)
    gate.open.set()
    assert runner.wait_idle(WAIT)
    assert ranges(view.folds()) == [(2, 9)]
    assert view.render()[1]["content"].startswith("[SUMMARY 2..9]")
    assert runner.stop()


def test_appends_during_a_job_coalesce_into_one_more_plan() -> None:
    events: list[Event] = []
    runner = ThreadRunner(workers=4, on_event=[events.append])
    gate, session, view = held_at_gate(runner)
    for message in chat(20, first=6):
        session.append(message)
    assert kinds(events) == ["planned", "started"]
    gate.open.set()
    assert runner.wait_idle(WAIT)
    assert kinds(events) == ["planned", "started", "committed"] * 2
    assert ranges(view.folds()) == [(2, 49)]
    assert gate.most == 1
    runner.stop()


def test_one_compaction_per_view_across_runners_and_threads() -> None:
    slow = Slow(0.03)
    store = RAMStore()
    events: list[Event] = []
    views = []
    runners: list[ThreadRunner] = []
    for _ in range(3):  # three handles on one session, as three services would have
        session = Memory(store).session("s", system="You help with tests.")
        view = summarizing_view(session, ScriptedModel(default=slow.reply))
        runner = ThreadRunner(workers=3, retry_s=0.01, on_event=[events.append])
        runner.watch(view)
        views.append(view)
        runners.append(runner)

    def talk(k: int) -> None:
        for message in chat(15, first=100 * k):
            views[k].session.append(message)
            time.sleep(0.002)

    writers = [threading.Thread(target=talk, args=(k,)) for k in range(3)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    for _ in range(3):  # a last nudge, as the next turn would give, once leases are free
        for runner, view in zip(runners, views, strict=True):
            assert runner.wait_idle(WAIT)
            runner.notify(view)
    for runner in runners:
        assert runner.wait_idle(WAIT)
        runner.stop()
    assert slow.most == 1
    assert sum(r.lease_refusals for r in runners) > 0
    assert "rejected" not in kinds(events)
    assert kinds(events).count("committed") >= 2
    assert len(views[0].folds()) == 1
    assert SummarizeRounds().plan(views[0].state()) is None


class HeldPlan(SummarizeRounds):
    """Its first plan waits for the test, reading the view as it was before."""

    def __init__(self) -> None:
        super().__init__()
        self.planning = threading.Event()
        self.resume = threading.Event()

    def plan(self, state: Any) -> Any:
        if not self.planning.is_set():
            self.planning.set()
            assert self.resume.wait(WAIT)
        return super().plan(state)


register_strategy("test-held-plan", HeldPlan)


def test_append_during_a_plan_that_finds_nothing_is_planned_again() -> None:
    session = new_session(rounds=3)
    strategy = HeldPlan()
    view = session.view("default", pipeline=Pipeline([strategy]), llm=ScriptedModel(default="s"))
    runner = ThreadRunner()
    runner.watch(view)
    assert strategy.planning.wait(WAIT)
    session.extend(chat(4, first=3))
    strategy.resume.set()
    assert runner.wait_idle(WAIT)
    assert ranges(view.folds()) == [(2, 11)]
    runner.stop()


def test_refused_commit_plans_again_from_what_is_committed() -> None:
    events: list[Event] = []
    runner = ThreadRunner(on_event=[events.append])
    gate, session, view = held_at_gate(runner)
    message = {"role": "user", "content": "x"}
    cost = session.counter.message(message)
    other = Fold("default", 2, 3, "summary", "x", (message,), "other", 9, cost)
    session.store.commit_folds("s", "default", [other], 0)
    gate.open.set()
    assert runner.wait_idle(WAIT)
    assert kinds(events) == ["planned", "started", "rejected", "planned", "started", "committed"]
    assert ranges(view.folds()) == [(2, 9)]
    every = view.folds(include_superseded=True)
    assert [f.superseded_by for f in every if f.id == other.id] == [view.folds()[0].id]
    runner.stop()


def test_failed_model_degrades_then_next_append_after_the_cooldown_retries() -> None:
    events: list[Event] = []
    model = ScriptedModel([ModelError("upstream 503", status=503)], default="short")
    session = new_session()
    view = summarizing_view(session, model)
    runner = InlineRunner(on_event=[events.append], cooldown=Cooldown(base_s=0.0))
    runner.watch(view)
    session.extend(chat(5))
    assert kinds(events) == ["planned", "started", "failed", "degraded"]
    assert "503" in events[2].detail
    assert view.folds() == []
    session.append({"role": "user", "content": "and now?"})
    assert kinds(events)[4:] == ["planned", "started", "committed"]
    assert ranges(view.folds()) == [(2, 9)]


def test_thread_append_as_a_cycle_ends_is_not_lost() -> None:
    session = new_session(rounds=2)
    view = summarizing_view(session, ScriptedModel(default="short"))
    runner = ThreadRunner(workers=1)
    hold = SlowToFinish(runner)
    runner.watch(view)
    assert hold.finished.wait(WAIT)
    session.extend(chat(4, first=2))
    hold.resume.set()
    assert runner.wait_idle(WAIT)
    assert ranges(view.folds()) == [(2, 9)]
    runner.stop()


class Broken(SummarizeRounds):
    def run(self, job: Any, llm: Any, counter: Any) -> Sequence[Fold]:
        raise RuntimeError("bug in a strategy")


register_strategy("test-broken", Broken)


def test_strategy_bug_is_contained_and_frees_the_lease(caplog: pytest.LogCaptureFixture) -> None:
    events: list[Event] = []
    session = new_session(rounds=6)
    view = session.view("default", pipeline=Pipeline([Broken()]), llm=ScriptedModel())
    runner = ThreadRunner(workers=1, on_event=[events.append])
    with caplog.at_level(logging.WARNING, logger="contextfold"):
        runner.watch(view)
        assert runner.wait_idle(WAIT)
    assert kinds(events) == ["planned", "started", "failed", "degraded"]
    assert "RuntimeError: bug in a strategy" in events[2].detail
    assert session.store.acquire_lease("s", "default", "someone else", 1.0)
    session.store.release_lease("s", "default", "someone else")
    session.view(
        "default", pipeline=Pipeline([SummarizeRounds()]), llm=ScriptedModel(default="short")
    )
    session.append({"role": "user", "content": "again"})
    assert runner.wait_idle(WAIT)
    assert ranges(view.folds()) == [(2, 11)]
    runner.stop()


def test_lease_held_elsewhere_is_retried_after_it_expires() -> None:
    session = new_session(rounds=6)
    view = summarizing_view(session, ScriptedModel(default="short"))
    assert session.store.acquire_lease("s", "default", "another process", ttl_s=0.5)
    runner = ThreadRunner(retry_s=0.05)
    runner.watch(view)
    deadline = time.monotonic() + WAIT
    while not view.folds() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ranges(view.folds()) == [(2, 9)]
    assert runner.lease_refusals >= 1
    runner.stop()


def test_appends_to_a_leased_view_wait_on_one_retry_not_one_each() -> None:
    session = new_session(rounds=6)
    view = summarizing_view(session, ScriptedModel(default="short"))
    assert session.store.acquire_lease("s", "default", "another process", ttl_s=30)
    runner = ThreadRunner(retry_s=0.5, settle_s=0)
    runner.watch(view)
    deadline = time.monotonic() + WAIT
    while runner.lease_refusals < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    for i in range(10):
        session.append({"role": "user", "content": f"more {i}"})
        assert runner.wait_idle(WAIT)
    assert runner.lease_refusals >= 11  # each append plans once and is refused once
    time.sleep(1.2)  # two retry periods: one retry each, not one per append
    assert runner.lease_refusals <= 14
    runner.stop()


def test_inline_runner_leaves_a_leased_view_to_the_next_append() -> None:
    session = new_session(rounds=6)
    view = summarizing_view(session, ScriptedModel(default="short"))
    assert session.store.acquire_lease("s", "default", "another process", ttl_s=0.2)
    runner = InlineRunner()
    runner.watch(view)
    assert view.folds() == [] and runner.lease_refusals == 1
    time.sleep(0.25)
    session.append({"role": "user", "content": "later"})
    assert ranges(view.folds()) == [(2, 11)]


def test_stop_drains_a_running_job() -> None:
    runner = ThreadRunner()
    gate, session, view = held_at_gate(runner)
    threading.Timer(0.2, gate.open.set).start()
    assert runner.stop(timeout=WAIT)
    assert ranges(view.folds()) == [(2, 9)]
    assert session.memory.wake.sessions() == []


@pytest.mark.parametrize("drain", [True, False])
def test_stop_abandons_a_job_that_never_commits(drain: bool) -> None:
    events: list[Event] = []
    runner = ThreadRunner(on_event=[events.append])
    gate, session, view = held_at_gate(runner)
    began = time.monotonic()
    assert not runner.stop(timeout=0.2, drain=drain)
    assert time.monotonic() - began < (2.0 if drain else 0.5)  # not the gate's 10 s
    assert session.store.acquire_lease("s", "default", "next owner", 1.0)
    gate.open.set()
    assert gate.returned.acquire(timeout=WAIT)
    time.sleep(0.05)
    assert view.folds(include_superseded=True) == []
    assert session.store.head("s", "default").fold_version == 0
    assert kinds(events) == ["planned", "started"]
    assert len(session.history()) == 13
    session.append({"role": "user", "content": "after stop"})
    assert view.folds() == []


def test_append_survives_a_failing_listener(caplog: pytest.LogCaptureFixture) -> None:
    session = new_session()
    heard: list[int] = []

    def broken(session_id: str) -> None:
        raise RuntimeError("listener bug")

    session.memory.wake.listen("s", broken)
    session.memory.wake.listen("s", lambda sid: heard.append(session.store.last_seq(sid)))
    with caplog.at_level(logging.ERROR, logger="contextfold"):
        logged = session.append({"role": "user", "content": "hi"})
    assert logged.seq == 2
    assert heard == [2]
    assert "wake listener failed" in caplog.text
