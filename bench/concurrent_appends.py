"""Two writers racing on one log: do tool results stay right after their call?

Each round logs a user message and an assistant call ``c0`` in a new session,
then releases two writers at the same instant (a barrier), each appending
through its own ``Session`` handle, as two workers of an app would:

- ``result-and-user``: one appends the result of ``c0``, the other a user message;
- ``two-results``: both append a result for ``c0``.

Run with two threads (one ``Memory`` each) and with two spawned processes (each
opening the store by URL), on SQLite and, when it answers, PostgreSQL; and
through the service: a real ``contextfold serve`` over the same store, the two
writes POSTed at once to ``/api/v1/sessions/{id}/messages`` by two clients.
Figures: rounds whose log holds a result out of place (another message between
it and its call) and rounds whose call is answered twice. The goal is 0 of
both; a refused append (``InvalidInput``; through the service a 4xx) is the
loser of a race, not a fault. A 5xx answer through the service is one
(``..._service_5xx``, goal 0).

    python bench/concurrent_appends.py [--quick] [--json]
"""

from __future__ import annotations

import multiprocessing
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from _common import parse_args, postgres_schema, postgres_up, report
from _service import Served

from contextfold import Memory
from contextfold.core.errors import InvalidInput

CASES = ("result-and-user", "two-results")
WAIT_S = 60.0
API = "/api/v1/sessions"


def _call() -> dict[str, Any]:
    call = {"id": "c0", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def _writes(case: str) -> tuple[dict[str, Any], dict[str, Any]]:
    result = {"role": "tool", "tool_call_id": "c0", "content": "the file"}
    if case == "result-and-user":
        return result, {"role": "user", "content": "meanwhile"}
    return result, {"role": "tool", "tool_call_id": "c0", "content": "another answer"}


def writer(url: str, me: int, case: str, prefix: str, rounds: int, barrier: Any) -> int:
    """One side of ``rounds`` races through a ``Memory`` of its own; the refusals."""
    memory = Memory(url)
    refused = 0
    try:
        for r in range(rounds):
            sid = f"{prefix}-{r}"
            if me == 0:
                memory.session(sid).extend([{"role": "user", "content": "read it"}, _call()])
            barrier.wait(WAIT_S)
            session = memory.session(sid)
            try:
                session.append(_writes(case)[me])
            except InvalidInput:
                refused += 1
            barrier.wait(WAIT_S)
    finally:
        memory.close()
    return refused


def faults(url: str, prefix: str, rounds: int) -> tuple[int, int]:
    """Rounds with a result out of place, and rounds with a call answered twice."""
    memory = Memory(url)
    out_of_place = twice = 0
    for r in range(rounds):
        open_ids: set[str] = set()
        answered: set[str] = set()
        bad = double = False
        for message in memory.session(f"{prefix}-{r}").history():
            if message["role"] != "tool":
                open_ids = {c["id"] for c in message.get("tool_calls") or ()}
                answered = set()
                continue
            call_id = message["tool_call_id"]
            double |= call_id in answered
            bad |= call_id not in answered and call_id not in open_ids
            open_ids.discard(call_id)
            answered.add(call_id)
        out_of_place += bad
        twice += double
    memory.close()
    return out_of_place, twice


def race(url: str, case: str, processes: bool, rounds: int) -> dict[str, Any]:
    prefix = f"{case}-{'p' if processes else 't'}"
    started = time.perf_counter()
    if processes:
        context = multiprocessing.get_context("spawn")
        with context.Manager() as manager:
            barrier = manager.Barrier(2)
            with context.Pool(2) as pool:
                args = [(url, me, case, prefix, rounds, barrier) for me in (0, 1)]
                refused = sum(pool.starmap(writer, args))
    else:
        barrier = threading.Barrier(2)
        with ThreadPoolExecutor(2) as threads:
            jobs = [threads.submit(writer, url, me, case, prefix, rounds, barrier) for me in (0, 1)]
            refused = sum(job.result() for job in jobs)
    out_of_place, twice = faults(url, prefix, rounds)
    return {
        "out_of_place": out_of_place,
        "answered_twice": twice,
        "refused": refused,
        "seconds": round(time.perf_counter() - started, 2),
    }


def service_writer(
    base: str, me: int, case: str, prefix: str, rounds: int, barrier: Any
) -> list[int]:
    """One side of ``rounds`` races through the service; the status of each of its POSTs."""
    statuses = []
    with httpx.Client(base_url=base, timeout=60) as client:
        for r in range(rounds):
            sid = f"{prefix}-{r}"
            if me == 0:
                client.post(API, json={"id": sid}).raise_for_status()
                opening = [{"role": "user", "content": "read it"}, _call()]
                client.post(f"{API}/{sid}/messages", json={"messages": opening}).raise_for_status()
            barrier.wait(WAIT_S)
            write = {"messages": [_writes(case)[me]]}
            answer = client.post(f"{API}/{sid}/messages", json=write)
            statuses.append(answer.status_code)
            barrier.wait(WAIT_S)
    return statuses


def service_race(served: Served, store_url: str, case: str, rounds: int) -> dict[str, Any]:
    """The race through ``contextfold serve``; the log read back from the store."""
    prefix = f"{case}-service"
    started = time.perf_counter()
    barrier = threading.Barrier(2)
    with ThreadPoolExecutor(2) as threads:
        jobs = [
            threads.submit(service_writer, served.base, me, case, prefix, rounds, barrier)
            for me in (0, 1)
        ]
        statuses = [s for job in jobs for s in job.result()]
    out_of_place, twice = faults(store_url, f"local/{prefix}", rounds)
    return {
        "out_of_place": out_of_place,
        "answered_twice": twice,
        "refused": sum(1 for s in statuses if 400 <= s < 500),
        "5xx": sum(1 for s in statuses if s >= 500),
        "seconds": round(time.perf_counter() - started, 2),
    }


def run(backend: str, url: str, rounds: int, figures: dict[str, Any], tmp: Path) -> None:
    for case in CASES:
        for processes in (False, True):
            found = race(url, case, processes, rounds)
            name = f"{backend}_{case.replace('-', '_')}_{'processes' if processes else 'threads'}"
            for key, value in found.items():
                figures[f"{name}_{key}"] = value
    with Served(url, tmp / f"serve-{backend}.log", auth=False) as served:
        for case in CASES:
            found = service_race(served, url, case, rounds)
            for key, value in found.items():
                figures[f"{backend}_{case.replace('-', '_')}_service_{key}"] = value


def main() -> None:
    args = parse_args(__doc__ or "")
    rounds = 30 if args.quick else 300
    figures: dict[str, Any] = {"rounds": rounds}
    with tempfile.TemporaryDirectory() as tmp:
        run("sqlite", str(Path(tmp) / "race.db"), rounds, figures, Path(tmp))
        if postgres_up():
            with postgres_schema("race") as (_, url):
                run("postgres", url, rounds, figures, Path(tmp))
    report(figures, args.json)


if __name__ == "__main__":
    main()
