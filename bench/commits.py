"""Fold commits at scale on SQLite (issue 9, point 8): linear in the folds, and a fast
first compaction of a long log.

- ``commit_s_{N}``: one commit of N folds (each over one tool unit of an agent
  log, as masking makes them) into a view that already holds N active folds;
  ``commit_ratio_4x`` is the time for 4N over the time for N (linear: about 4).
- ``commits_each_s_{N}``: N commits of one fold each, in log order, as a
  cycle's steps make them; ``commits_each_ratio_4x`` likewise.
- ``first_compaction_s``: the first ``compact()`` of a view over a log of
  100,000 messages (10,000 with ``--quick``), ``offline`` preset, budget 8,000,
  SQLite; ``folds_made`` is what it committed.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from _common import parse_args, report
from render import agent_log

from contextfold import Fold, Memory
from contextfold.store import SQLiteStore

UNIT = 6
"""Messages per round of ``agent_log``: a user request, two call/result pairs, an answer."""


def _masked(session_id: str, start: int, counter: Any) -> Fold:
    message = {"role": "user", "content": f"[masked: round at seq {start}]"}
    return Fold(
        "default",
        start,
        start + UNIT - 1,
        "masked",
        str(message["content"]),
        (message,),
        "bench",
        300,
        counter.message(message),
    )


def _store_with_rounds(path: Path, rounds: int) -> tuple[SQLiteStore, Any]:
    store = SQLiteStore(path)
    session = Memory(store).session("s")
    log = agent_log(rounds * UNIT + 1)
    for i in range(0, len(log), 5_000):
        session.extend(log[i : i + 5_000])
    return store, session.counter


def commit_batch(n: int, workdir: Path) -> float:
    """One commit of n folds beside n active ones."""
    store, counter = _store_with_rounds(workdir / f"batch-{n}.db", 2 * n)
    old = [_masked("s", 2 + UNIT * i, counter) for i in range(n)]
    store.commit_folds("s", "default", old, 0)
    new = [_masked("s", 2 + UNIT * (n + i), counter) for i in range(n)]
    began = time.perf_counter()
    store.commit_folds("s", "default", new, 1)
    took = time.perf_counter() - began
    store.close()
    return took


def commit_each(n: int, workdir: Path) -> float:
    """n commits of one fold each, in log order."""
    store, counter = _store_with_rounds(workdir / f"each-{n}.db", n)
    folds = [_masked("s", 2 + UNIT * i, counter) for i in range(n)]
    began = time.perf_counter()
    for version, fold in enumerate(folds):
        store.commit_folds("s", "default", [fold], version)
    took = time.perf_counter() - began
    store.close()
    return took


def first_compaction(n: int, workdir: Path) -> tuple[float, int]:
    memory = Memory(workdir / "long.db")
    session = memory.session("long")
    log = agent_log(n)
    for i in range(0, n, 5_000):
        session.extend(log[i : i + 5_000])
    view = session.view("default", preset="offline", budget=8_000)
    began = time.perf_counter()
    made = view.compact()
    took = time.perf_counter() - began
    assert view.render_report().tokens <= 8_000
    memory.close()
    return took, len(made.folds)


def main() -> None:
    args = parse_args(__doc__ or "")
    base = 500 if args.quick else 2_500
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for kind, measure in (("commit", commit_batch), ("commits_each", commit_each)):
            times = {k: measure(base * k, workdir) for k in (1, 2, 4)}
            for k, took in times.items():
                figures[f"{kind}_s_{base * k}"] = round(took, 4)
            figures[f"{kind}_ratio_4x"] = round(times[4] / times[1], 2)
        took, made = first_compaction(10_000 if args.quick else 100_000, workdir)
        figures["first_compaction_messages"] = 10_000 if args.quick else 100_000
        figures["first_compaction_s"] = round(took, 2)
        figures["folds_made"] = made
    report(figures, args.json)


if __name__ == "__main__":
    main()
