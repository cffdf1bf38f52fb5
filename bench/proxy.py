"""Proxy overhead: the time the OpenAI-compatible proxy adds to a chat completion.

Three processes on 127.0.0.1: an instant upstream (asyncio, a canned chat
completion or event stream the moment a request's body is in), the service
(``create_app`` under uvicorn, SQLite in a temporary folder, API keys on, the
background runner started), and this client (``httpx``, keep-alive). Each
iteration sends one request straight to the upstream and the same request
through the proxy, alternating which goes first, so both see the same machine
load; the overhead of an iteration is the proxy's time minus the direct
time. Percentiles are nearest-rank.

Through the proxy every call does what a real one does: authenticate the key,
match the client's whole conversation against the session's log, append the
new user message, render the view, forward, append the answer. Conversations
grow by one round per call up to ``--turns`` rounds, then a new session
starts, so the conversation resent averages ``turns`` messages. Streaming
calls (``stream: true``, read to ``[DONE]``) are measured apart, and plain calls
once more with the service's background compaction runner off, to show its
share. ``load_1m_*`` is the machine's load average around the run: on a
shared 2-core machine the p99 follows it. ``*_service_cpu_ms_per_call`` is the
CPU time the service process spent per call (all its threads, from /proc),
which does not.

Goal: ``overhead_p99_ms`` < 10 ms.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from _common import ROOT, parse_args, report

ANSWER = {
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": 1_700_000_000,
    "model": "bench",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Noted; the loader reads it lazily."},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 10, "completion_tokens": 8, "total_tokens": 18},
}


def _stream_body() -> bytes:
    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": "bench",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    words = ["Noted;", " the", " loader", " reads", " it", " lazily."]
    return (
        event({"role": "assistant", "content": ""})
        + b"".join(event({"content": w}) for w in words)
        + event({}, "stop")
        + b"data: [DONE]\n\n"
    )


async def _serve_upstream(port: int) -> None:
    """An instant OpenAI-compatible upstream: answers as soon as a request is read."""
    plain = json.dumps(ANSWER).encode()
    stream = _stream_body()

    def response(body: bytes, kind: bytes) -> bytes:
        head = b"HTTP/1.1 200 OK\r\ncontent-type: " + kind
        return head + b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body

    answers = {
        False: response(plain, b"application/json"),
        True: response(stream, b"text/event-stream"),
    }

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length) if length else b""
                writer.write(answers[b'"stream":true' in body])
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


_SERVICE = """
import sys, uvicorn
from contextfold.core.log import ApiKey
from contextfold.server.app import create_app
from contextfold.server.keys import hash_secret
from contextfold.server.settings import Settings
from contextfold.store import open_store
db, port, upstream, key_id, secret, runner = sys.argv[1:]
store = open_store(db)
store.put_api_key(ApiKey(key_id, "bench", hash_secret(secret)))
store.close()
settings = Settings(database=db, port=int(port), upstream=upstream, runner=runner == "on")
uvicorn.run(create_app(settings), host="127.0.0.1", port=int(port), log_level="warning",
            access_log=False)
"""


KEY_ID, SECRET = "0123456789ab", "s" * 32


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_up(url: str, deadline_s: float = 30.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not come up")


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _measure(
    client: httpx.Client,
    direct_url: str,
    proxy_url: str,
    key: str,
    *,
    calls: int,
    turns: int,
    stream: bool,
    label: str,
) -> dict[str, Any]:
    direct: list[float] = []
    proxied: list[float] = []
    overhead: list[float] = []
    conversation: list[dict[str, Any]] = []
    session = 0
    for i in range(calls):
        if len(conversation) >= 2 * turns:
            conversation, session = [], session + 1
        question = f"turn {i}: how does the loader handle file {i % 97}? " * 3
        conversation.append({"role": "user", "content": question})
        body = {"model": "bench", "messages": conversation, "stream": stream}
        headers = {"authorization": f"Bearer {key}", "x-contextfold-session": f"{label}-{session}"}
        took: dict[str, float] = {}
        for target in ("direct", "proxy") if i % 2 else ("proxy", "direct"):
            url = direct_url if target == "direct" else proxy_url
            start = time.perf_counter()
            answer = client.post(url, json=body, headers=headers if target == "proxy" else None)
            answer.read()
            took[target] = time.perf_counter() - start
            if answer.status_code != 200:
                raise RuntimeError(f"{target} answered {answer.status_code}: {answer.text[:300]}")
        conversation.append(ANSWER["choices"][0]["message"])  # type: ignore[index]
        if i >= calls // 10:  # the first tenth warms the caches, connections and JIT-less paths
            direct.append(took["direct"] * 1000)
            proxied.append(took["proxy"] * 1000)
            overhead.append((took["proxy"] - took["direct"]) * 1000)
    p = f"{label}_"
    return {
        f"{p}calls": len(overhead),
        f"{p}direct_p50_ms": _quantile(direct, 0.5),
        f"{p}direct_p99_ms": _quantile(direct, 0.99),
        f"{p}proxy_p50_ms": _quantile(proxied, 0.5),
        f"{p}proxy_p99_ms": _quantile(proxied, 0.99),
        f"{p}overhead_p50_ms": _quantile(overhead, 0.5),
        f"{p}overhead_p99_ms": _quantile(overhead, 0.99),
        f"{p}ratio_p50": _quantile(proxied, 0.5) / _quantile(direct, 0.5),
    }


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system, every thread) a process has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def _service(folder: str, upstream_port: int, *, runner: bool) -> Iterator[tuple[int, int]]:
    """The service in its own process over a fresh SQLite file; yields its port and pid."""
    port = _free_port()
    db = str(Path(folder) / f"bench-{port}.db")
    process = subprocess.Popen(
        [sys.executable, "-c", _SERVICE, db, str(port),
         f"openai-compatible:http://127.0.0.1:{upstream_port}/v1", KEY_ID, SECRET,
         "on" if runner else "off"],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )  # fmt: skip
    try:
        _wait_up(f"http://127.0.0.1:{port}/healthz")
        yield port, process.pid
    finally:
        process.terminate()
        process.wait(10)


def main() -> None:
    def options(parser: Any) -> None:
        parser.add_argument("--calls", type=int, default=None, help="calls per mode")
        parser.add_argument("--turns", type=int, default=20, help="rounds before a new session")

    args = parse_args(__doc__.splitlines()[0], options)
    calls = args.calls or (200 if args.quick else 2000)
    up_port = _free_port()
    figures: dict[str, Any] = {
        "turns_per_session": args.turns,
        "cpus": os.cpu_count(),
        "load_1m_before": os.getloadavg()[0],
    }
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    upstream = subprocess.Popen(
        [sys.executable, __file__, "--upstream-only", str(up_port)], env=env
    )
    direct_url = f"http://127.0.0.1:{up_port}/v1/chat/completions"
    try:
        with tempfile.TemporaryDirectory() as tmp, httpx.Client(timeout=30) as client:
            # plain and stream: the service as it runs; plain_no_runner: without the
            # background compaction runner, to show what its planning costs the calls.
            for label, stream, runner in (
                ("plain", False, True),
                ("stream", True, True),
                ("plain_no_runner", False, False),
            ):
                with _service(tmp, up_port, runner=runner) as (port, pid):
                    cpu = _cpu_s(pid)
                    figures |= _measure(
                        client, direct_url, f"http://127.0.0.1:{port}/v1/chat/completions",
                        f"cf_{KEY_ID}_{SECRET}", calls=calls, turns=args.turns, stream=stream,
                        label=label,
                    )  # fmt: skip
                    # CPU the service spent per call (runner threads included): unlike
                    # wall time, it does not grow with the machine's load.
                    figures[f"{label}_service_cpu_ms_per_call"] = (_cpu_s(pid) - cpu) * 1000 / calls
    finally:
        upstream.terminate()
        upstream.wait(10)
    figures["load_1m_after"] = os.getloadavg()[0]
    figures["overhead_p50_ms"] = max(
        figures["plain_overhead_p50_ms"], figures["stream_overhead_p50_ms"]
    )
    figures["overhead_p99_ms"] = max(
        figures["plain_overhead_p99_ms"], figures["stream_overhead_p99_ms"]
    )
    figures["goal_p99_under_10_ms"] = figures["overhead_p99_ms"] < 10
    report(figures, args.json)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--upstream-only":
        asyncio.run(_serve_upstream(int(sys.argv[2])))
    else:
        main()
