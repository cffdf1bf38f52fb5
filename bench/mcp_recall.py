"""contextfold mcp: p50/p99 milliseconds of each recall tool's call at a 100k message log,
answered in this process, over stdio and over streamable HTTP, and cross-tenant attempts.

The log is real conversation, as ``bench/search.py`` logs it: every message of
the four data sets in turn, repeated to 100k messages, in one SQLite file, as
tenant ``bench``'s session ``log``, with the default view folded once by the
offline preset. The calls are what a model asks: ``contextfold_search`` with
real user text of 5 to 30 words (drawn with a fixed seed, as ``search.py``
draws them), ``contextfold_expand`` of a 40-message range at a random place,
and ``contextfold_folds``, after 30 untimed calls. Each is timed three ways: ``RecallServer.answer``
in this process (the tools and the session's lookup, no transport), through
the MCP SDK's stdio client to a spawned ``contextfold mcp``, and through its
streamable HTTP client to ``contextfold mcp --http`` (a key checked on every
request, from the key cache after the first). The two servers run beside this
process on the same cores.

Cross-tenant attempts: tenant ``other`` has a session ``log`` too, holding a
word no ``bench`` message has; every tool is called naming it every way a
model could (its id under the other tenant's key, its store id, paths around
the tenant prefix), over both transports. A leak is an answer holding the word,
or one that is not an error. ``--quick`` logs 10k messages.
"""

from __future__ import annotations

import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
from _common import parse_args, report
from mcp import ClientSession, types
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from search import conversation_log, queries
from store import take

from contextfold import Memory
from contextfold.memory.recall_tools import EXPAND, FOLDS, SEARCH
from contextfold.server.keys import create_key
from contextfold.server.mcp_server import RecallServer

CLI = str(Path(sys.executable).with_name("contextfold"))
CALLS = 100
WARM = 30
"""Calls made untimed first in each mode, so none is timed on cold caches (SQLite's pages,
the view's folds read once per fold version)."""
RANGE = 40
SECRET = "xylophonist"
CROSS_TENANT = ["other/log", "../other/log", "bench/../other/log", "secret-only"]


def build(path: Path, size: int) -> tuple[str, str, dict[str, float]]:
    """The store: ``bench/log`` of ``size`` messages folded once, ``other``'s sessions, and a
    key of each tenant. Returns the keys and the build's figures."""
    figures: dict[str, float] = {}
    log = take(conversation_log(), size)
    with Memory(path) as memory:
        session = memory.session("bench/log")
        t0 = time.perf_counter()
        for i in range(0, size, 1000):
            session.extend([m.message for m in log[i : i + 1000]])
        figures["log_seconds"] = time.perf_counter() - t0
        view = session.view("default", preset="offline", budget=16_000)
        t0 = time.perf_counter()
        view.compact()
        figures["compact_seconds"] = time.perf_counter() - t0
        figures["folds"] = float(len(view.folds()))
        for sid in ("other/log", "other/secret-only"):
            memory.session(sid).extend(
                [{"role": "user", "content": f"the {SECRET} plays at nine"}] * 3
            )
        return create_key(memory, "bench"), create_key(memory, "other"), figures


def calls(last_seq: int) -> list[tuple[str, dict[str, Any]]]:
    """The timed calls, in a fixed order: searches, expansions and listings interleaved."""
    rng = random.Random(7)
    asked = queries(CALLS)
    out: list[tuple[str, dict[str, Any]]] = []
    for query in asked:
        start = rng.randint(2, last_seq - RANGE)
        out.append((SEARCH, {"session": "log", "query": query}))
        out.append((EXPAND, {"session": "log", "start": start, "end": start + RANGE}))
        out.append((FOLDS, {"session": "log"}))
    return out


def percentiles(times: dict[str, list[float]], prefix: str) -> dict[str, float]:
    figures: dict[str, float] = {}
    for name, taken in times.items():
        cuts = statistics.quantiles(taken, n=100)
        short = name.removeprefix("contextfold_")
        figures[f"{prefix}{short}_ms_p50"] = cuts[49]
        figures[f"{prefix}{short}_ms_p99"] = cuts[98]
    return figures


def in_process(path: Path, planned: list[tuple[str, dict[str, Any]]]) -> dict[str, float]:
    times: dict[str, list[float]] = {SEARCH: [], EXPAND: [], FOLDS: []}
    with Memory(path) as memory:
        server = RecallServer(memory, lambda ctx: "bench")
        for name, arguments in planned[:WARM]:
            server.answer("bench", name, arguments)
        for name, arguments in planned:
            t0 = time.perf_counter()
            result = server.answer("bench", name, arguments)
            times[name].append((time.perf_counter() - t0) * 1e3)
            assert not result.is_error, result
    return percentiles(times, "direct_")


async def timed_calls(
    client: ClientSession, planned: list[tuple[str, dict[str, Any]]]
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {SEARCH: [], EXPAND: [], FOLDS: []}
    for name, arguments in planned[:WARM]:
        await client.call_tool(name, arguments)
    for name, arguments in planned:
        t0 = time.perf_counter()
        result = await client.call_tool(name, arguments)
        times[name].append((time.perf_counter() - t0) * 1e3)
        assert not result.is_error, result
    return times


async def attempts(client: ClientSession) -> tuple[int, int]:
    """Every tool naming the other tenant's sessions every way: (attempts, leaks)."""
    tried = leaked = 0
    for session in CROSS_TENANT:
        for name, arguments in (
            (SEARCH, {"query": SECRET}),
            (EXPAND, {"start": 1, "end": 3}),
            (FOLDS, {}),
        ):
            result = await client.call_tool(name, {"session": session, **arguments})
            content = result.content[0]
            text = content.text if isinstance(content, types.TextContent) else ""
            tried += 1
            leaked += (not result.is_error) or SECRET in text
    found = await client.call_tool(SEARCH, {"session": "log", "query": SECRET})
    tried += 1
    content = found.content[0]
    leaked += isinstance(content, types.TextContent) and f'"snippet":"the {SECRET}' in content.text
    return tried, leaked


@asynccontextmanager
async def over_stdio(path: Path) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=CLI, args=["mcp", "--store", str(path), "--tenant", "bench"]
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        yield client


@asynccontextmanager
async def over_http(base: str, key: str) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http,
        streamable_http_client(f"{base}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        yield client


def served(path: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [CLI, "mcp", "--http", "--port", str(port), "--store", str(path)],
        stdout=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.post(f"{base}/mcp", timeout=1.0).status_code == 401:
                return process, base
        except httpx.TransportError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("contextfold mcp --http did not answer")


def run(work: Callable[[], Awaitable[dict[str, float]]]) -> dict[str, float]:
    found: dict[str, float] = {}

    async def into() -> None:
        found.update(await work())

    anyio.run(into)
    return found


def transports(
    path: Path, planned: list[tuple[str, dict[str, Any]]], key: str, other: str
) -> dict[str, float]:
    async def stdio() -> dict[str, float]:
        async with over_stdio(path) as client:
            figures = percentiles(await timed_calls(client, planned), "stdio_")
            tried, leaked = await attempts(client)
        return {**figures, "stdio_cross_tenant_attempts": tried, "stdio_cross_tenant_leaks": leaked}

    figures = run(stdio)
    process, base = served(path)
    try:

        async def http() -> dict[str, float]:
            async with over_http(base, key) as client:
                found = percentiles(await timed_calls(client, planned), "http_")
                tried, leaked = await attempts(client)
            # The other tenant's own key naming ``log``: its own session, never bench's.
            async with over_http(base, other) as client:
                result = await client.call_tool(SEARCH, {"session": "log", "query": SECRET})
                assert not result.is_error
            return {**found, "http_cross_tenant_attempts": tried, "http_cross_tenant_leaks": leaked}

        figures.update(run(http))
    finally:
        process.terminate()
        process.wait(timeout=30)
    return figures


def main() -> None:
    args = parse_args(__doc__ or "")
    size = 10_000 if args.quick else 100_000
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mcp.db"
        key, other, figures = build(path, size)
        planned = calls(size)
        figures["messages"] = float(size)
        figures.update(in_process(path, planned))
        figures.update(transports(path, planned, key, other))
    report(figures, args.json)


if __name__ == "__main__":
    main()
