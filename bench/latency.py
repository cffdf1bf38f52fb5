"""Next-turn latency while compaction runs: does a slow summarizer ever block a turn?

A session of 2,000 messages (the LoCoMo conversations of the shared data, one
after another) is compacted by the rolling compactor (fold all but the last 3
rounds once more than 10 are unfolded) with a model double that takes 2 s per
call. Each turn appends the user's message and renders the next prompt at a
budget of 8,000 tokens; that span is the latency measured. The assistant's
reply is appended after a 20 ms pause standing in for the chat model.

- ``disabled``: no runner, nothing is ever folded: the baseline.
- ``thread`` / ``asyncio``: ``ThreadRunner`` / ``AsyncioRunner``; the prompt
  comes from the folds committed so far while the 2 s job runs elsewhere. The
  goal is ``latency_p99_delta_ms_thread <= 5`` (p99 against the baseline).
  ``stale_share_*`` is the share of turns rendered while a job was running.
- ``inline``: ``InlineRunner``, which pays the 2 s inside the append whenever
  a job fires; it runs fewer turns (``turns_inline``) since each job costs 2 s.

Percentiles are nearest-rank over the turns of each mode. A job's CPU work (the
rolling compactor's pinning pass reads every folded message) holds the GIL,
so the turns it overlaps can wait a few milliseconds: ``latency_max_ms_*``
shows the worst of them.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from typing import Any

from _common import conversations, parse_args, report

from contextfold import Memory, Session, View
from contextfold.core.messages import Message
from contextfold.runtime import AsyncioRunner, InlineRunner, Stats, ThreadRunner
from contextfold.strategies import Pipeline
from contextfold.strategies.rolling import RollingCompactor
from contextfold.testing import ScriptedModel

MESSAGES = 2_000
MODEL_DELAY_S = 2.0
BUDGET = 8_000
REPLY_PAUSE_S = 0.02
SYSTEM = "You are a friendly companion who remembers what people tell you."


def chat_log() -> list[Message]:
    """Every LoCoMo conversation in turn, as plain user and assistant messages."""
    return [
        {"role": m["role"], "content": m["content"]}
        for row in conversations("locomo_dev")
        for m in row["messages"]
    ]


def slow_model(delay_s: float) -> ScriptedModel:
    def reply(messages: Sequence[Message]) -> str:
        time.sleep(delay_s)
        return "They talked about family, work, painting and a trip they are planning."

    return ScriptedModel(default=reply, name="slow-double")


def open_view(log: list[Message]) -> tuple[Session, View]:
    session = Memory().session("bench", system=SYSTEM)
    session.extend(log[: MESSAGES - 1])
    strategy = RollingCompactor(threshold=10, retain_recent=3, attempts=1)
    view = session.view(
        "default",
        pipeline=Pipeline([strategy], name="rolling"),
        llm=slow_model(MODEL_DELAY_S),
        budget=BUDGET,
    )
    return session, view


def turns_of(log: list[Message], n: int) -> list[tuple[Message, Message]]:
    tail = log[MESSAGES - 1 :]
    if len(tail) < 2 * n:
        raise SystemExit(f"the data holds {len(tail) // 2} turns after the session, not {n}")
    return [
        ({"role": "user", "content": tail[2 * k]["content"]},
         {"role": "assistant", "content": tail[2 * k + 1]["content"]})
        for k in range(n)
    ]  # fmt: skip


def timed_turn(session: Session, view: View, user: Message) -> float:
    """Milliseconds from the user's append to the rendered prompt."""
    began = time.perf_counter()
    session.append(user)
    view.render()
    return (time.perf_counter() - began) * 1000


def run_sync(kind: str, log: list[Message], n: int) -> dict[str, Any]:
    session, view = open_view(log)
    stats = Stats()
    runner: ThreadRunner | InlineRunner | None = None
    if kind == "thread":
        runner = ThreadRunner(workers=1, on_event=[stats])
    elif kind == "inline":
        runner = InlineRunner(on_event=[stats])
    if runner is not None:
        runner.watch(view)
    latencies: list[float] = []
    stale = 0
    for user, assistant in turns_of(log, n):
        latencies.append(timed_turn(session, view, user))
        stale += runner is not None and runner.running(view) is not None
        time.sleep(REPLY_PAUSE_S)
        session.append(assistant)
    if runner is not None:
        runner.stop(timeout=0, drain=False)
    return summary(latencies, stale, stats)


def run_asyncio(log: list[Message], n: int) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        session, view = open_view(log)
        stats = Stats()
        runner = AsyncioRunner(concurrency=1, on_event=[stats])
        runner.watch(view)
        latencies: list[float] = []
        stale = 0
        for user, assistant in turns_of(log, n):
            latencies.append(timed_turn(session, view, user))
            stale += runner.running(view) is not None
            await asyncio.sleep(REPLY_PAUSE_S)
            session.append(assistant)
        await runner.stop(timeout=0, drain=False)
        return summary(latencies, stale, stats)

    return asyncio.run(main())


def summary(latencies: list[float], stale: int, stats: Stats) -> dict[str, Any]:
    counts = stats.snapshot()["counts"]
    return {
        "p50": percentile(latencies, 50),
        "p99": percentile(latencies, 99),
        "max": max(latencies),
        "stale": stale / len(latencies),
        "committed": counts.get("committed", 0),
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def main() -> None:
    args = parse_args(__doc__ or "")
    turns, turns_inline = (40, 12) if args.quick else (200, 60)
    log = chat_log()
    base = run_sync("disabled", log, turns)
    thread = run_sync("thread", log, turns)
    aio = run_asyncio(log, turns)
    inline = run_sync("inline", log, turns_inline)
    report(
        {
            "messages": MESSAGES,
            "model_delay_s": MODEL_DELAY_S,
            "turns": turns,
            "turns_inline": turns_inline,
            "latency_p50_ms_disabled": base["p50"],
            "latency_p99_ms_disabled": base["p99"],
            "latency_p50_ms_thread": thread["p50"],
            "latency_p99_ms_thread": thread["p99"],
            "latency_p99_delta_ms_thread": thread["p99"] - base["p99"],
            "latency_p50_ms_asyncio": aio["p50"],
            "latency_p99_ms_asyncio": aio["p99"],
            "latency_p99_delta_ms_asyncio": aio["p99"] - base["p99"],
            "latency_max_ms_disabled": base["max"],
            "latency_max_ms_thread": thread["max"],
            "latency_max_ms_asyncio": aio["max"],
            "latency_p50_ms_inline": inline["p50"],
            "latency_p99_ms_inline": inline["p99"],
            "stale_share_thread": thread["stale"],
            "stale_share_asyncio": aio["stale"],
            "folds_committed_thread": thread["committed"],
            "folds_committed_asyncio": aio["committed"],
            "folds_committed_inline": inline["committed"],
        },
        args.json,
    )


if __name__ == "__main__":
    main()
