"""What one turn costs the foreground while compaction runs in the background.

A log of 10,000 messages is built from the shared agent runs (tau-bench and
OpenHands, one after the other), the ``offline`` view at budget 8,000 is
compacted once, and then the last 50 messages are appended one per turn, back
to back; each turn is ``append`` + ``render``. Rows, all in one run on the same
turn stream:

- ``on``: a ``ThreadRunner`` watches the view, turns go back to back;
- ``process``: the same with a ``ProcessRunner`` (model-free folding in a
  worker process, off this process's GIL);
- ``idle``: a ``ThreadRunner``, but each turn waits until it is idle first, so
  no fold overlaps a turn (what a turn costs by itself);

in RAM and on SQLite. ``background_ratio`` is median(on) / median(idle),
``process_ratio`` the same for the process runner. Each row replays the same 50
turns ``REPEATS`` times on fresh sessions and pools them, so p99 is not just
the slowest of 50.
``folds_per_append`` counts background commits over the turns, and
``prompts_over_budget`` checks every prompt against the budget.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import conversations, parse_args, report

from contextfold import Event, Memory, ProcessRunner, ThreadRunner

BUDGET = 8000
LOGGED = 10_000
TURNS = 50
REPEATS = 3


def stream(total: int) -> list[dict[str, Any]]:
    """``total`` messages of agent runs, one after the other, the first system prompt leading."""
    out: list[dict[str, Any]] = []
    rows = list(conversations("taubench_airline_dev")) + list(conversations("openhands_example"))
    while len(out) < total:
        for row in rows:
            for message in row["messages"]:
                if message["role"] == "system" and out:
                    continue
                out.append(message)
    return out[:total]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(
    messages: list[dict[str, Any]], store: str | None, mode: str
) -> tuple[list[float], int, int]:
    """Turn times, background commits and prompts over budget of one replay."""
    memory = Memory(store)
    session = memory.session("bench")
    head, tail = messages[: len(messages) - TURNS], messages[len(messages) - TURNS :]
    for i in range(0, len(head), 1000):
        session.extend(head[i : i + 1000])
    view = session.view("default", preset="offline", budget=BUDGET)
    view.compact()
    view.render()
    commits: list[Event] = []
    times: list[float] = []
    over = 0
    runner_type = ProcessRunner if mode == "process" else ThreadRunner
    with runner_type(workers=1, on_event=[commits.append]) as runner:
        runner.watch(view)
        runner.wait_idle(60)
        commits.clear()
        for message in tail:
            if mode == "idle":
                runner.wait_idle(60)
            began = time.perf_counter()
            session.append(message)
            rendered = view.render_report()
            times.append(time.perf_counter() - began)
            over += rendered.tokens > BUDGET
        runner.wait_idle(60)
    memory.close()
    return times, sum(e.kind == "committed" for e in commits), over


def pooled(
    messages: list[dict[str, Any]], tmp: str, where: str, mode: str, repeats: int
) -> dict[str, float]:
    times: list[float] = []
    folds = over = 0
    for r in range(repeats):
        store = None if where == "ram" else str(Path(tmp) / f"{mode}-{r}.db")
        t, f, o = run(messages, store, mode)
        times, folds, over = times + t, folds + f, over + o
    return {
        "median_ms": 1000 * statistics.median(times),
        "p99_ms": 1000 * percentile(times, 0.99),
        "max_ms": 1000 * max(times),
        "folds_per_append": folds / len(times),
        "over_budget": over,
    }


def main() -> None:
    args = parse_args(__doc__ or "")
    messages = stream(2_000 if args.quick else LOGGED)
    figures: dict[str, Any] = {"logged": len(messages), "turns": TURNS, "budget": BUDGET}
    figures["repeats"] = 1 if args.quick else REPEATS
    with tempfile.TemporaryDirectory() as tmp:
        for where in ("ram", "sqlite"):
            for mode in ("idle", "on", "process"):
                result = pooled(messages, tmp, where, mode, 1 if args.quick else REPEATS)
                for key, value in result.items():
                    figures[f"{where}_{mode}_{key}"] = round(value, 4)
            idle = figures[f"{where}_idle_median_ms"]
            figures[f"{where}_background_ratio"] = round(figures[f"{where}_on_median_ms"] / idle, 3)
            figures[f"{where}_process_ratio"] = round(
                figures[f"{where}_process_median_ms"] / idle, 3
            )
    report(figures, args.json)


if __name__ == "__main__":
    main()
