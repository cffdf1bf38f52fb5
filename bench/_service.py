"""A real ``contextfold serve`` for the service benchmarks, and an upstream that misbehaves.

``Served`` starts the CLI's server in a subprocess on a free port (with keys,
or ``--no-auth``) and stops it with SIGTERM; keys are made and revoked with the
CLI too, so the server is probed as a user runs it. ``EchoUpstream`` is an
OpenAI-compatible server on 127.0.0.1 that does what a careless one might: every
answer sets a cookie, and every error echoes the ``Authorization`` it was sent
(the server's upstream key) in its body and headers. What it answers is chosen
by the request's ``model``:

- ``ok``: a completion; ``stream-ok``: a whole stream; ``stream-cut``: a stream
  closed without ``[DONE]`` or a finish reason; ``stream-echo``: a 200 stream
  whose one event is an error quoting the key;
- ``status-NNN``: HTTP NNN with the key in the error's message, code and a header.

``GET /v1/models`` answers 403 with the key. ``cookies_received`` counts the
requests that came with a ``Cookie`` header.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

SECRET = "sk-upstream-BENCH-5b2f0c1d9e8a7b6c"
CLI = str(Path(sys.executable).with_name("contextfold"))
KEY = re.compile(r"cf_[0-9a-f]{12}_[A-Za-z0-9_-]{32}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def create_key(database: str, tenant: str) -> str:
    """A new key of ``tenant``, made by ``contextfold keys create``."""
    done = subprocess.run(
        [CLI, "keys", "create", "--tenant", tenant, "--database", database],
        capture_output=True,
        text=True,
        check=True,
    )
    found = KEY.search(done.stdout)
    if found is None:
        raise RuntimeError(f"no key printed: {done.stdout!r} {done.stderr!r}")
    return found.group(0)


def revoke_key(database: str, key: str) -> None:
    subprocess.run(
        [CLI, "keys", "revoke", key.split("_")[1], "--database", database],
        capture_output=True,
        check=True,
    )


class Served:
    """``contextfold serve`` in a subprocess, answering at ``base``; a context manager."""

    def __init__(
        self, database: str, log: Path, *, upstream: tuple[str, ...] = (), auth: bool = True
    ) -> None:
        self.database = database
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        args = [CLI, "serve", "--port", str(self.port), "--database", database]
        args += ["--runner-processes", "0"]
        for spec in upstream:
            args += ["--upstream", spec]
        if not auth:
            args.append("--no-auth")
        env = {**os.environ, "CONTEXTFOLD_UPSTREAM_KEY": SECRET}
        with log.open("wb") as out:
            self.process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
        self.log = log

    def __enter__(self) -> Served:
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"serve exited: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.base}/healthz", timeout=1.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.process.kill()
                raise RuntimeError("serve did not answer in time")
            time.sleep(0.05)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    data = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    return f"data: {json.dumps(data)}\n\n".encode()


def completion(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
    }


class EchoUpstream:
    """The careless upstream described above; a context manager."""

    def __init__(self) -> None:
        self.cookies_received = 0
        self.requests = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def seen(self, headers: Any) -> None:
        with self._lock:
            self.requests += 1
            self.cookies_received += int(headers.get("cookie") is not None)

    def __enter__(self) -> EchoUpstream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(owner: EchoUpstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            owner.seen(self.headers)
            self._error(403)

        def do_POST(self) -> None:
            owner.seen(self.headers)
            length = int(self.headers.get("content-length") or 0)
            try:
                model = str(json.loads(self.rfile.read(length)).get("model"))
            except ValueError:
                model = "ok"
            if model.startswith("status-"):
                self._error(int(model[7:]))
            elif model == "stream-ok":
                body = _chunk({"role": "assistant", "content": "fine"}) + _chunk({}, "stop")
                self._send(200, body + b"data: [DONE]\n\n", "text/event-stream")
            elif model == "stream-echo":
                said = self.headers.get("authorization", "")
                error = {"error": {"message": f"key refused: {said}", "type": "auth"}}
                self._send(200, f"data: {json.dumps(error)}\n\n".encode(), "text/event-stream")
            elif model == "stream-cut":
                body = _chunk({"role": "assistant", "content": "half an ans"})
                self._send(200, body, "text/event-stream")
            else:
                self._send(200, json.dumps(completion("fine")).encode(), "application/json")

        def _error(self, status: int) -> None:
            said = self.headers.get("authorization", "")
            error = {"message": f"key refused: {said}", "type": "invalid_request_error",
                     "code": said, "param": SECRET}  # fmt: skip
            body = json.dumps({"error": error}).encode()
            self._send(status, body, "application/json", {"x-echo-key": said})

        def _send(
            self, status: int, body: bytes, kind: str, extra: dict[str, str] | None = None
        ) -> None:
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(body)))
            self.send_header("set-cookie", f"upstream_session={SECRET}; Path=/")
            for name, value in (extra or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    return Handler
