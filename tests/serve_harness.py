"""A real ``contextfold serve`` in its own session, given work, and every process it started.

Shared by ``tests/test_serve_stop.py`` and ``bench/serve_stop.py``. The server
runs in a new session (``start_new_session``), so every process it starts,
however deep, carries its pid as session id: that is how the processes are
found, read from ``/proc`` (Linux only), before the stop and after it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from contextfold.memory.session import Memory

SESSIONS = 2
APPENDS = 3
ROUNDS = 40
"""Rounds appended per request: each append leaves the view over its budget."""
BUDGET = 2000
VIEW = "main"
LINGER_S = 2.0
"""A process still alive this long after the server exited was left behind
(the resource tracker ends when the last pipe to it closes: at once)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def session_members(sid: int) -> set[int]:
    """The pids of the live (not zombie) processes of session ``sid``."""
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        # pid (comm) state ppid pgrp session ...: comm may hold spaces, so split after it.
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[3]) == sid:
            found.add(int(entry.name))
    return found


def alive(pids: Iterable[int]) -> set[int]:
    """Those of ``pids`` still running (a zombie has ended)."""
    left: set[int] = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if state[state.rindex(")") + 2] != "Z":
            left.add(pid)
    return left


@dataclass
class Served:
    process: subprocess.Popen[bytes]
    base: str
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid


def start_serve(
    database: str, log: Path, *, timeout: float = 60.0, extra: Sequence[str] = ()
) -> Served:
    """``contextfold serve --no-auth`` on a free port, in its own session, once it answers;
    ``extra``: more flags.

    Its output goes to ``log``, a file: a pipe would stay open as long as any
    process left behind holds it.
    """
    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("contextfold")),
                "serve",
                "--no-auth",
                "--port",
                str(port),
                "--database",
                database,
                *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"serve exited {process.returncode}: {log.read_text()}")
        try:
            if httpx.get(f"{base}/healthz", timeout=1.0).status_code == 200:
                return Served(process, base, log)
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("serve did not answer in time")
        time.sleep(0.05)


def give_work(base: str, sessions: int = SESSIONS, appends: int = APPENDS) -> bool:
    """Sessions with an offline view of a small budget, and appends that put it over again
    and again: fold jobs (model-free, so run in the worker process) running or due.
    True once a view's job is running (waited for up to 10 s)."""
    with httpx.Client(base_url=f"{base}/api/v1", timeout=30.0) as client:
        for s in range(sessions):
            sid = f"stop-{s}"
            client.post("/sessions", json={"id": sid}).raise_for_status()
            view = {"preset": "offline", "budget": BUDGET}
            client.put(f"/sessions/{sid}/views/{VIEW}", json=view).raise_for_status()
            for a in range(appends):
                batch = []
                for r in range(ROUNDS):
                    n = a * ROUNDS + r
                    text = f"round {n}: " + " ".join(f"word{(n * 7 + i) % 997}" for i in range(60))
                    batch += [
                        {"role": "user", "content": f"question {text}"},
                        {"role": "assistant", "content": f"answer {text}"},
                    ]
                appended = client.post(f"/sessions/{sid}/messages", json={"messages": batch})
                appended.raise_for_status()
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            for s in range(sessions):
                job = client.get(f"/sessions/stop-{s}/views/{VIEW}").json()["job"]
                if job is not None and job["state"] == "running":
                    return True
            time.sleep(0.01)
    return False


def damage(database: str, sessions: int = SESSIONS, appends: int = APPENDS) -> dict[str, int]:
    """What a stop must not leave in the store: messages lost, partial or unrenderable folds."""
    memory = Memory(database)
    try:
        lost = partial = 0
        for s in range(sessions):
            sid = f"local/stop-{s}"
            session = memory.session(sid)
            lost += appends * ROUNDS * 2 - len(session.history())
            store = memory.store
            last = store.last_seq(sid)
            folds = store.folds(sid, VIEW, include_superseded=True)
            partial += sum(1 for f in folds if not 1 <= f.start <= f.end <= last)
            active = sorted((f for f in folds if f.superseded_by is None), key=lambda f: f.start)
            partial += sum(1 for a, b in itertools.pairwise(active) if b.start <= a.end)
            partial += len(store.quarantined(sid, VIEW))
            partial += int(session.view(VIEW).render_report().tokens > BUDGET)
        return {"messages_lost": lost, "partial_folds": partial}
    finally:
        memory.close()


def stop(
    served: Served, signals: Iterable[signal.Signals], gap_s: float = 0.3, *, group: bool = False
) -> int:
    """Send ``signals`` to the server ``gap_s`` apart; its exit code. With ``group``, to
    its whole process group, as Ctrl-C in a terminal or systemd's control-group kill do."""
    for i, sig in enumerate(signals):
        if i:
            time.sleep(gap_s)
        if served.process.poll() is None:
            if group:
                os.killpg(served.pid, sig)
            else:
                os.kill(served.pid, sig)
    code = served.process.wait(timeout=60)
    return code


def left_behind(before: set[int], sid: int) -> set[int]:
    """Processes of the server's session still alive ``LINGER_S`` after it exited."""
    deadline = time.monotonic() + LINGER_S
    while True:
        left = alive(before) | session_members(sid)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def kill_all(pids: Iterable[int]) -> None:
    """SIGKILL what a failed stop left, so one failure does not leak into the next run."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
