"""The service under load from another process: appends/s and renders/s at 1, 10 and 100 sessions.

Starts ``contextfold serve`` as a subprocess on 127.0.0.1 over a fresh store (a
temporary SQLite file; then PostgreSQL, on a schema of its own, when the server
``--postgres URL``, ``$CONTEXTFOLD_PG_URL`` or the local one answers),
with API keys on and the background runner on. The load comes from this
process: one keep-alive connection per session, a minimal HTTP/1.1 client on
asyncio (httpx would spend more CPU than the server on this 2-core machine).

Two measures for each store, concurrency and operation (append one message,
render the session's view):

- closed loop: each session sends its next request when the last is answered;
  the rate is what the server sustains, the latency includes queueing;
The server's CPU time per request (runner and all) is given too: on a
machine shared with other work it is steadier than the rates.

- open loop at ``--rate`` requests/s (the goal's 1,000), spread over the
  sessions: the latency a client sees at that load, p50/p99, and the rate
  actually served.

Bounded in time (``--seconds`` a phase) and count (``--max-requests``).

``--processes 1 2`` measures each store once per server process count
(``contextfold serve --processes N`` for N > 1; rows ``<store>_p<N>_...``,
the single process's rows keep their plain names). The server CPU counts the
whole process tree (its server and runner processes).

``--large N`` adds a run at N sessions (each with its stored view, served over
``--large-connections`` keep-alive connections): appends then renders
round-robin over all of them, open loop at ``--rate``, with the server tree's
CPU per request and resident memory per session, to check the projection to
10,000 sessions (``docs/scaling.md``) against a measured size.

``--pg-durability process`` measures PostgreSQL without waiting for a flush per
commit (``synchronous_commit=off``, as SQLite's default ``process``); the
default is the store's own, ``full``.

    python bench/service_load.py [--quick] [--json] [--postgres URL] [--processes 1 2]
        [--large 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _common import ROOT, parse_args, report

CONCURRENCY = (1, 10, 100)
SECONDS = 4.0
QUICK_SECONDS = 1.0
MAX_REQUESTS = 50_000
RATE = 1000.0
START_S = 120.0
"""How long a server may take to answer after its start (a loaded machine is slow)."""
PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"
WORDS = "the quick brown fox jumps over the lazy dog " * 6


class Connection:
    """One keep-alive HTTP/1.1 connection: request, then read the whole answer. One the
    server closed while it sat idle (its keep-alive timeout) is opened again."""

    def __init__(
        self, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.port = port
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(port, reader, writer)

    async def request(
        self, method: str, path: str, key: str, body: Any = None
    ) -> tuple[int, bytes]:
        data = b"" if body is None else json.dumps(body).encode()
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
        )
        if self.reader.at_eof() or self.writer.is_closing():
            self.writer.close()
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writer.write(head.encode() + data)
        status_line = await self.reader.readline()
        status = int(status_line.split()[1])
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


def _stat(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name (empty when gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return []


def tree(pid: int) -> list[int]:
    """``pid`` and every live descendant (Linux ``/proc``): a server's worker and runner
    processes."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    return found


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of the process and its live descendants, with what their
    waited-for children used (Linux ``/proc``), 0 elsewhere."""
    ticks = 0
    for member in tree(pid):
        fields = _stat(member)
        if fields:
            ticks += sum(int(f) for f in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def resident_mb(pid: int) -> float:
    """Resident memory of the process and its descendants, in MB (Linux ``/proc``)."""
    pages = 0
    for member in tree(pid):
        fields = _stat(member)
        if fields:
            pages += int(fields[21])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def cli() -> list[str]:
    found = shutil.which("contextfold", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "contextfold.cli"]


def start_server(
    database: str, port: int, extra: Sequence[str] = ()
) -> tuple[subprocess.Popen[bytes], str]:
    """``contextfold serve`` on ``database`` with a fresh key; waits until it answers."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    made = subprocess.run(
        [*cli(), "keys", "create", "--tenant", "bench", "--database", database],
        env=env,
        capture_output=True,
        check=True,
    )
    key = made.stdout.decode().strip()
    server = subprocess.Popen(
        [*cli(), "serve", "--port", str(port), "--database", database, *extra],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server stopped: {server.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return server, key
        except OSError:
            time.sleep(0.05)
    server.kill()
    raise RuntimeError(f"the server did not start within {START_S:.0f} s")


async def setup(
    port: int, key: str, sessions: int, tag: str, connections: int | None = None
) -> list[Connection]:
    """``sessions`` sessions with a system prompt and a stored view; one connection each,
    or ``connections`` of them shared round-robin (session ``i`` on connection ``i % n``)."""
    conns = [await Connection.open(port) for _ in range(connections or sessions)]

    async def make(c: int) -> None:
        for i in range(c, sessions, len(conns)):
            sid = f"{tag}-{i}"
            status, body = await conns[c].request(
                "POST", "/api/v1/sessions", key, {"id": sid, "system": "You are a careful agent."}
            )
            assert status == 201, body
            status, body = await conns[c].request(
                "PUT",
                f"/api/v1/sessions/{sid}/views/default",
                key,
                {"preset": "offline", "budget": 8000},
            )
            assert status == 200, body

    await asyncio.gather(*(make(c) for c in range(len(conns))))
    return conns


def message(n: int) -> dict[str, Any]:
    role = "user" if n % 2 == 0 else "assistant"
    return {"messages": [{"role": role, "content": f"turn {n}: {WORDS}"}]}


async def one(conn: Connection, op: str, sid: str, key: str, n: int) -> float:
    t0 = time.perf_counter()
    if op == "append":
        status, body = await conn.request(
            "POST", f"/api/v1/sessions/{sid}/messages", key, message(n)
        )
        ok = status == 201
    else:
        status, body = await conn.request(
            "GET", f"/api/v1/sessions/{sid}/views/default/render", key
        )
        ok = status == 200
    if not ok:
        raise RuntimeError(f"{op} answered {status}: {body[:300]!r}")
    return time.perf_counter() - t0


async def closed_loop(
    conns: list[Connection], op: str, tag: str, key: str, seconds: float, cap: int
) -> tuple[float, list[float]]:
    latencies: list[float] = []
    stop = time.perf_counter() + seconds
    sent = 0

    async def worker(i: int) -> None:
        nonlocal sent
        n = 0
        while time.perf_counter() < stop and sent < cap:
            sent += 1
            latencies.append(await one(conns[i], op, f"{tag}-{i}", key, n))
            n += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(len(conns))))
    return len(latencies) / (time.perf_counter() - t0), latencies


async def open_loop(
    conns: list[Connection],
    op: str,
    tag: str,
    key: str,
    seconds: float,
    rate: float,
    sessions: int | None = None,
) -> tuple[float, list[float]]:
    """Requests at ``rate``/s round-robin over the sessions (one per connection unless
    ``sessions`` says more); one in flight per connection, a request due on a busy
    connection waits for it (and its wait counts)."""
    latencies: list[float] = []
    locks = [asyncio.Lock() for _ in conns]
    count = int(seconds * rate)
    sessions = sessions or len(conns)
    start = time.perf_counter()

    async def send(k: int) -> None:
        i = k % sessions
        c = i % len(conns)
        due = start + k / rate
        async with locks[c]:
            latency = await one(conns[c], op, f"{tag}-{i}", key, 10_000 + k)
        latencies.append(time.perf_counter() - due)
        assert latency >= 0

    tasks = []
    for k in range(count):
        delay = start + k / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(send(k)))
    await asyncio.gather(*tasks)
    return len(latencies) / (time.perf_counter() - start), latencies


async def measure(
    port: int, pid: int, key: str, args: argparse.Namespace, store: str
) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    if args.large:
        figures.update(await measure_large(port, pid, key, args, store))
    for sessions in args.concurrency:
        for mode in ("closed", "open"):
            tag = f"{mode}{sessions}"
            conns = await setup(port, key, sessions, tag)
            try:
                for op in ("append", "render"):
                    cpu = cpu_seconds(pid)
                    if mode == "closed":
                        rate, lat = await closed_loop(
                            conns, op, tag, key, args.seconds, args.max_requests
                        )
                    else:
                        rate, lat = await open_loop(conns, op, tag, key, args.seconds, args.rate)
                    name = f"{store}_{op}_{mode}_c{sessions}"
                    figures[f"{name}_per_s"] = round(rate, 1)
                    figures[f"{name}_p50_ms"] = round(percentile(lat, 0.5) * 1000, 2)
                    figures[f"{name}_p99_ms"] = round(percentile(lat, 0.99) * 1000, 2)
                    if lat:
                        used = (cpu_seconds(pid) - cpu) / len(lat)
                        figures[f"{name}_server_cpu_ms"] = round(used * 1000, 3)
            finally:
                for conn in conns:
                    conn.close()
    return figures


async def measure_large(
    port: int, pid: int, key: str, args: argparse.Namespace, store: str
) -> dict[str, Any]:
    """The ``--large`` run: every session made, then appends and renders over all of them."""
    sessions = args.large
    before = resident_mb(pid)
    t0 = time.perf_counter()
    conns = await setup(port, key, sessions, "large", args.large_connections)
    made = time.perf_counter() - t0
    name = f"{store}_large{sessions}"
    figures: dict[str, Any] = {f"{name}_setup_s": round(made, 1)}
    try:
        for op in ("append", "render"):
            cpu = cpu_seconds(pid)
            rate, lat = await open_loop(
                conns, op, "large", key, args.large_seconds, args.rate, sessions
            )
            figures[f"{name}_{op}_per_s"] = round(rate, 1)
            figures[f"{name}_{op}_p50_ms"] = round(percentile(lat, 0.5) * 1000, 2)
            figures[f"{name}_{op}_p99_ms"] = round(percentile(lat, 0.99) * 1000, 2)
            used = (cpu_seconds(pid) - cpu) / max(1, len(lat))
            figures[f"{name}_{op}_server_cpu_ms"] = round(used * 1000, 3)
        grown = resident_mb(pid) - before
        figures[f"{name}_resident_mb"] = round(resident_mb(pid), 1)
        figures[f"{name}_kb_per_session"] = round(grown * 1000 / sessions, 1)
    finally:
        for conn in conns:
            conn.close()
    return figures


def run_server(
    name: str, database: str, processes: int, args: argparse.Namespace
) -> dict[str, Any]:
    """The figures of one server, ``processes`` of them behind its port."""
    port = free_port()
    extra = ["--no-runner"] if args.no_runner else []
    if processes > 1:
        extra += ["--processes", str(processes)]
    server, key = start_server(database, port, extra)
    try:
        return asyncio.run(measure(port, server.pid, key, args, name))
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()


def label(store: str, processes: int) -> str:
    """The rows' prefix: the store, and the process count when more than one."""
    return store if processes == 1 else f"{store}_p{processes}"


def run_sqlite(args: argparse.Namespace) -> dict[str, Any]:
    """The figures on a fresh temporary file for each process count."""
    figures: dict[str, Any] = {}
    for processes in args.processes:
        with tempfile.TemporaryDirectory() as tmp:
            database = str(Path(tmp) / "load.db")
            figures.update(run_server(label("sqlite", processes), database, processes, args))
    return figures


def postgres_server(args: argparse.Namespace) -> str | None:
    """The PostgreSQL server to measure on, if it answers and the backend is installed."""
    server: str = args.postgres or os.environ.get("CONTEXTFOLD_PG_URL") or PG_DEFAULT
    try:
        import psycopg

        psycopg.connect(server, connect_timeout=3).close()
    except Exception as exc:
        print(f"PostgreSQL not measured: {server} does not answer ({exc})")
        return None
    return server


def run_postgres(server: str, args: argparse.Namespace) -> dict[str, Any]:
    """The figures on a schema of its own for each process count, dropped afterwards."""
    import psycopg

    figures: dict[str, Any] = {}
    joiner = "&" if "?" in server else "?"
    durability = f"&durability={args.pg_durability}" if args.pg_durability else ""
    for processes in args.processes:
        schema = f"cf_load_{uuid.uuid4().hex[:10]}"
        database = f"{server}{joiner}schema={schema}{durability}"
        try:
            figures.update(run_server(label("postgres", processes), database, processes, args))
        finally:
            with psycopg.connect(server, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return figures


def main() -> None:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--seconds", type=float, help="length of each phase")
        parser.add_argument("--max-requests", type=int, default=MAX_REQUESTS)
        parser.add_argument("--rate", type=float, default=RATE, help="open-loop requests/s")
        parser.add_argument("--concurrency", type=int, nargs="+", default=list(CONCURRENCY))
        parser.add_argument("--postgres", help=f"the PostgreSQL server (default {PG_DEFAULT})")
        parser.add_argument(
            "--stores", nargs="+", default=["sqlite", "postgres"], choices=["sqlite", "postgres"]
        )
        parser.add_argument(
            "--processes",
            type=int,
            nargs="+",
            default=[1],
            help="server process counts to measure (serve --processes N)",
        )
        parser.add_argument("--large", type=int, default=0, help="sessions of the large run")
        parser.add_argument("--large-connections", type=int, default=100)
        parser.add_argument("--large-seconds", type=float, default=10.0)
        parser.add_argument(
            "--pg-durability",
            choices=["full", "process"],
            help="the PostgreSQL store's durability (default: the store's, full)",
        )
        parser.add_argument(
            "--no-runner",
            action="store_true",
            help="serve without background compaction: the requests' own cost",
        )

    args = parse_args(__doc__ or "", options)
    args.seconds = args.seconds or (QUICK_SECONDS if args.quick else SECONDS)
    figures: dict[str, Any] = {"cpus": os.cpu_count(), "seconds_per_phase": args.seconds}
    figures["runner"] = not args.no_runner
    figures["processes"] = " ".join(str(n) for n in args.processes)
    figures["pg_durability"] = args.pg_durability or "full"
    if "sqlite" in args.stores:
        figures.update(run_sqlite(args))
    server = postgres_server(args) if "postgres" in args.stores else None
    if server is not None:
        figures.update(run_postgres(server, args))
    figures["stores"] = ", ".join(
        [*(["sqlite"] if "sqlite" in args.stores else []), *(["postgres"] if server else [])]
    )
    report(figures, args.json)


if __name__ == "__main__":
    main()
