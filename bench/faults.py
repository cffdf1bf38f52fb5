"""Bounded model work against failing servers: calls, seconds to degrade, requests after stop.

A real OpenAI-compatible HTTP server on 127.0.0.1 (``tests/fault_server.py``)
either hangs (reads the request, never answers) or errs (HTTP 500). For the
CLI path (``contextfold compact --model ... --timeout T --json`` in a
subprocess) and the runner path (a ``ThreadRunner`` watching a view), it
reports the model calls (HTTP requests) per failing job and the seconds until
the view is degraded: the CLI's wall time (``cli_ok_s`` is the same command
against a server that answers, i.e. its start-up and work without the fault),
and for the runner the time from the job's ``started`` to its ``degraded``.
Then the requests 40 appends cost against the erroring server with a runner
(default cooldown), and the requests that reach the hung server after
``ThreadRunner.stop()`` returns. Library defaults throughout except the job
deadline (``--timeout`` / ``JobLimits.deadline_s``), so the hung cases end in
seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _common import ROOT, parse_args, report

sys.path.insert(0, str(ROOT / "tests"))

from fault_server import FaultServer, Mode

from contextfold import Event, JobLimits, Memory, ThreadRunner, get_model
from contextfold.core.messages import Message

DEADLINE_S = 3.0


def chat(rounds: int, first: int = 0) -> list[Message]:
    out: list[Message] = []
    for i in range(first, first + rounds):
        out.append({"role": "user", "content": f"Step {i}: fix the loader in src/app/load_{i}.py"})
        out.append({"role": "assistant", "content": f"Done with step {i}. " * 40})
    return out


def cli(mode: Mode, deadline: float) -> dict[str, Any]:
    with FaultServer(mode) as server, tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "conv.json"
        path.write_text(json.dumps(chat(30)), encoding="utf-8")
        argv = [sys.executable, "-m", "contextfold.cli", "compact", str(path), "--budget", "800"]
        argv += ["--preset", "rolling", "--model", server.spec(), "--timeout", str(deadline)]
        began = time.monotonic()
        done = subprocess.run([*argv, "--json"], capture_output=True, text=True, timeout=600)
        seconds = time.monotonic() - began
        result = json.loads(done.stdout.splitlines()[-1])
        jobs = max(len(result["failed"]), 1)
        return {"calls_per_job": server.requests / jobs, "s": seconds, "exit": done.returncode}


def runner(mode: Mode, deadline: float) -> dict[str, Any]:
    with FaultServer(mode) as server:
        session = Memory().session("s", system="You are a coding agent.")
        session.extend(chat(12))
        view = session.view("v", preset="rolling", budget=100_000, model=server.spec())
        degraded = threading.Event()
        failed: list[Event] = []
        began: list[float] = []

        def heard(event: Event) -> None:
            if event.kind == "started":
                began.append(time.monotonic())
            elif event.kind == "failed":
                failed.append(event)
            elif event.kind == "degraded":
                degraded.set()

        with ThreadRunner(on_event=[heard], limits=JobLimits(deadline_s=deadline)) as run:
            run.watch(view)
            degraded.wait(600)
            seconds = time.monotonic() - began[0]
            run.wait_idle(60)
        return {"calls_per_job": server.requests / max(len(failed), 1), "s": seconds}


def appends(count: int, pause_s: float) -> int:
    """Requests ``count`` appends cost against an erroring server (default cooldown)."""
    with FaultServer("error") as server:
        session = Memory().session("s", system="You are a coding agent.")
        session.extend(chat(12))
        view = session.view("v", preset="rolling", budget=100_000, model=server.spec())
        with ThreadRunner() as run:
            run.watch(view)
            for message in chat(count // 2, first=12):
                session.append(message)
                time.sleep(pause_s)
            run.wait_idle(60)
        return server.requests


def after_stop(wait_s: float) -> int:
    """Requests reaching a hung server in ``wait_s`` seconds after ``stop()`` returned."""
    with FaultServer("hang") as server:
        session = Memory().session("s", system="You are a coding agent.")
        session.extend(chat(12))
        # A 0.5 s call timeout: a hung attempt would be retried well within the wait.
        llm = get_model(server.spec(), timeout=0.5)
        bound = session.view("v", preset="rolling", budget=100_000, llm=llm)
        run = ThreadRunner()
        run.watch(bound)
        while server.requests == 0:
            time.sleep(0.01)
        run.stop(timeout=0.1)
        stopped = time.monotonic()
        time.sleep(wait_s)
        return server.after(stopped)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    figures: dict[str, Any] = {"deadline_s": DEADLINE_S}
    figures["cli_ok_s"] = round(cli("ok", DEADLINE_S)["s"], 2)
    for mode in ("hang", "error"):
        found = cli(mode, DEADLINE_S)
        figures[f"cli_{mode}_calls_per_job"] = found["calls_per_job"]
        figures[f"cli_{mode}_s_to_degraded"] = round(found["s"], 2)
        figures[f"cli_{mode}_exit"] = found["exit"]
        found = runner(mode, DEADLINE_S)
        figures[f"runner_{mode}_calls_per_job"] = found["calls_per_job"]
        figures[f"runner_{mode}_s_to_degraded"] = round(found["s"], 2)
    figures["calls_for_40_appends"] = appends(40, 0.02 if args.quick else 0.1)
    figures["requests_after_stop"] = after_stop(2.0 if args.quick else 5.0)
    report(figures, args.json)


if __name__ == "__main__":
    main()
