"""Small HTTP servers on 127.0.0.1 that speak the OpenAI and Anthropic protocols.

The adapter tests run the real SDKs against these, so what is tested is the
request the SDK really sends and the response it really parses, errors
included. Each test scripts a queue of replies (status, headers, body, delay,
or a dropped connection); every request is recorded with its path, headers and
JSON body. An empty queue answers 599, so a test that makes one call too many
fails loudly instead of hanging. A route may instead be answered by a
``Responder``, a function of the request, for endpoints whose answer follows
from what was sent (``tests/fake_compaction.py``: the providers' compaction).

``sdk_exceptions`` builds one instance of every exception class an SDK
exports, as the SDK itself would, for the tests that check each is mapped.
"""

from __future__ import annotations

import inspect
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal

import httpx2

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


def openai_reply(
    text: str = "hello",
    *,
    model: str = "gpt-4o-mini-2024-07-18",
    prompt_tokens: int = 12,
    completion_tokens: int = 3,
    refusal: str | None = None,
) -> Reply:
    """A chat completion as OpenAI sends it; a ``refusal`` comes with null content, as OpenAI's does."""
    return Reply(
        body={
            "id": "chatcmpl-abc123",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": None if refusal is not None else text,
                        "refusal": refusal,
                    },
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
            "system_fingerprint": "fp_0123456789",
        },
        headers={"x-request-id": "req_fake"},
    )


def anthropic_reply(
    text: str = "hello",
    *,
    model: str = "claude-haiku-4-5-20251001",
    input_tokens: int = 14,
    output_tokens: int = 4,
    stop_reason: str = "end_turn",
) -> Reply:
    """A Messages API response as Anthropic sends it."""
    return Reply(
        body={
            "id": "msg_01abc",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
        },
        headers={"request-id": "req_fake"},
    )


def anthropic_content_reply(
    content: list[dict[str, Any]], *, stop_reason: str = "end_turn", stream: bool = False
) -> Reply:
    """A Messages answer of these ``content`` blocks, whole or as Anthropic streams it:
    ``message_start``, each block's start, deltas (text, thinking and signature, a tool
    use's input as ``input_json_delta`` pieces) and stop, ``message_delta``, ``message_stop``."""
    message = {
        "id": "msg_01abc",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 14, "output_tokens": 4},
    }
    if not stream:
        return Reply(body=message, headers={"request-id": "req_fake"})
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": {**message, "content": [],
                                                                "stop_reason": None}}),
    ]  # fmt: skip
    for i, block in enumerate(content):
        kind = block["type"]
        empty = {"text": {"text": ""}, "thinking": {"thinking": "", "signature": ""},
                 "tool_use": {"input": {}}}.get(kind, {})  # fmt: skip
        start = {**block, **empty}
        events.append(("content_block_start",
                       {"type": "content_block_start", "index": i, "content_block": start}))  # fmt: skip
        for delta in _deltas(block):
            events.append(("content_block_delta",
                           {"type": "content_block_delta", "index": i, "delta": delta}))  # fmt: skip
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                                     "usage": {"output_tokens": 4}}))  # fmt: skip
    events.append(("message_stop", {"type": "message_stop"}))
    body = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)
    return Reply(body=body, headers={"content-type": "text/event-stream", "request-id": "req_fake"})


def _deltas(block: dict[str, Any]) -> list[dict[str, Any]]:
    kind = block["type"]
    if kind == "text":
        text = block["text"]
        return [{"type": "text_delta", "text": text[:3]}, {"type": "text_delta", "text": text[3:]}]
    if kind == "thinking":
        return [
            {"type": "thinking_delta", "thinking": block["thinking"]},
            {"type": "signature_delta", "signature": block["signature"]},
        ]
    if kind == "tool_use":
        raw = json.dumps(block["input"])
        return [
            {"type": "input_json_delta", "partial_json": raw[:4]},
            {"type": "input_json_delta", "partial_json": raw[4:]},
        ]
    return []


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


def said(text: str, item_id: str = "msg_1") -> dict[str, Any]:
    """An assistant message output item of the Responses API."""
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [part],
    }


def called(name: str, arguments: str, call_id: str) -> dict[str, Any]:
    """A function_call output item of the Responses API."""
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def response_body(
    output: list[dict[str, Any]], *, response_id: str = "resp_1", status: str = "completed"
) -> dict[str, Any]:
    """A Response object as the Responses API sends it."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": 1_700_000_000,
        "model": "gpt-5-2025-08-07",
        "status": status,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "temperature": 1.0,
        "top_p": 1.0,
        "usage": {
            "input_tokens": 20,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 25,
        },
    }


def responses_reply(output: list[dict[str, Any]], *, response_id: str = "resp_1") -> Reply:
    """A whole Responses API answer."""
    return Reply(body=response_body(output, response_id=response_id))


def responses_stream(
    output: list[dict[str, Any]], *, response_id: str = "resp_1", end: str = "response.completed"
) -> Reply:
    """A streamed Responses API answer: its events as the API sends them, ``end`` last."""
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": response_body([], status="in_progress")}
    ]
    for at, item in enumerate(output):
        opened = {**item, "status": "in_progress"}
        if item["type"] == "message":
            opened["content"] = []
        if item["type"] == "function_call":
            opened["arguments"] = ""
        events.append({"type": "response.output_item.added", "output_index": at, "item": opened})
        where = {"item_id": item["id"], "output_index": at}
        if item["type"] == "message":
            text = item["content"][0]["text"]
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            events.append(
                {"type": "response.content_part.added", **where, "content_index": 0, "part": part}
            )
            for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
                delta = {"content_index": 0, "delta": piece, "logprobs": []}
                events.append({"type": "response.output_text.delta", **where, **delta})
            events.append(
                {"type": "response.output_text.done", **where, "content_index": 0, "text": text}
            )
        if item["type"] == "function_call":
            arguments = item["arguments"]
            for piece in (arguments[: len(arguments) // 2], arguments[len(arguments) // 2 :]):
                events.append(
                    {"type": "response.function_call_arguments.delta", **where, "delta": piece}
                )
            events.append(
                {"type": "response.function_call_arguments.done", **where, "arguments": arguments}
            )
        events.append({"type": "response.output_item.done", "output_index": at, "item": item})
    status = {"response.completed": "completed", "response.failed": "failed"}.get(end, "incomplete")
    final = response_body(output, response_id=response_id, status=status)
    events.append({"type": end, "response": final})
    chunks = []
    for number, event in enumerate(events):
        event["sequence_number"] = number
        chunks.append(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n")
    return Reply(body="".join(chunks).encode(), headers={"content-type": "text/event-stream"})


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


def sdk_exceptions(sdk: Any, root: type[BaseException]) -> list[BaseException]:
    """One instance of each public exception class of ``sdk`` deriving from ``root``.

    Status errors carry a response with ``retry-after: 2``; classes the SDK
    raises without an HTTP exchange get a plain message.
    """
    request = httpx2.Request("POST", "http://127.0.0.1/v1/endpoint")
    found: list[BaseException] = []
    # Only names ending in Error: getattr on the others loads the SDK's lazy modules.
    for name in sorted(n for n in dir(sdk) if n.endswith("Error") and not n.startswith("_")):
        found_class = getattr(sdk, name)
        if not (isinstance(found_class, type) and issubclass(found_class, root)):
            continue
        cls: Any = found_class  # constructors differ by class, as the branches below know
        if issubclass(cls, sdk.APIStatusError):
            status = getattr(cls, "status_code", None)
            if not isinstance(status, int):
                status = 500 if issubclass(cls, sdk.InternalServerError) else 418
            body = {"error": {"type": "some_error", "message": f"{name} happened"}}
            response = httpx2.Response(
                status, request=request, headers={"retry-after": "2"}, json=body
            )
            if "message" in inspect.signature(cls.__init__).parameters:
                found.append(cls(f"{name} happened", response=response, body=body))
            else:
                found.append(cls(response=response, body=body))
        elif issubclass(cls, sdk.APITimeoutError):
            found.append(cls(request))
        elif issubclass(cls, sdk.APIConnectionError):
            found.append(cls(request=request))
        elif issubclass(cls, sdk.APIResponseValidationError):
            found.append(cls(httpx2.Response(200, request=request), {"unexpected": True}))
        else:
            try:
                found.append(cls(f"{name} happened"))
            except TypeError:  # wants more than a message; the mapping reads type and text
                exc = cls.__new__(cls)
                Exception.__init__(exc, f"{name} happened")
                found.append(exc)
    return found


COUNT_TOKENS = "/v1/messages/count_tokens"
"""Anthropic's token counting route; a test adds ``("POST", COUNT_TOKENS)`` to ``routes``."""


def count_tokens_reply(input_tokens: int) -> Reply:
    """A ``count_tokens`` answer as Anthropic sends it."""
    return Reply(body={"input_tokens": input_tokens}, headers={"request-id": "req_fake"})
