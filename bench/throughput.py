"""Throughput of many sessions compacting at once, on the thread and asyncio runners.

100 sessions (the LongMemEval chat histories of the shared data) live in one
store, each with a rolling-compactor view (fold all but the last 2 rounds once
more than 4 are unfolded) and a model double taking 100 ms per call. 100
clients talk at once, one per session: each turn appends the user's message,
renders the prompt, waits 20 ms for the chat model and appends the reply.

- ``turns_per_s_*``: turns completed per second of wall time, all clients
  together; ``disabled`` (threads) and ``disabled_asyncio`` run the same
  clients with no runner: the ceilings. Jobs share the GIL with the clients,
  so what a strategy costs in CPU (not the model's wait) comes off the turns.
- ``stale_share_*``: the share of prompts rendered while a job for that view
  was running, i.e. served from stale-but-valid folds.
- ``folds_committed_*``, ``conflicts_*`` (commits refused by the version check:
  zero, since one job per view runs at a time), ``failed_*``, and ``drain_s_*``
  (how long the runner needed after the last turn to catch up), and
  ``folds_per_s_*`` (commits per second from the first turn to caught up).

The thread runner has 16 workers; the asyncio runner runs 16 jobs at once.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from typing import Any

from _common import conversations, parse_args, report

from contextfold import Memory, View
from contextfold.core.messages import Message
from contextfold.runtime import AsyncioRunner, Stats, ThreadRunner
from contextfold.strategies import Pipeline
from contextfold.strategies.rolling import RollingCompactor
from contextfold.testing import ScriptedModel

SESSIONS = 100
MODEL_DELAY_S = 0.1
CHAT_S = 0.02
WORKERS = 16
SYSTEM = "You are a helpful assistant."


def slow_reply(messages: Sequence[Message]) -> str:
    time.sleep(MODEL_DELAY_S)
    return "The user asked for advice and the assistant gave a short list of options."


def open_views() -> list[View]:
    memory = Memory()
    views = []
    for i, row in enumerate(conversations("longmemeval_oracle_dev", SESSIONS)):
        session = memory.session(f"s{i}", system=SYSTEM)
        session.extend([{"role": m["role"], "content": m["content"]} for m in row["messages"]])
        strategy = RollingCompactor(threshold=4, retain_recent=2, attempts=1)
        views.append(
            session.view(
                "default",
                pipeline=Pipeline([strategy], name="rolling"),
                llm=ScriptedModel(default=slow_reply, name="slow-double"),
                budget=4_000,
            )
        )
    return views


def turn(k: int) -> tuple[Message, Message]:
    return (
        {"role": "user", "content": f"Follow-up {k}: can you remind me what we settled on?"},
        {"role": "assistant", "content": f"Recap {k}: we settled on the second option."},
    )


def run_threads(turns: int, with_runner: bool) -> dict[str, Any]:
    views = open_views()
    stats = Stats()
    runner = ThreadRunner(workers=WORKERS, on_event=[stats]) if with_runner else None
    for view in views:
        if runner is not None:
            runner.watch(view)
    stale = [0] * len(views)

    def client(i: int) -> None:
        view = views[i]
        for k in range(turns):
            user, reply = turn(k)
            view.session.append(user)
            view.render()
            stale[i] += runner is not None and runner.running(view) is not None
            time.sleep(CHAT_S)
            view.session.append(reply)

    clients = [threading.Thread(target=client, args=(i,)) for i in range(len(views))]
    began = time.perf_counter()
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    wall = time.perf_counter() - began
    drained = time.perf_counter()
    if runner is not None:
        runner.wait_idle(120)
        runner.stop()
    return figures(len(views) * turns, wall, sum(stale), stats, time.perf_counter() - drained)


def run_asyncio(turns: int, with_runner: bool) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        views = open_views()
        stats = Stats()
        runner = AsyncioRunner(concurrency=WORKERS, on_event=[stats])
        for view in views:
            if with_runner:
                runner.watch(view)
        stale = 0

        async def client(view: View) -> None:
            nonlocal stale
            for k in range(turns):
                user, reply = turn(k)
                view.session.append(user)
                view.render()
                stale += runner.running(view) is not None
                await asyncio.sleep(CHAT_S)
                view.session.append(reply)

        began = time.perf_counter()
        await asyncio.gather(*(client(view) for view in views))
        wall = time.perf_counter() - began
        drained = time.perf_counter()
        await runner.wait_idle(120)
        await runner.stop()
        return figures(len(views) * turns, wall, stale, stats, time.perf_counter() - drained)

    return asyncio.run(main())


def figures(turns: int, wall: float, stale: int, stats: Stats, drain_s: float) -> dict[str, Any]:
    counts = stats.snapshot()["counts"]
    return {
        "turns_per_s": turns / wall,
        "folds_per_s": counts.get("committed", 0) / (wall + drain_s),
        "stale_share": stale / turns,
        "committed": counts.get("committed", 0),
        "conflicts": counts.get("rejected", 0),
        "failed": counts.get("failed", 0),
        "drain_s": drain_s,
    }


def main() -> None:
    args = parse_args(__doc__ or "")
    turns = 6 if args.quick else 20
    base = run_threads(turns, with_runner=False)
    base_aio = run_asyncio(turns, with_runner=False)
    thread = run_threads(turns, with_runner=True)
    aio = run_asyncio(turns, with_runner=True)
    out: dict[str, Any] = {
        "sessions": SESSIONS,
        "turns_per_session": turns,
        "model_delay_s": MODEL_DELAY_S,
        "turns_per_s_disabled": base["turns_per_s"],
        "turns_per_s_disabled_asyncio": base_aio["turns_per_s"],
    }
    for name, result in (("thread", thread), ("asyncio", aio)):
        out[f"turns_per_s_{name}"] = result["turns_per_s"]
        out[f"stale_share_{name}"] = result["stale_share"]
        out[f"folds_committed_{name}"] = result["committed"]
        out[f"conflicts_{name}"] = result["conflicts"]
        out[f"failed_{name}"] = result["failed"]
        out[f"drain_s_{name}"] = result["drain_s"]
        out[f"folds_per_s_{name}"] = result["folds_per_s"]
    report(out, args.json)


if __name__ == "__main__":
    main()
