"""SIGTERM stops of a real ``contextfold serve`` while it folds: how many left a process behind.

Each stop starts ``contextfold serve`` (SQLite in a temporary directory, one
fold worker process) in its own session, appends until a fold job is running
(``tests/serve_harness.py``), sends SIGTERM, and waits for it to exit. A
process of its session still alive 2 s after it exited was left behind (and
is killed, so the next stop starts clean). Also reported: stops whose exit
code was not 0, stops that left messages lost or partial folds in the store,
and the seconds from SIGTERM to exit (median, most).

``--quick`` does 3 stops instead of 10.
"""

from __future__ import annotations

import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _common import ROOT, parse_args, report

sys.path.insert(0, str(ROOT / "tests"))

from serve_harness import (
    damage,
    give_work,
    kill_all,
    left_behind,
    session_members,
    start_serve,
    stop,
)


@dataclass(frozen=True)
class Stop:
    left: int
    code: int
    seconds: float
    running: bool
    damaged: int


def one_stop(folder: Path) -> Stop:
    """Start, give work, SIGTERM, and look at what is left."""
    database = str(folder / "serve.db")
    served = start_serve(database, folder / "serve.log")
    running = give_work(served.base)
    before = session_members(served.pid)
    started = time.monotonic()
    code = stop(served, [signal.SIGTERM])
    seconds = time.monotonic() - started
    left = left_behind(before, served.pid)
    kill_all(left)
    return Stop(len(left), code, seconds, running, sum(damage(database).values()))


def main() -> None:
    args = parse_args(__doc__ or "")
    count = 3 if args.quick else 10
    stops: list[Stop] = []
    for i in range(count):
        with tempfile.TemporaryDirectory(prefix="serve-stop-") as folder:
            done = one_stop(Path(folder))
        stops.append(done)
        print(
            f"stop {i + 1}/{count}: exit {done.code}, {done.left} process(es) left, "
            f"{done.seconds:.2f} s, a job running: {done.running}",
            flush=True,
        )
    seconds = [s.seconds for s in stops]
    report(
        {
            "stops": count,
            "left_a_process": sum(1 for s in stops if s.left),
            "processes_left": sum(s.left for s in stops),
            "nonzero_exit": sum(1 for s in stops if s.code != 0),
            "damaged_stores": sum(1 for s in stops if s.damaged),
            "job_running_at_signal": sum(1 for s in stops if s.running),
            "stop_s_median": round(statistics.median(seconds), 2),
            "stop_s_max": round(max(seconds), 2),
        },
        args.json,
    )


if __name__ == "__main__":
    main()
