"""A streamed chat completion, read on its way to the client and assembled into one message.

The proxy passes the upstream's server-sent events to the client byte for
byte and feeds the same bytes here. ``StreamAnswer`` parses the event stream
(``data:`` lines, events ended by a blank line, chunks split anywhere) and
assembles the first choice's deltas: text, refusal, and tool calls, whose id
and name come once and whose arguments arrive in pieces, keyed by their
``index``. Only a stream that ended properly (``data: [DONE]``, or a choice's
``finish_reason``) and carried no error event yields a message: a stream cut
short logs nothing, rather than half an answer.

A stream that ends without either, whether the connection broke or the
upstream closed it cleanly, is truncated: the client gets one last ``error``
event (code ``stream_truncated``; the SDK raises it), the session's log keeps
the client's messages but no answer, and the server's log and the session's
event stream (event ``truncated``) say so.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from contextfold.core.messages import Message
from contextfold.server.proxy_match import answer_message
from contextfold.server.proxy_upstream import mask_secrets, passed_headers

log = logging.getLogger("contextfold.proxy")


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class StreamAnswer:
    """Feed it the stream's bytes in any pieces; ``message()`` is the answer once complete."""

    def __init__(self) -> None:
        self._pending = b""
        self._data: list[bytes] = []
        self._content: list[str] = []
        self._refusal: list[str] = []
        self._calls: dict[int, _Call] = {}
        self.done = False  # saw data: [DONE]
        self.finished = False  # a choice 0 finish_reason
        self.failed: str | None = None  # an error event, or a chunk that is not JSON

    def feed(self, chunk: bytes) -> None:
        lines = (self._pending + chunk).split(b"\n")
        self._pending = lines.pop()
        for line in lines:
            self._line(line.rstrip(b"\r"))

    def close(self) -> None:
        """The stream ended: an event not ended by a blank line still counts."""
        if self._pending:
            self._line(self._pending.rstrip(b"\r"))
            self._pending = b""
        self._dispatch()

    def _line(self, line: bytes) -> None:
        if not line:
            self._dispatch()
        elif line.startswith(b"data:"):
            value = line[5:]
            self._data.append(value[1:] if value.startswith(b" ") else value)
        # Comments (":" lines), event names, ids and retry hints carry no answer.

    def _dispatch(self) -> None:
        if not self._data:
            return
        data = b"\n".join(self._data)
        self._data = []
        if data.strip() == b"[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(data)
        except ValueError:
            self.failed = f"a stream event is not JSON: {data!r}"
            return
        if not isinstance(chunk, dict):
            self.failed = "a stream event is not a JSON object"
        elif chunk.get("error") is not None:
            self.failed = f"the stream carried an error: {json.dumps(chunk['error'])}"
        else:
            for choice in chunk.get("choices") or ():
                if isinstance(choice, dict) and choice.get("index", 0) == 0:
                    self._choice(choice)

    def _choice(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            if isinstance(delta.get("content"), str):
                self._content.append(delta["content"])
            if isinstance(delta.get("refusal"), str):
                self._refusal.append(delta["refusal"])
            for call in delta.get("tool_calls") or ():
                if isinstance(call, dict):
                    self._call(call)
        if choice.get("finish_reason"):
            self.finished = True

    def _call(self, delta: dict[str, Any]) -> None:
        index = delta.get("index", len(self._calls))
        call = self._calls.setdefault(
            index if isinstance(index, int) else len(self._calls), _Call()
        )
        if isinstance(delta.get("id"), str) and delta["id"]:
            call.id = delta["id"]
        function = delta.get("function")
        if isinstance(function, dict):
            if isinstance(function.get("name"), str):
                call.name += function["name"]
            if isinstance(function.get("arguments"), str):
                call.arguments.append(function["arguments"])

    @property
    def complete(self) -> bool:
        return (self.done or self.finished) and self.failed is None

    def message(self) -> Message | None:
        """The assembled assistant message, or None when the stream is incomplete or failed."""
        if not self.complete:
            return None
        calls = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": "".join(call.arguments)},
            }
            for _, call in sorted(self._calls.items())
        ]
        return answer_message(
            {
                "content": "".join(self._content) if self._content else None,
                "refusal": "".join(self._refusal) if self._refusal else None,
                "tool_calls": calls or None,
            }
        )


def _whole_events(data: bytes) -> tuple[bytes, bytes]:
    """``data`` split after its last complete event (a blank line), so a stream the
    upstream breaks never leaves the client half an event before the error event."""
    end = max(data.rfind(b"\n\n") + 2, data.rfind(b"\r\n\r\n") + 4, 0)
    return data[:end], data[end:]


TRUNCATED = "stream_truncated"


def error_event(reason: str) -> bytes:
    """The last event of a stream that did not end properly, as OpenAI's SDK reads errors."""
    error = {"error": {"message": reason, "type": "upstream_error", "code": TRUNCATED}}
    return f"data: {json.dumps(error)}\n\n".encode()


class RelayResponse(StreamingResponse):
    """The upstream's event stream, passed on byte for byte while the answer is assembled.

    The answer is logged as soon as ``data: [DONE]`` arrives, before those
    bytes go on, so a client that has read the whole stream finds it in the
    log. Bytes go on an event at a time (a partial event waits for its end),
    so a stream the upstream breaks gets one last whole ``error`` event (the
    SDK raises it) and logs nothing, and the server's upstream key, should the
    upstream echo it, is masked in whole events; a client that leaves early logs nothing
    either. The session's lock and the upstream response are released however
    the response ends, even if it never starts. A stream that ends without
    ``[DONE]`` or a finish reason gets an error event too, and ``truncated``
    is told why.
    """

    def __init__(
        self,
        answer: httpx.Response,
        log_answer: Callable[[Message], Awaitable[object]],
        session: str,
        release: Callable[[], None],
        *,
        truncated: Callable[[str], None],
        secrets: Iterable[str] = (),
    ) -> None:
        self._answer = answer
        self._log_answer = log_answer
        self._session = session
        self._release = release
        self._truncated = truncated
        self._secrets = tuple(secrets)
        super().__init__(self._relay(), headers=passed_headers(answer.headers, self._secrets))

    def _masked(self, events: bytes) -> bytes:
        """Whole events with the server's upstream key masked (an upstream may echo it in an
        error event); a key cannot straddle two pieces, as only whole events go on."""
        return mask_secrets(events, self._secrets)

    async def _relay(self) -> AsyncIterator[bytes]:
        assembled = StreamAnswer()
        logged = False
        held = b""  # the start of an event not ended yet: passed on once it is whole
        try:
            async for chunk in self._answer.aiter_bytes():
                assembled.feed(chunk)
                if assembled.done and not logged:
                    logged = await self._log(assembled)
                whole, held = _whole_events(held + chunk)
                if whole:
                    yield self._masked(whole)
        except httpx.HTTPError as exc:
            reason = f"upstream stream broken: {type(exc).__name__}; no answer was logged"
            log.warning("%s (session %s): %s", reason, self._session, exc)
            self._truncated(reason)
            yield error_event(reason)
            return
        assembled.close()
        if not logged:
            await self._log(assembled)
        if held:
            yield self._masked(held)
        if not (assembled.done or assembled.finished):
            reason = (
                "the upstream ended the stream without [DONE] or a finish reason: the answer "
                "is incomplete and was not logged"
            )
            log.warning("stream for %s truncated: %s", self._session, reason)
            self._truncated(reason)
            yield (b"\n\n" if held else b"") + error_event(reason)

    async def _log(self, assembled: StreamAnswer) -> bool:
        message = assembled.message()
        if message is None:
            reason = (assembled.failed or "no [DONE] or finish_reason").encode()
            log.warning(
                "stream for %s ended without an answer to log: %s",
                self._session,
                # Masked before it is cut, so no part of a key is left.
                mask_secrets(reason, self._secrets).decode()[:600],
            )
            return True
        try:
            await self._log_answer(message)
        except Exception:
            log.exception("could not log the streamed answer of %s", self._session)
        return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._answer.aclose()
            self._release()
