"""Proxy overhead: the time the proxy adds to a call, per wire format.

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
calls (``stream: true``, read to the end) are measured apart, and plain chat
calls once more with the service's background compaction runner off, to show
its share. Each wire format (``FORMATS``: Chat Completions, the Anthropic
Messages API and the OpenAI Responses API, whose answers carry a reasoning
item the proxy keeps and sends back) is measured plain and streamed against an upstream of its own
protocol; ``<format>_overhead_p99_ms`` is the larger of the two. ``load_1m_*`` is the machine's load average around the run: on a
shared 2-core machine the p99 follows it. ``*_service_cpu_ms_per_call`` is the
CPU time the service process spent per call (all its threads, from /proc),
which does not.

Goal: ``overhead_p99_ms`` < 10 ms, for every format.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from _common import ROOT, parse_args, report
from _proxy_responses import OUTPUT, RESPONSE, responses_stream

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


def _chat_stream() -> bytes:
    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": "bench",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    return (
        event({"role": "assistant", "content": ""})
        + b"".join(event({"content": w}) for w in WORDS)
        + event({}, "stop")
        + b"data: [DONE]\n\n"
    )


WORDS = ["Noted;", " the", " loader", " reads", " it", " lazily."]
MESSAGE = {
    "id": "msg_bench",
    "type": "message",
    "role": "assistant",
    "model": "bench",
    "content": [{"type": "text", "text": "".join(WORDS)}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 10, "output_tokens": 8},
}


def _messages_stream() -> bytes:
    def event(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()

    start = {**MESSAGE, "content": [], "stop_reason": None}
    block = {"index": 0, "content_block": {"type": "text", "text": ""}}
    return (
        event("message_start", {"message": start})
        + event("content_block_start", block)
        + b"".join(
            event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": w}})
            for w in WORDS
        )
        + event("content_block_stop", {"index": 0})
        + event("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {}})
        + event("message_stop", {})
    )


@dataclass(frozen=True)
class Format:
    """A wire format as the benchmark speaks it: its route, upstream, answers and turns."""

    path: str  # under /v1, at the proxy and at the upstream alike
    upstream: str  # the --upstream spec's kind
    answer: bytes
    stream: bytes
    reply: list[dict[str, Any]]  # the answer as the client appends it to its conversation
    extra: dict[str, Any]  # body fields besides the conversation and stream
    field: str = "messages"  # where the body carries the conversation


FORMATS = {
    "chat_completions": Format(
        "/chat/completions", "openai-compatible", json.dumps(ANSWER).encode(), _chat_stream(),
        [ANSWER["choices"][0]["message"]], {"model": "bench"},  # type: ignore[index]
    ),
    "messages": Format(
        "/messages", "anthropic", json.dumps(MESSAGE).encode(), _messages_stream(),
        [{"role": "assistant", "content": MESSAGE["content"]}],
        {"model": "bench", "max_tokens": 256},
    ),
    "responses": Format(
        "/responses", "openai-compatible", json.dumps(RESPONSE).encode(), responses_stream(),
        OUTPUT, {"model": "bench", "instructions": "Be brief."}, "input",
    ),
}  # fmt: skip


async def _serve_upstream(port: int) -> None:
    """An instant upstream of every format: answers as soon as a request is read."""

    def response(body: bytes, kind: bytes) -> bytes:
        head = b"HTTP/1.1 200 OK\r\ncontent-type: " + kind
        return head + b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body

    answers = {
        (f"/v1{f.path}".encode(), stream): response(
            f.stream if stream else f.answer,
            b"text/event-stream" if stream else b"application/json",
        )
        for f in FORMATS.values()
        for stream in (False, True)
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
                path = head.split(b" ", 2)[1]
                writer.write(answers[path, b'"stream":true' in body])
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
settings = Settings(database=db, port=int(port), upstream=tuple(upstream.split(",")),
                    runner=runner == "on")
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
    wire: Format,
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
        if len(conversation) >= (1 + len(wire.reply)) * turns:
            conversation, session = [], session + 1
        question = f"turn {i}: how does the loader handle file {i % 97}? " * 3
        conversation.append({"role": "user", "content": question})
        body = {**wire.extra, wire.field: conversation, "stream": stream}
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
        conversation += wire.reply
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
         ",".join({f"{f.upstream}:http://127.0.0.1:{upstream_port}/v1" for f in FORMATS.values()}),
         KEY_ID, SECRET,
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
    base = f"http://127.0.0.1:{up_port}/v1"
    # chat_completions plain and stream (labels plain, stream): the service as it runs;
    # plain_no_runner: without the background compaction runner, to show what its
    # planning costs the calls; then each other format plain and streamed.
    modes = [("plain", "chat_completions", False, True), ("stream", "chat_completions", True, True),
             ("plain_no_runner", "chat_completions", False, False)]  # fmt: skip
    modes += [
        (f"{name}_{'stream' if stream else 'plain'}", name, stream, True)
        for name in FORMATS
        if name != "chat_completions"
        for stream in (False, True)
    ]
    try:
        with tempfile.TemporaryDirectory() as tmp, httpx.Client(timeout=30) as client:
            for label, name, stream, runner in modes:
                wire = FORMATS[name]
                with _service(tmp, up_port, runner=runner) as (port, pid):
                    cpu = _cpu_s(pid)
                    figures |= _measure(
                        client, base + wire.path, f"http://127.0.0.1:{port}/v1{wire.path}",
                        f"cf_{KEY_ID}_{SECRET}", wire=wire, calls=calls, turns=args.turns,
                        stream=stream, label=label,
                    )  # fmt: skip
                    # CPU the service spent per call (runner threads included): unlike
                    # wall time, it does not grow with the machine's load.
                    figures[f"{label}_service_cpu_ms_per_call"] = (_cpu_s(pid) - cpu) * 1000 / calls
    finally:
        upstream.terminate()
        upstream.wait(10)
    figures["load_1m_after"] = os.getloadavg()[0]
    for name in FORMATS:
        plain, stream = ("plain", "stream") if name == "chat_completions" else (
            f"{name}_plain", f"{name}_stream")  # fmt: skip
        for q in ("p50", "p99"):
            figures[f"{name}_overhead_{q}_ms"] = max(
                figures[f"{plain}_overhead_{q}_ms"], figures[f"{stream}_overhead_{q}_ms"]
            )
    for q in ("p50", "p99"):
        figures[f"overhead_{q}_ms"] = max(figures[f"{n}_overhead_{q}_ms"] for n in FORMATS)
    figures["goal_p99_under_10_ms"] = figures["overhead_p99_ms"] < 10
    report(figures, args.json)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--upstream-only":
        asyncio.run(_serve_upstream(int(sys.argv[2])))
    else:
        main()
