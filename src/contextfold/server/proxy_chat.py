"""The OpenAI Chat Completions wire: ``messages`` in, a chat completion (or its chunks) out.

The request's ``messages`` are the log's messages as they are, less what
clients add around the protocol (``client_messages``); the rendered prompt
goes upstream as ``messages``. A whole answer's first choice is logged
(``completion_message``); a stream is assembled from the first choice's
deltas (``StreamAnswer``): text, refusal, and tool calls, whose id and name
come once and whose arguments arrive in pieces, keyed by their ``index``.
Only a stream that ended properly (``data: [DONE]``, or a choice's
``finish_reason``) and carried no error event yields a message: a stream cut
short logs nothing, rather than half an answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message
from contextfold.server.proxy_sse import SseReader
from contextfold.server.proxy_upstream import refusal_body
from contextfold.server.proxy_wire import Conversation

# Fields of an answer that exist only in responses; a client echoing an answer
# back (the SDK's message object) sends them, the log does not keep them.
_RESPONSE_ONLY = frozenset({"annotations"})
_ANSWER_KEYS = ("role", "content", "tool_calls", "refusal", "name")
TRUNCATED = "stream_truncated"


def client_messages(raw: Any) -> list[Message]:
    """The request's ``messages`` with what clients add around the protocol removed.

    Keys set to null are dropped (the SDK echoes ``refusal: null``,
    ``audio: null``), as are response-only keys and an empty ``tool_calls``;
    an assistant message with neither text nor tool calls gets empty text, as
    the proxy logs such answers. Everything else is checked when it is matched
    or appended.
    """
    if not isinstance(raw, list) or not raw:
        raise InvalidInput("messages must be a non-empty list of messages", field="messages")
    out: list[Message] = []
    for i, message in enumerate(raw):
        if not isinstance(message, Mapping):
            raise InvalidInput(
                f"expected a message object, got {type(message).__name__}",
                index=i,
                field="messages",
            )
        clean = {
            k: v
            for k, v in message.items()
            if v is not None and k not in _RESPONSE_ONLY and not (k == "tool_calls" and v == [])
        }
        if (
            clean.get("role") == "assistant"
            and "content" not in clean
            and "tool_calls" not in clean
        ):
            clean["content"] = ""
        out.append(clean)
    return out


def answer_message(message: Any) -> Message | None:
    """The assistant message to log from an upstream answer, or None if there is none.

    Only what a model is sent back is kept: text, tool calls, a refusal.
    """
    if not isinstance(message, Mapping):
        return None
    kept = {k: message[k] for k in _ANSWER_KEYS if message.get(k) is not None}
    kept["role"] = "assistant"
    return client_messages([kept])[0]


def completion_message(data: bytes) -> Message | None:
    """The assistant message of a whole chat completion's body, or None if it has none."""
    try:
        choices = json.loads(data).get("choices")
        return answer_message(choices[0]["message"])
    except (ValueError, AttributeError, TypeError, LookupError, InvalidInput):
        return None


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class StreamAnswer:
    """Feed it the stream's bytes in any pieces; ``message()`` is the answer once complete."""

    end = "[DONE] or a finish reason"

    def __init__(self) -> None:
        self._events = SseReader(self._event)
        self._content: list[str] = []
        self._refusal: list[str] = []
        self._calls: dict[int, _Call] = {}
        self.done = False  # saw data: [DONE]
        self.finished = False  # a choice 0 finish_reason
        self.failed: str | None = None  # an error event, or a chunk that is not JSON

    def feed(self, chunk: bytes) -> None:
        self._events.feed(chunk)

    def close(self) -> None:
        """The stream ended: an event not ended by a blank line still counts."""
        self._events.close()

    def _event(self, name: str, data: bytes) -> None:
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
    def ended(self) -> bool:
        return self.done or self.finished

    @property
    def complete(self) -> bool:
        return self.ended and self.failed is None

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

    def error_event(self, reason: str) -> bytes:
        """The last event of a stream that did not end properly, as OpenAI's SDK reads errors."""
        error = {"error": {"message": reason, "type": "upstream_error", "code": TRUNCATED}}
        return f"data: {json.dumps(error)}\n\n".encode()


class ChatWire:
    """``POST /v1/chat/completions`` to an OpenAI-compatible upstream."""

    name = "chat_completions"
    upstream = "openai"
    upstream_path = "/chat/completions"
    keeps: str | None = None

    def conversation(self, body: dict[str, Any]) -> Conversation:
        return Conversation(client_messages(body.get("messages")))

    def upstream_body(self, body: dict[str, Any], prompt: list[Message]) -> dict[str, Any]:
        return {**body, "messages": prompt}

    def upstream_headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        return {}

    def answer(self, data: bytes) -> Message | None:
        return completion_message(data)

    def assembler(self) -> StreamAnswer:
        return StreamAnswer()

    def refusal(self, status: int, data: bytes, secrets: Iterable[str]) -> bytes:
        return refusal_body(status, data, secrets)


CHAT = ChatWire()
