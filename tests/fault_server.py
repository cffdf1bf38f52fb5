"""An OpenAI-compatible server on 127.0.0.1 that fails on purpose, counting every request.

``mode`` says how each ``POST /v1/chat/completions`` is answered:

- ``hang``: the request is read and never answered (until the server closes);
- ``trickle``: headers at once, then one space of the body every ``trickle_s``
  seconds, never finishing: a read timeout per chunk never fires;
- ``error``: HTTP 500 with an OpenAI error body;
- ``reset``: the connection is reset (RST) without an answer;
- ``ok``: a valid completion whose text is ``text``.

``requests`` counts requests as they arrive and ``times`` holds when
(``time.monotonic``), so a test can say how many went out after a moment.
The benchmark ``bench/faults.py`` uses it too.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal

Mode = Literal["hang", "trickle", "error", "reset", "ok"]


class FaultServer:
    def __init__(self, mode: Mode, *, text: str = "A short summary.", trickle_s: float = 0.2):
        self.mode: Mode = mode
        self.text = text
        self.trickle_s = trickle_s
        self.times: list[float] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def spec(self, model: str = "faulty") -> str:
        """The ``get_model`` spec of this server."""
        return f"openai-compatible:{self.url}#{model}"

    @property
    def requests(self) -> int:
        with self._lock:
            return len(self.times)

    def after(self, moment: float) -> int:
        """Requests that arrived after ``moment`` (``time.monotonic``)."""
        with self._lock:
            return sum(1 for t in self.times if t > moment)

    def _arrived(self) -> None:
        with self._lock:
            self.times.append(time.monotonic())

    def __enter__(self) -> FaultServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._closed.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def completion(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fault",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "faulty",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def _handler(owner: FaultServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            if length:
                self.rfile.read(length)
            owner._arrived()
            try:
                self._answer()
            except OSError:
                self.close_connection = True  # the client gave up

        def _answer(self) -> None:
            mode = owner.mode
            if mode == "hang":
                owner._closed.wait()
                self.close_connection = True
            elif mode == "reset":
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.close_connection = True
                self.connection.close()
            elif mode == "trickle":
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", "1000000")
                self.end_headers()
                while not owner._closed.wait(owner.trickle_s):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                self.close_connection = True
            else:
                status, body = (
                    (500, {"error": {"message": "boom", "type": "server_error"}})
                    if mode == "error"
                    else (200, completion(owner.text))
                )
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    return Handler
