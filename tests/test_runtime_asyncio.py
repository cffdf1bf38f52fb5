"""The asyncio runner: the loop stays free, stop abandons, and it twins the sync runners."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from crash_worker import (
    WAIT,
    Gate,
    SlowToFinish,
    chat,
    kinds,
    new_session,
    ranges,
    summarizing_view,
)

from contextfold import ModelError, Session
from contextfold.core.events import Event
from contextfold.runtime import AsyncioRunner, Cooldown, InlineRunner, Runner, ThreadRunner
from contextfold.testing import ScriptedModel


def test_asyncio_append_as_a_cycle_ends_is_not_lost() -> None:
    async def main() -> None:
        session = new_session(rounds=2)
        view = summarizing_view(session, ScriptedModel(default="short"))
        runner = AsyncioRunner()
        hold = SlowToFinish(runner)
        runner.watch(view)
        while not hold.finished.is_set():
            await asyncio.sleep(0.005)
        session.extend(chat(4, first=2))
        hold.resume.set()
        assert await runner.wait_idle(WAIT)
        assert ranges(view.folds()) == [(2, 9)]
        await runner.stop()

    asyncio.run(main())


def test_asyncio_runner_keeps_the_loop_free() -> None:
    gate = Gate()

    async def main() -> None:
        session = new_session(rounds=6)
        view = summarizing_view(session, gate.model())
        runner = AsyncioRunner()
        runner.watch(view)
        while runner.running(view) is None or gate.active == 0:
            await asyncio.sleep(0.005)
        ticks = 0
        for _ in range(10):
            await asyncio.sleep(0.001)
            ticks += 1
        session.append({"role": "user", "content": "next question"})
        assert view.render()[-1]["content"] == "next question"
        assert view.folds() == [] and ticks == 10
        gate.open.set()
        assert await runner.wait_idle(WAIT)
        assert ranges(view.folds()) == [(2, 9)]
        assert await runner.stop()

    asyncio.run(main())


def test_asyncio_stop_abandons_and_releases() -> None:
    gate = Gate()

    async def main() -> None:
        session = new_session(rounds=6)
        view = summarizing_view(session, gate.model())
        async with AsyncioRunner() as runner:
            runner.watch(view)
            while gate.active == 0:
                await asyncio.sleep(0.005)
            assert not await runner.stop(timeout=0.1)
            assert not runner.busy()
        assert session.store.acquire_lease("s", "default", "next owner", 1.0)
        gate.open.set()
        await asyncio.sleep(0.05)
        assert view.folds(include_superseded=True) == []

    asyncio.run(main())


def test_asyncio_watch_needs_a_running_loop() -> None:
    view = summarizing_view(new_session(), ScriptedModel(default="short"))
    with pytest.raises(RuntimeError, match="running event loop"):
        AsyncioRunner().watch(view)


Outcome = tuple[list[tuple[int, int, str, bool]], list[str]]


def _twin(runner: Runner) -> tuple[Session, Any, list[Event]]:
    """One scenario for every runner: a flaky model, then four summaries."""
    events: list[Event] = []
    model = ScriptedModel([ModelError("flaky"), "first", "second", "third"], default="later")
    session = new_session()
    view = summarizing_view(session, model)
    runner.on_event.append(events.append)
    runner.watch(view)
    return session, view, events


def _outcome(view: Any, events: list[Event]) -> Outcome:
    folds = view.folds(include_superseded=True)
    return [(f.start, f.end, f.text, f.superseded_by is None) for f in folds], kinds(events)


def test_sync_and_async_twins_behave_the_same() -> None:
    outcomes: dict[str, Outcome] = {}
    again = Cooldown(base_s=0.0)  # the failed job is tried again on the next append
    runners = (("inline", InlineRunner(cooldown=again)), ("thread", ThreadRunner(cooldown=again)))
    for name, runner in runners:
        session, view, events = _twin(runner)
        for message in chat(16):
            session.append(message)
            assert not isinstance(runner, ThreadRunner) or runner.wait_idle(WAIT)
        runner.stop()
        outcomes[name] = _outcome(view, events)

    async def in_loop() -> Outcome:
        runner = AsyncioRunner(cooldown=again)
        session, view, events = _twin(runner)
        for message in chat(16):
            session.append(message)
            assert await runner.wait_idle(WAIT)
        await runner.stop()
        return _outcome(view, events)

    outcomes["asyncio"] = asyncio.run(in_loop())
    assert outcomes["thread"] == outcomes["inline"]
    assert outcomes["asyncio"] == outcomes["inline"]
    folds, kinds = outcomes["inline"]
    assert kinds[:4] == ["planned", "started", "failed", "degraded"]
    assert kinds[4:] == ["planned", "started", "committed"] * 4
    assert [f[:2] for f in folds] == [(2, 7), (2, 13), (2, 19), (2, 25)]
    assert [f[3] for f in folds] == [False, False, False, True]
