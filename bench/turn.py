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

Beside them, in the same run and on the same turn stream, the libraries
``bench/peers.py`` drives (``bench/_peers_drivers.py``, its scripted instant
summarizer, contextfold's counter) take the same 50 turns after the same
history: ``peer_<name>_median_ms``, ``_p99_ms`` and ``_turns``. A peer whose
turns have taken ``SLOW_PEER`` times what the fastest peer's whole replay
took stops there (``_turns`` says after how many; ``trim_messages`` counts the
whole history every turn). ``fastest_peer`` is the one with the lowest median,
and ``<where>_on_vs_fastest_peer_p50`` / ``_p99`` are contextfold's ``on`` row
over it. Without the ``peers`` extra these rows are left out, and the run
says so.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from _common import conversations, parse_args, report
from peers import build, missing_peers, slug

from contextfold import Event, Memory, ProcessRunner, ThreadRunner, get_counter

BUDGET = 8000
LOGGED = 10_000
TURNS = 50
REPEATS = 3
SLOW_PEER = 10


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


def peer_rows(messages: list[dict[str, Any]], repeats: int) -> dict[str, dict[str, float]]:
    """Each peer's turn times on the turns ``run`` replays, after the same history; {} when
    the ``peers`` extra is not installed."""
    if missing_peers():
        print(f"peer rows skipped: {', '.join(missing_peers())} not installed")
        return {}
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="langmem")
    from _peers_drivers import DRIVERS, Contextfold

    system, body = messages[0]["content"], messages[1:]
    head, tail = body[: len(body) - TURNS], body[len(body) - TURNS :]
    counter = get_counter()
    out: dict[str, dict[str, float]] = {}
    fastest_replay_s = float("inf")
    for driver_type in DRIVERS:
        if issubclass(driver_type, Contextfold):
            continue
        times: list[float] = []
        for _ in range(repeats):
            if sum(times) > SLOW_PEER * fastest_replay_s:
                break
            driver = build(driver_type, counter, system, BUDGET, background=True)
            try:
                driver.prefill(head)
                driver.prompt()
                for message in tail:
                    began = time.perf_counter()
                    driver.append(message)
                    driver.prompt()
                    times.append(time.perf_counter() - began)
                    if sum(times) > SLOW_PEER * fastest_replay_s:
                        break
            finally:
                driver.close()
        fastest_replay_s = min(fastest_replay_s, statistics.median(times) * TURNS * repeats)
        out[driver_type.name] = {
            "median_ms": 1000 * statistics.median(times),
            "p99_ms": 1000 * percentile(times, 0.99),
            "turns": len(times),
        }
    return out


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
    peers = peer_rows(messages, figures["repeats"])
    for name, row in peers.items():
        for key, value in row.items():
            figures[f"peer_{slug(name)}_{key}"] = round(value, 4)
    if peers:
        fastest = min(peers, key=lambda name: peers[name]["median_ms"])
        figures["fastest_peer"] = fastest
        for where in ("ram", "sqlite"):
            for stat, key in (("p50", "median_ms"), ("p99", "p99_ms")):
                ratio = figures[f"{where}_on_{key}"] / peers[fastest][key]
                figures[f"{where}_on_vs_fastest_peer_{stat}"] = round(ratio, 3)
    report(figures, args.json)


if __name__ == "__main__":
    main()
