"""The runtime tests' doubles, and a real process for them to kill, race and watch exit.

The tests import the doubles (a small summarizing strategy, model doubles that
wait or take their time, a chat) from here. Run as ``python crash_worker.py
MODE ...``, it reports on stdout, one JSON object a line, flushed at once, so
a test that kills it knows what it had done.

Modes:

- ``crash DB TTL``: log a chat, compact it on a ThreadRunner with a model that
  never answers, and keep appending (reporting each append after it returned)
  until killed.
- ``contend DB GO CALLS SLEEP``: wait for the file GO, then compact the view of
  a chat the test logged, on a ThreadRunner, with a model taking SLEEP seconds
  whose calls are recorded in CALLS; report the view's events.
- ``exit thread|asyncio``: start a job whose model never answers, report when
  the model is called, and return from the main thread without stopping.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contextfold import Fold, Memory, Session, View
from contextfold.core.events import Event
from contextfold.core.messages import Message
from contextfold.core.tokens import TokenCounter
from contextfold.runtime import AsyncioRunner, ThreadRunner
from contextfold.strategies import Pipeline, register_strategy
from contextfold.strategies.base import Job, ViewState, job_for
from contextfold.testing import ScriptedModel

_out = threading.Lock()
WAIT = 10.0


def say(**record: Any) -> None:
    line = json.dumps(record) + "\n"
    with _out:
        sys.stdout.write(line)
        sys.stdout.flush()


@dataclass
class SummarizeRounds:
    """Once more than ``threshold`` rounds are unfolded, fold all but the last ``keep``
    (and the previous summary) into one summary: a rolling compactor in small."""

    threshold: int = 4
    keep: int = 2
    name: str = "summarize"

    def plan(self, state: ViewState) -> Job | None:
        unfolded = state.unfolded_rounds
        if len(unfolded) <= max(self.threshold, self.keep):
            return None
        return job_for(self.name, state, 0, unfolded[-self.keep - 1].last)

    def run(self, job: Job, llm: Any, counter: TokenCounter) -> Sequence[Fold]:
        shown = [m for e in job.entries for m in e.messages]
        done = llm.complete([{"role": "system", "content": "Summarize."}, *shown])
        message = {"role": "user", "content": f"[SUMMARY {job.start}..{job.end}] {done.text}"}
        return [
            Fold(
                view=job.view,
                start=job.start,
                end=job.end,
                kind="summary",
                text=str(message["content"]),
                messages=(message,),
                strategy=self.name,
                tokens_before=job.tokens_before,
                tokens_after=counter.message(message),
                usage=done.usage.to_dict(),
            )
        ]


register_strategy("test-summarize-rounds", SummarizeRounds)


def chat(rounds: int, first: int = 0) -> list[Message]:
    """``rounds`` closed rounds: a question and its answer each."""
    out: list[Message] = []
    for r in range(first, first + rounds):
        out.append({"role": "user", "content": f"question {r}: how do I fix test {r}?"})
        out.append({"role": "assistant", "content": f"answer {r}: change line {r} of the loader"})
    return out


class Gate:
    """A model double whose calls wait until the test opens the gate."""

    def __init__(self, text: str = "the summary") -> None:
        self.text = text
        self.open = threading.Event()
        self.entered = threading.Semaphore(0)
        self.returned = threading.Semaphore(0)
        self._lock = threading.Lock()
        self.active = 0
        self.most = 0

    def reply(self, messages: Sequence[Message]) -> str:
        with self._lock:
            self.active += 1
            self.most = max(self.most, self.active)
        self.entered.release()
        try:
            assert self.open.wait(WAIT), "the test never opened the gate"
            return self.text
        finally:
            with self._lock:
                self.active -= 1
            self.returned.release()

    def model(self) -> ScriptedModel:
        return ScriptedModel(default=self.reply)


class Slow:
    """A model double that takes ``delay`` seconds and records how many calls overlap."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self._lock = threading.Lock()
        self.active = 0
        self.most = 0

    def reply(self, messages: Sequence[Message]) -> str:
        with self._lock:
            self.active += 1
            self.most = max(self.most, self.active)
        time.sleep(self.delay)
        with self._lock:
            self.active -= 1
        return "the summary"


class SlowToFinish:
    """Holds a runner's cycle just after it gave its flight up, before it is done."""

    def __init__(self, runner: Any) -> None:
        self.finished = threading.Event()
        self.resume = threading.Event()
        finish = runner._finish

        def held(flight: Any) -> bool:
            over = bool(finish(flight))
            if over and not self.finished.is_set():
                self.finished.set()
                assert self.resume.wait(WAIT)
            return over

        runner._finish = held


def new_session(memory: Memory | None = None, rounds: int = 0) -> Session:
    session = (memory or Memory()).session("s", system="You help with tests.")
    if rounds:
        session.extend(chat(rounds))
    return session


def kinds(events: list[Event]) -> list[str]:
    return [e.kind for e in events]


def ranges(folds: list[Fold]) -> list[tuple[int, int]]:
    return [(f.start, f.end) for f in folds]


def summarizing_view(session: Session, model: ScriptedModel) -> View:
    return session.view(
        "default", pipeline=Pipeline([SummarizeRounds()], name="summarize"), llm=model
    )


def never_answers(marker: str) -> ScriptedModel:
    def reply(messages: Sequence[Message]) -> str:
        say(event=marker, pid=os.getpid())
        time.sleep(3600)
        return "never"

    return ScriptedModel(default=reply)


def crash(db: str, ttl: float) -> None:
    memory = Memory(db)
    session = memory.session("s", system="You help with tests.")
    for logged in session.extend(chat(10)):
        say(appended=logged.seq, content=logged.message["content"])
    view = summarizing_view(session, never_answers("model-called"))
    runner = ThreadRunner(workers=1, lease_ttl_s=ttl)
    say(owner=runner.owner)
    runner.watch(view)
    for r in range(10, 100_000):
        for message in chat(1, r):
            logged = session.append(message)
            say(appended=logged.seq, content=logged.message["content"])
        time.sleep(0.005)


def contend(db: str, go: str, calls: str, sleep_s: float) -> None:
    def reply(messages: Sequence[Message]) -> str:
        began = time.time()
        time.sleep(sleep_s)
        with open(calls, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"pid": os.getpid(), "began": began, "ended": time.time()}) + "\n")
        return "the summary"

    memory = Memory(db)
    session = memory.session("s")
    view = summarizing_view(session, ScriptedModel(default=reply))
    kinds: list[str] = []
    view.on_event.append(lambda event: kinds.append(event.kind))
    runner = ThreadRunner(workers=1, retry_s=0.05, lease_ttl_s=30)
    Path(f"{go}.{os.getpid()}").touch()
    while not Path(go).exists():
        time.sleep(0.001)
    runner.watch(view)
    deadline = time.monotonic() + 30
    while not (view.folds() and not runner.busy()) and time.monotonic() < deadline:
        time.sleep(0.02)
    runner.stop()
    say(events=kinds, refusals=runner.lease_refusals, folds=len(view.folds()))


def exit_early(kind: str) -> None:
    memory = Memory()
    session = memory.session("s", system="You help with tests.")
    session.extend(chat(10))
    view = summarizing_view(session, never_answers("model-called"))
    if kind == "thread":
        runner = ThreadRunner()
        runner.watch(view)
        while runner.running(view) is None:
            time.sleep(0.01)
        time.sleep(0.1)
        return

    async def main() -> None:
        runner = AsyncioRunner()
        runner.watch(view)
        while runner.running(view) is None:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)

    asyncio.run(main())


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "crash":
        crash(args[0], float(args[1]))
    elif mode == "contend":
        contend(args[0], args[1], args[2], float(args[3]))
    elif mode == "exit":
        exit_early(args[0])
        say(event="main-returned")
    else:
        raise SystemExit(f"unknown mode {mode!r}")
