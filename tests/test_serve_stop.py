"""Stopping a real ``contextfold serve`` by signal, while it folds, leaves no process behind.

SIGTERM is how systemd, Docker and Kubernetes stop a service, SIGINT is
Ctrl-C; a second one during the stop cuts its waits short. Ctrl-C in a
terminal and systemd's default kill reach the whole process group, the fold
worker too. Each case starts
the server in its own session, gives it fold jobs (one running when the signal
comes), and checks: exit code 0, every process of the server's session gone,
and the store whole (no message lost, no partial or unrenderable fold).
"""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest
from serve_harness import (
    damage,
    give_work,
    kill_all,
    left_behind,
    session_members,
    start_serve,
    stop,
)

from contextfold.runtime import ProcessRunner

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")

CASES = {  # the signals, and whether they go to the whole process group
    "sigterm": ([signal.SIGTERM], False),
    "sigint": ([signal.SIGINT], False),
    "sigterm-twice": ([signal.SIGTERM, signal.SIGTERM], False),
    "sigint-twice": ([signal.SIGINT, signal.SIGINT], False),
    "ctrl-c-in-a-terminal": ([signal.SIGINT], True),
    "systemd-control-group": ([signal.SIGTERM], True),
}


@pytest.mark.parametrize(("signals", "group"), CASES.values(), ids=CASES.keys())
def test_a_signal_stops_serve_with_nothing_left_behind(
    tmp_path: Path, signals: list[signal.Signals], group: bool
) -> None:
    database = str(tmp_path / "serve.db")
    served = start_serve(database, tmp_path / "serve.log")
    before: set[int] = set()
    try:
        assert give_work(served.base), "no fold job was running to stop"
        before = session_members(served.pid)
        assert len(before) >= 3, f"serve, its fold worker, the resource tracker: {before}"
        # A second signal comes 0.3 s after the first: inside the drain of the running job.
        code = stop(served, signals, gap_s=0.3, group=group)
        left = left_behind(before, served.pid)
    finally:
        if served.process.poll() is None:
            served.process.kill()
        kill_all(session_members(served.pid) | before)
    assert not left, f"left behind: {left}"
    assert code == 0, served.log.read_text()
    # Nothing failed: not even a job whose worker a signal to the group killed.
    assert not re.search("Traceback|failed|degraded", served.log.read_text())
    assert damage(database) == {"messages_lost": 0, "partial_folds": 0}


def running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has ended)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def test_a_process_runner_stop_returns_with_its_workers_ended() -> None:
    runner = ProcessRunner(processes=1)  # started: its warm-up ran in it
    workers = multiprocessing.active_children()
    assert len(workers) == 1
    for worker in workers:  # the parent decides: a signal to the group does not end them
        os.kill(worker.pid or 0, signal.SIGTERM)
        os.kill(worker.pid or 0, signal.SIGINT)
    time.sleep(0.2)
    assert all(worker.is_alive() for worker in workers)
    assert runner.stop(timeout=5)
    # Asked of the system, not of multiprocessing's bookkeeping: after the serve tests in
    # this process, a worker's exit status can be collected elsewhere, and ``is_alive``
    # then answers True for a process that is gone.
    assert not [worker.pid for worker in workers if running(worker.pid or 0)]
    assert runner.stop(timeout=1)  # a second stop finds nothing to do
