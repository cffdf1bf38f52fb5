"""Small HTTP servers on 127.0.0.1 that speak the OpenAI and Anthropic protocols.

The adapter tests run the real SDKs against these, so what is tested is the
request the SDK really sends and the response it really parses, errors
included. Each test scripts a queue of replies (status, headers, body, delay,
or a dropped connection); every request is recorded with its path, headers and
JSON body. An empty queue answers 599, so a test that makes one call too many
fails loudly instead of hanging. A route may instead be answered by a
``Responder``, a function of the request, for endpoints whose answer follows
from what was sent (``tests/fake_compaction.py``: the providers' compaction).

The replies each protocol sends are built in ``fake_openai`` (Chat Completions
and the Responses API) and ``fake_anthropic`` (Messages, ``count_tokens``);
``sdk_errors`` builds every exception an SDK exports.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal

Protocol = Literal["openai", "anthropic", "responses"]

PATHS: dict[Protocol, str] = {
    "openai": "/v1/chat/completions",
    "anthropic": "/v1/messages",
    "responses": "/v1/responses",
}


@dataclass(frozen=True)
class Reply:
    """One scripted response: ``body`` is sent as JSON unless it is ``str`` or ``bytes``."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drop: bool = False  # close the connection without answering
    cut: int | None = None  # send only this many bytes of the body, then close
    pace: float = 0.0  # seconds between the events of a server-sent event body


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


Responder = Callable[[Request], Reply]


def error_reply(
    protocol: Protocol, status: int, message: str = "failed", headers: dict[str, str] | None = None
) -> Reply:
    """An error body in the provider's own shape."""
    if protocol != "anthropic":
        body: dict[str, Any] = {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
        }
    else:
        kind = "rate_limit_error" if status == 429 else "api_error"
        body = {"type": "error", "error": {"type": kind, "message": message}}
    return Reply(status=status, body=body, headers=dict(headers or {}))


class FakeProvider:
    """A threaded server for one protocol; use as a context manager."""

    def __init__(self, protocol: Protocol) -> None:
        self.protocol = protocol
        self.requests: list[Request] = []
        # Routes answered from the queue (the query aside: Claude Code adds ``?beta=true``);
        # any other is a 404 in the provider's shape.
        self.routes: set[tuple[str, str]] = {("POST", PATHS[protocol])}
        # Routes answered by a function of the request instead of the queue.
        self.responders: dict[tuple[str, str], Responder] = {}
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        # A short poll interval makes shutdown(), and so each test's teardown, quick.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def url(self) -> str:
        """The base URL each SDK expects: OpenAI's includes ``/v1``, Anthropic's does not."""
        host, port = self._server.server_address[:2]
        root = f"http://{host!s}:{port}"
        return root if self.protocol == "anthropic" else f"{root}/v1"

    def add(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def answer(self, method: str, path: str, responder: Responder) -> None:
        """Answer ``method path`` with ``responder(request)`` from now on."""
        with self._lock:
            self.responders[(method, path)] = responder

    def _next(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
            route = (request.method, request.path.split("?", 1)[0])
            responder = self.responders.get(route)
        if responder is not None:
            return responder(request)
        with self._lock:
            if route not in self.routes:
                return error_reply(self.protocol, 404, f"no route {request.method} {request.path}")
            if not self._replies:
                return error_reply(self.protocol, 599, "the fake server has no scripted reply left")
            return self._replies.popleft()

    def __enter__(self) -> FakeProvider:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def _handler(owner: FakeProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self._serve()

        def do_GET(self) -> None:
            self._serve()

        def _serve(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            headers = {k.lower(): v for k, v in self.headers.items()}
            reply = owner._next(Request(self.command, self.path, headers, body))
            if reply.delay:
                time.sleep(reply.delay)
            if reply.drop:
                self.close_connection = True
                return
            if isinstance(reply.body, bytes):
                payload = reply.body
            elif isinstance(reply.body, str):  # sent as is: malformed bodies are str
                payload = reply.body.encode()
            else:
                payload = json.dumps(reply.body).encode()
            sent = {"content-type": "application/json", **reply.headers}
            try:
                self.send_response(reply.status)
                self.send_header("content-length", str(len(payload)))
                for key, value in sent.items():
                    self.send_header(key, value)
                self.end_headers()
                if reply.pace:
                    for event in payload.split(b"\n\n")[:-1]:
                        self.wfile.write(event + b"\n\n")
                        self.wfile.flush()
                        time.sleep(reply.pace)
                else:
                    self.wfile.write(payload if reply.cut is None else payload[: reply.cut])
                if reply.cut is not None:
                    self.close_connection = True
            except (BrokenPipeError, ConnectionResetError):
                # The client gave up (its timeout passed): nothing left to answer.
                self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: pytest shows the failing assertion, not every request."""

    return Handler
