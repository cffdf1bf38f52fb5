"""A Responses API answer, whole or streamed, as the one assistant message to log.

A Response's ``output`` is the items the model produced; they read as one
assistant message (``formats.responses.assistant_message``): the text of its
``message`` items, a tool call per ``function_call``, and every item kept
verbatim in ``meta["responses"]["items"]``, beside the response's id in
``meta["responses"]["id"]`` (what a later ``previous_response_id`` names).
A client that sends those items back in its next input is read as the same
message, so the log holds the answer once.

A stream (``ResponseStream``) is fed its server-sent events one by one:
items open with ``response.output_item.added``, grow by
``response.output_text.delta`` and ``response.function_call_arguments.delta``,
and are replaced whole by ``response.output_item.done``. Only
``response.completed`` completes it, and its ``response.output`` is the answer
when it carries one (else the items assembled). ``response.failed``,
``response.incomplete`` and ``error`` end it without an answer to log.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message
from contextfold.formats.responses import KEPT, assistant_message

_ENDS = frozenset({"response.completed", "response.failed", "response.incomplete", "error"})


def output_message(response: Any) -> Message | None:
    """The assistant message of a whole Response object, or None when it has no output.

    A response that failed, or whose output is empty, has no message; one
    whose output is malformed is an ``InvalidInput`` naming ``output[k]``.
    """
    if not isinstance(response, Mapping) or response.get("status") == "failed":
        return None
    output = response.get("output")
    if not isinstance(output, list) or not output:
        return None
    message = assistant_message(output)
    kept = {"items": [dict(item) for item in output]}
    if isinstance(response.get("id"), str) and response["id"]:
        kept["id"] = response["id"]
    return {**message, "meta": {KEPT: kept}}


def response_message(data: bytes) -> Message | None:
    """The assistant message of a whole ``/responses`` answer's body, or None."""
    try:
        return output_message(json.loads(data))
    except (ValueError, InvalidInput):
        return None


def responses_error_event(reason: str, code: str, sequence: int) -> bytes:
    """A stream's last event in the Responses format, for one that did not end properly."""
    data: dict[str, Any] = {"type": "error", "code": code, "message": reason, "param": None}
    data["sequence_number"] = sequence
    return b"event: error\ndata: " + json.dumps(data).encode() + b"\n\n"


class ResponseStream:
    """The answer of a streamed Response, built from its events (module docstring)."""

    def __init__(self) -> None:
        self.items: dict[int, dict[str, Any]] = {}
        self.response: dict[str, Any] = {}
        self.ending: str | None = None
        self.failure: str | None = None
        self.sequence = 0

    def event(self, name: str, data: Any) -> None:
        """One event: its ``event:`` name (or its data's ``type``) and its parsed data."""
        if not isinstance(data, Mapping):
            self.failure = self.failure or f"an event's data is not an object ({name or '?'})"
            return
        kind = name or str(data.get("type", ""))
        number = data.get("sequence_number")
        if isinstance(number, int):
            self.sequence = max(self.sequence, number + 1)
        if kind in _ENDS:
            self._end(kind, data)
        elif isinstance(data.get("output_index"), int):
            self._grow(kind, data["output_index"], data)
        elif kind in ("response.created", "response.in_progress"):
            found = data.get("response")
            self.response = dict(found) if isinstance(found, Mapping) else self.response

    def _end(self, kind: str, data: Mapping[str, Any]) -> None:
        self.ending = kind
        found = data.get("response")
        if isinstance(found, Mapping):
            self.response = dict(found)
        if kind != "response.completed":
            detail = data.get("message") or self.response.get("status") or kind
            self.failure = f"the upstream's stream ended with {kind}: {detail}"

    def _grow(self, kind: str, at: int, data: Mapping[str, Any]) -> None:
        item = data.get("item")
        if kind in ("response.output_item.added", "response.output_item.done"):
            if isinstance(item, Mapping):
                self.items[at] = json.loads(json.dumps(item))
            return
        open_item = self.items.get(at)
        delta = data.get("delta")
        if open_item is None or not isinstance(delta, str):
            return
        if kind == "response.function_call_arguments.delta":
            open_item["arguments"] = str(open_item.get("arguments") or "") + delta
        elif kind == "response.output_text.delta":
            parts = open_item.setdefault("content", [])
            index = data.get("content_index", 0)
            while isinstance(index, int) and len(parts) <= index:
                parts.append({"type": "output_text", "text": "", "annotations": []})
            if isinstance(index, int) and isinstance(parts[index], dict):
                parts[index]["text"] = str(parts[index].get("text") or "") + delta

    @property
    def complete(self) -> bool:
        """``response.completed`` came, and nothing failed."""
        return self.ending == "response.completed" and self.failure is None

    @property
    def ended(self) -> bool:
        """The stream's own end came (completed, failed, incomplete or an error)."""
        return self.ending is not None

    def message(self) -> Message | None:
        """The answer to log once complete, else None."""
        if not self.complete:
            return None
        response = dict(self.response)
        if not response.get("output"):
            response["output"] = [self.items[k] for k in sorted(self.items)]
        try:
            return output_message(response)
        except InvalidInput as exc:
            self.failure = str(exc)
            return None
