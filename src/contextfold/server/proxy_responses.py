"""The OpenAI Responses API wire: ``instructions`` and ``input`` in, a Response (or its events) out.

The request's conversation reads as log messages through
``contextfold.formats.responses`` (reasoning items, images, files and any
other item kept in ``meta["responses"]``, and sent upstream again while
their message is unchanged); the rendered prompt goes to the OpenAI
upstream's ``/responses`` as ``input``, every other field unchanged
(``store`` included). A Response's output is logged as one assistant message
with the response's id, whole or assembled from its events
(``contextfold.formats.responses_answer``).

Server-side state: ``previous_response_id`` names an answer this session
logged; the log up to it is the history and the request's input is what is
new (``Conversation.continues``), so the upstream is sent the whole compacted
conversation and never needs its own stored state (the id is not sent on).
An id the session never logged is a 400 naming ``previous_response_id``.
``conversation`` (the Conversations API keeps the conversation at OpenAI,
where it cannot be compacted) is a 400 naming ``conversation``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message
from contextfold.formats.responses import request_body, request_messages
from contextfold.formats.responses_answer import (
    ResponseStream,
    response_message,
    responses_error_event,
)
from contextfold.server.errors import ServiceError
from contextfold.server.proxy_chat import TRUNCATED
from contextfold.server.proxy_request import MAX_CONVERSATION
from contextfold.server.proxy_sse import SseReader
from contextfold.server.proxy_upstream import refusal_body
from contextfold.server.proxy_wire import Conversation

RESPONSES_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "description": "An OpenAI Responses API request; fields other than "
                    "input, instructions and previous_response_id go upstream unchanged.",
                    "properties": {
                        "model": {"type": "string"},
                        "instructions": {"type": "string"},
                        "input": {
                            "oneOf": [
                                {"type": "string"},
                                {"type": "array", "items": {"type": "object"}},
                            ]
                        },
                        "previous_response_id": {
                            "type": "string",
                            "description": "an answer this session logged: the log up to it "
                            "is the history",
                        },
                        "stream": {"type": "boolean"},
                        "user": {"type": "string", "description": "session id fallback"},
                    },
                    "additionalProperties": True,
                }
            }
        },
    }
}
"""The request body as the OpenAPI document shows it."""


class ResponsesAssembler:
    """A streamed Response's events as they are relayed, assembled into the answer to log."""

    end = "response.completed"

    def __init__(self) -> None:
        self._stream = ResponseStream()
        self._events = SseReader(self._event)
        self._failed: str | None = None

    def feed(self, chunk: bytes) -> None:
        self._events.feed(chunk)

    def close(self) -> None:
        self._events.close()

    def _event(self, name: str, data: bytes) -> None:
        if data.strip() == b"[DONE]":
            return
        try:
            parsed = json.loads(data)
        except ValueError:
            self._failed = f"a stream event is not JSON: {data[:200]!r}"
            return
        self._stream.event(name, parsed)

    @property
    def complete(self) -> bool:
        return self._stream.complete and self._failed is None

    @property
    def ended(self) -> bool:
        return self._stream.ended

    @property
    def failed(self) -> str | None:
        return self._failed or self._stream.failure

    def message(self) -> Message | None:
        return self._stream.message() if self._failed is None else None

    def error_event(self, reason: str) -> bytes:
        return responses_error_event(reason, TRUNCATED, self._stream.sequence)


class ResponsesWire:
    """``POST /v1/responses`` to an OpenAI upstream's ``/responses``."""

    name = "responses"
    upstream = "openai"
    upstream_path = "/responses"
    keeps: str | None = "responses"

    def conversation(self, body: dict[str, Any]) -> Conversation:
        if body.get("conversation") is not None:
            raise ServiceError(
                400,
                "invalid_input",
                "conversation (the Conversations API) keeps the conversation on OpenAI's side, "
                "where it cannot be compacted: send it as input, or chain the calls with "
                "previous_response_id",
                field="conversation",
            )
        previous = body.get("previous_response_id")
        if previous is not None and (not isinstance(previous, str) or not previous):
            raise InvalidInput(
                "previous_response_id must be a response id string", field="previous_response_id"
            )
        raw = body.get("input")
        if isinstance(raw, list) and len(raw) > MAX_CONVERSATION:
            raise InvalidInput(
                f"input holds {len(raw)} items, over the limit of {MAX_CONVERSATION} a request "
                "may send",
                field="input",
            )
        return Conversation(request_messages(body, continued=previous is not None), previous)

    def upstream_body(self, body: dict[str, Any], prompt: list[Message]) -> dict[str, Any]:
        return request_body(body, prompt)

    def upstream_headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        return {}

    def answer(self, data: bytes) -> Message | None:
        return response_message(data)

    def assembler(self) -> ResponsesAssembler:
        return ResponsesAssembler()

    def refusal(self, status: int, data: bytes, secrets: Iterable[str]) -> bytes:
        return refusal_body(status, data, secrets)


RESPONSES = ResponsesWire()
