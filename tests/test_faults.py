"""Fault injection: models that fail, hang or raise, and real HTTP servers that do.

Whatever the model does, a job makes at most ``JobLimits.max_calls`` model
calls, ends by its deadline, and fails as ``failed`` + ``degraded`` events
with the view's folds and the log unchanged; runners pace a failing view and
send nothing after ``stop()``; two inline compactions of one view never call
the model at the same time.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from fault_server import FaultServer, Mode

from contextfold import (
    Event,
    InvalidInput,
    JobLimits,
    Memory,
    ModelError,
    Session,
    View,
    get_model,
    preset_names,
)
from contextfold.cli import main
from contextfold.core.messages import Message
from contextfold.llm.base import RetryableError, RetryPolicy
from contextfold.runtime import AsyncioRunner, Cooldown, InlineRunner, ProcessRunner, ThreadRunner
from contextfold.testing import ScriptedModel

FAST = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05)
MODEL_PRESETS = [
    p for p in preset_names() if p not in ("disabled", "offline", "keep-recent", "tool-calls")
]
BIG = 1_000_000  # a budget no rescue is needed for: the view's own strategies plan


def chat(rounds: int, first: int = 0) -> list[Message]:
    out: list[Message] = []
    for i in range(first, first + rounds):
        out.append({"role": "user", "content": f"Step {i}: fix the loader in src/app/load_{i}.py "})
        out.append({"role": "assistant", "content": f"Done with step {i}. " * 40})
    return out


def session_with(rounds: int = 12, memory: Memory | None = None) -> Session:
    session = (memory or Memory()).session("s", system="You are a coding agent.")
    session.extend(chat(rounds))
    return session


def watched(view: View) -> list[Event]:
    events: list[Event] = []
    view.on_event.append(events.append)
    return events


def kinds(events: Sequence[Event]) -> list[str]:
    return [e.kind for e in events]


class Hanging:
    """A user's own LLM (not a ``Model``) that sleeps past any deadline."""

    name = "hanging"

    def __init__(self, seconds: float = 30.0) -> None:
        self.seconds = seconds
        self.calls = 0

    def complete(self, messages: Any, *, max_tokens: Any = None, schema: Any = None) -> Any:
        self.calls += 1
        time.sleep(self.seconds)
        raise AssertionError("a hung call came back")

    async def acomplete(self, messages: Any, *, max_tokens: Any = None, schema: Any = None) -> Any:
        return self.complete(messages)


# -- any failure of a model degrades, within the budget ---------------------------------

FAILURES: list[BaseException] = [
    ModelError("upstream 400", status=400),
    RetryableError("upstream 503", status=503),
    TimeoutError("read timed out"),
    ConnectionResetError("connection reset by peer"),
    KeyError("choices"),
    RuntimeError("bug in the user's LLM"),
]


@pytest.mark.parametrize("preset", MODEL_PRESETS)
@pytest.mark.parametrize("failure", FAILURES, ids=lambda e: type(e).__name__)
def test_any_model_exception_degrades_and_only_the_extractive_rescue_folds(
    preset: str, failure: BaseException
) -> None:
    session = session_with(rounds=20)
    history = session.history()
    model = ScriptedModel(default=failure)
    view = session.view("v", preset=preset, budget=3000, llm=model)
    events = watched(view)
    report = view.compact(limits=JobLimits(max_calls=4))
    assert report.degraded
    assert session.history() == history
    for fold in view.folds(include_superseded=True):  # the model made none of them
        assert fold.strategy == "rescue" and (fold.usage or {}).get("model") != "scripted"
    failed = [e for e in events if e.kind == "failed"]
    assert failed and kinds(events).count("degraded") == len(failed)
    assert type(failure).__name__ in failed[0].detail or str(failure) in failed[0].detail
    assert len(model.calls) <= 4 * len(failed)


@pytest.mark.parametrize("preset", ["rolling", "taskweaver"])
def test_a_failed_job_leaves_folds_and_log_unchanged(preset: str) -> None:
    session = session_with(rounds=20)
    model = ScriptedModel(["A short summary of the first rounds."], default="A short summary.")
    view = session.view("v", preset=preset, budget=BIG, llm=model)
    view.compact()
    before, history = view.folds(include_superseded=True), session.history()
    assert before
    session.extend(chat(12, first=20))
    model.default = RuntimeError("the model is gone")
    events = watched(view)
    report = view.compact()
    assert report.degraded and report.folds == ()
    assert view.folds(include_superseded=True) == before
    assert session.history()[: len(history)] == history
    assert "failed" in kinds(events) and "committed" not in kinds(events)


def test_a_model_adapter_makes_at_most_max_calls_requests_per_job() -> None:
    with FaultServer("error") as server:
        session = session_with()
        llm = get_model(server.spec(), timeout=5.0, retry=FAST)
        view = session.view("v", preset="rolling", budget=BIG, llm=llm)
        report = view.compact(limits=JobLimits(max_calls=4))
        assert report.failed == ("rolling",)
        assert server.requests == 4  # 3 checked attempts x 4 retries would be 12
        assert "budget of 4 model calls" in report.reasons[0]
        assert "HTTP 500" in report.reasons[0]
        view.compact(limits=JobLimits(max_calls=2))
        assert server.requests == 6


# -- deadlines ---------------------------------------------------------------------------


def test_a_hanging_user_llm_fails_at_the_deadline() -> None:
    session = session_with()
    model = Hanging()
    view = session.view("v", preset="rolling", budget=BIG, llm=model)
    events = watched(view)
    began = time.monotonic()
    report = view.compact(limits=JobLimits(deadline_s=0.5))
    assert time.monotonic() - began < 2.0
    assert report.failed == ("rolling",) and "deadline" in report.reasons[0]
    assert kinds(events) == ["planned", "started", "failed", "degraded"]
    assert view.folds() == [] and model.calls == 1


@pytest.mark.parametrize("mode", ["hang", "trickle"])
def test_a_hung_http_server_fails_the_job_at_its_deadline(mode: Mode) -> None:
    with FaultServer(mode) as server:
        session = session_with()
        history = session.history()
        view = session.view("v", preset="rolling", budget=BIG, model=server.spec())
        began = time.monotonic()
        report = view.compact(limits=JobLimits(deadline_s=1.5))
        took = time.monotonic() - began
        assert 1.4 < took < 3.0
        assert report.failed == ("rolling",) and "deadline" in report.reasons[0]
        assert server.requests <= 4
        assert view.folds() == [] and session.history() == history


def test_the_per_call_timeout_bounds_a_trickling_server_without_a_job() -> None:
    """The SDK's read timeout never fires against a byte every 0.2 s; the wall bound does."""
    with FaultServer("trickle") as server:
        llm = get_model(server.spec(), timeout=0.5, retry=RetryPolicy(attempts=1))
        began = time.monotonic()
        with pytest.raises(RetryableError, match="no answer within"):
            llm.complete([{"role": "user", "content": "hi"}])
        assert time.monotonic() - began < 3.0


# -- cooldown ------------------------------------------------------------------------------


def test_forty_appends_against_a_failing_model_cost_a_handful_of_calls() -> None:
    session = session_with(rounds=4)
    model = ScriptedModel(default=RetryableError("upstream 503", status=503))
    view = session.view("v", preset="rolling", budget=BIG, llm=model)
    events = watched(view)
    runner = InlineRunner(cooldown=Cooldown(base_s=30.0))
    runner.watch(view)
    for message in chat(20, first=4):
        session.append(message)
    runner.stop()
    assert kinds(events).count("failed") == 1
    assert len(model.calls) <= 4
    assert view.folds() == []


def test_the_cooldown_doubles_and_a_success_ends_it() -> None:
    session = session_with(rounds=12)
    model = ScriptedModel([RetryableError("down")] * 6, default="A short summary.")
    view = session.view("v", preset="rolling", budget=BIG, llm=model)
    events = watched(view)
    runner = InlineRunner(cooldown=Cooldown(base_s=0.2, max_s=10.0))
    runner.watch(view)  # fails: 3 calls, paused 0.2 s
    assert kinds(events).count("failed") == 1
    session.extend(chat(1, first=12))
    assert kinds(events).count("failed") == 1
    time.sleep(0.25)
    session.extend(chat(1, first=13))  # fails again: paused 0.4 s
    assert kinds(events).count("failed") == 2
    time.sleep(0.25)
    session.extend(chat(1, first=14))
    assert kinds(events).count("failed") == 2  # still cooling
    time.sleep(0.2)
    session.extend(chat(1, first=15))
    assert kinds(events).count("committed") >= 1
    assert runner.cooldowns.cooling(("s", "v"), lambda: view.version) is False
    runner.stop()


def test_forty_appends_against_an_erroring_server_with_a_thread_runner() -> None:
    with FaultServer("error") as server:
        session = session_with(rounds=4)
        llm = get_model(server.spec(), timeout=5.0, retry=FAST)
        view = session.view("v", preset="rolling", budget=BIG, llm=llm)
        runner = ThreadRunner(cooldown=Cooldown(base_s=30.0))
        runner.watch(view)
        for message in chat(20, first=4):
            session.append(message)
            time.sleep(0.005)
        assert runner.wait_idle(10)
        runner.stop()
        assert 1 <= server.requests <= 4
        assert view.folds() == []


# -- cancellation: nothing goes out after stop() ------------------------------------------


def _first_request(server: FaultServer, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while server.requests == 0:
        assert time.monotonic() < deadline, "no request came"
        time.sleep(0.01)


def _hung_view(server: FaultServer) -> View:
    session = session_with(rounds=12)
    # The server never answers: each attempt times out after 0.5 s (+ the wall grace),
    # and would be retried at once were the job not cancelled.
    llm = get_model(server.spec(), timeout=0.5, retry=RetryPolicy(attempts=4, base_delay=0.0))
    return session.view("v", preset="rolling", budget=BIG, llm=llm)


@pytest.mark.parametrize("drain", [True, False])
@pytest.mark.parametrize("kind", ["thread", "process"])
def test_no_request_after_a_thread_runner_stops(kind: str, drain: bool) -> None:
    with FaultServer("hang") as server:
        view = _hung_view(server)
        runner = ThreadRunner() if kind == "thread" else ProcessRunner()
        runner.watch(view)
        _first_request(server)
        assert not runner.stop(timeout=0.1, drain=drain)
        stopped = time.monotonic()
        time.sleep(2.5)  # past the hung attempt's timeout: a retry would have gone out
        assert server.after(stopped) == 0
        assert view.folds() == []


def test_no_request_after_an_asyncio_runner_stops() -> None:
    with FaultServer("hang") as server:

        async def main() -> float:
            view = _hung_view(server)
            runner = AsyncioRunner()
            runner.watch(view)
            while server.requests == 0:
                await asyncio.sleep(0.01)
            assert not await runner.stop(timeout=0.1)
            return time.monotonic()

        stopped = asyncio.run(main())
        time.sleep(2.5)
        assert server.after(stopped) == 0


# -- two inline compactions of one view take turns ----------------------------------------


class Overlap:
    """A scripted LLM that sleeps in each call and records the most calls at once."""

    name = "overlap"

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = 0
        self.most = 0
        self.calls = 0

    def complete(self, messages: Any, *, max_tokens: Any = None, schema: Any = None) -> Any:
        with self.lock:
            self.active += 1
            self.calls += 1
            self.most = max(self.most, self.active)
        try:
            time.sleep(0.1)
            return ScriptedModel(default="A short summary.").complete(messages, schema=schema)
        finally:
            with self.lock:
                self.active -= 1

    async def acomplete(self, messages: Any, *, max_tokens: Any = None, schema: Any = None) -> Any:
        return self.complete(messages, schema=schema)


def _at_once(*calls: Callable[[], object]) -> None:
    start = threading.Barrier(len(calls))

    def run(call: Callable[[], object]) -> None:
        start.wait()
        call()

    threads = [threading.Thread(target=run, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)


def test_two_threads_compacting_one_view_never_call_the_model_at_once() -> None:
    session = session_with(rounds=20)
    llm = Overlap()
    view = session.view("v", preset="rolling", budget=BIG, llm=llm)
    _at_once(view.compact, view.compact)
    assert llm.calls >= 1 and llm.most == 1
    assert len(view.folds()) == 1


def test_two_handles_on_one_file_never_call_the_model_at_once(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    first = session_with(rounds=20, memory=Memory(path))
    second = Memory(path).session("s")
    llm = Overlap()
    views = [s.view("v", preset="rolling", budget=BIG, llm=llm) for s in (first, second)]
    _at_once(views[0].compact, views[1].compact)
    assert llm.calls >= 1 and llm.most == 1
    assert len(views[0].folds()) == 1


# -- the command line ---------------------------------------------------------------------


@pytest.fixture
def conversation(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "conv.json"
    path.write_text(json.dumps(chat(30)), encoding="utf-8")
    yield path


@pytest.mark.parametrize("mode", ["hang", "error"])
def test_cli_exits_3_with_the_reasons_when_the_model_fails(conversation: Path, mode: Mode) -> None:
    with FaultServer(mode) as server:
        argv = [
            sys.executable,
            "-m",
            "contextfold.cli",
            "compact",
            str(conversation),
            "--budget",
            "800",
            "--preset",
            "rolling",
            "--model",
            server.spec(),
            "--timeout",
            "1.5",
            "--json",
        ]
        began = time.monotonic()
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        took = time.monotonic() - began
        assert done.returncode == 3, done.stderr
        result = json.loads(done.stdout.splitlines()[-1])
        assert result["degraded"] is True and result["failed"] == ["rolling"]
        assert result["reasons"] and "degraded" in done.stderr
        assert result["tokens_after"] <= 800  # the prompt still fits: the rescue folded
        assert server.requests <= 4
        assert took < 20


# -- settings ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "field"),
    [
        ({"max_calls": 0}, "max_calls"),
        ({"max_calls": 2.5}, "max_calls"),
        ({"max_calls": True}, "max_calls"),
        ({"deadline_s": 0}, "deadline_s"),
        ({"deadline_s": -1.0}, "deadline_s"),
    ],
)
def test_bad_job_limits_name_the_field(limits: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        JobLimits(**limits)
    assert caught.value.field == field


def test_a_bad_cooldown_is_refused() -> None:
    with pytest.raises(InvalidInput, match="cooldown"):
        Cooldown(base_s=5.0, max_s=1.0)


@pytest.mark.parametrize("value", ["0", "-3", "soon", "inf"])
def test_cli_refuses_a_bad_timeout(conversation: Path, value: str) -> None:
    assert main(["compact", str(conversation), "--budget", "800", "--timeout", value]) == 2
