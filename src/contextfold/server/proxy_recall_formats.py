"""The recall tools in each wire format: their schema, the calls in an answer, the next round.

The proxy's recall rounds (``contextfold.server.proxy_recall``) are one loop;
what differs between Chat Completions, the Responses API and the Messages API
is a ``RecallFormat``: which tool names the client's request already defines,
how the recall tools' OpenAI function schemas are written in the format's own
tool shape, which calls an upstream answer (whole or its buffered event
stream) makes, how that answer and the results of the proxy's calls are
appended to the upstream body for the next round, and how tool calls are
forbidden (``tool_choice`` none) for the round after the last allowed.

The next round is built on the upstream body as it was sent, in the format's
own shape (not from the log's messages): the answer goes back with its own
blocks or items (thinking with its signature, reasoning items), less the
client's calls of a mixed answer (``contextfold.server.proxy_recall`` says
why), and each result as the format's tool result.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from contextfold.formats.responses_answer import ResponseStream
from contextfold.server.proxy_chat import StreamAnswer, answer_message
from contextfold.server.proxy_messages import MessageStream
from contextfold.server.proxy_sse import SseReader


@dataclass(frozen=True)
class RecallCall:
    """One tool call of an upstream answer: its id, tool name and arguments as sent."""

    id: str
    name: str
    arguments: str | Mapping[str, Any]


@dataclass(frozen=True)
class UpstreamTurn:
    """An upstream answer read for its tool calls: the format's own output (a chat
    message, the Responses output items, the Messages content blocks) and its calls."""

    output: Any
    calls: list[RecallCall]


class RecallFormat(Protocol):
    """The recall tools in one wire format."""

    def client_tools(self, body: Mapping[str, Any]) -> set[str]:
        """The tool names the client's request defines."""

    def with_tools(self, body: dict[str, Any], definitions: Sequence[Mapping[str, Any]]) -> None:
        """Add the recall tools (OpenAI chat function schemas) to ``body``'s tools."""

    def forbid_calls(self, body: dict[str, Any]) -> None:
        """Set ``body``'s ``tool_choice`` so that the model answers without calling a tool."""

    def read(self, data: bytes, streamed: bool) -> UpstreamTurn | None:
        """The answer of a whole body or of a whole event stream; None when it has none."""

    def continued(
        self, body: dict[str, Any], turn: UpstreamTurn, answered: Sequence[tuple[RecallCall, str]]
    ) -> dict[str, Any]:
        """``body`` with ``turn`` (its calls other than ``answered``'s dropped) and each
        answered call's result appended: the next round's request."""


def _function(definition: Mapping[str, Any]) -> Mapping[str, Any]:
    function = definition.get("function")
    return function if isinstance(function, Mapping) else {}


def _named(tools: Any) -> set[str]:
    """The names of a tools list whose entries carry ``name`` (Responses, Messages)."""
    if not isinstance(tools, list):
        return set()
    return {t["name"] for t in tools if isinstance(t, Mapping) and isinstance(t.get("name"), str)}


def _input(block: Mapping[str, Any]) -> Mapping[str, Any]:
    """A ``tool_use`` block's input (an object; anything else reads as none)."""
    found = block.get("input")
    return found if isinstance(found, Mapping) else {}


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None


class ChatRecall:
    """Chat Completions: ``tools`` of ``{"type": "function", "function": {...}}``, the
    answer's ``tool_calls``, ``tool`` messages for the results."""

    def client_tools(self, body: Mapping[str, Any]) -> set[str]:
        tools = body.get("tools")
        names = {
            _function(t).get("name")
            for t in (tools if isinstance(tools, list) else ())
            if isinstance(t, Mapping)
        }
        names |= _named(body.get("functions"))  # the older field: its tools are named alike
        return {n for n in names if isinstance(n, str)}

    def with_tools(self, body: dict[str, Any], definitions: Sequence[Mapping[str, Any]]) -> None:
        tools = body.get("tools")
        body["tools"] = [*(tools if isinstance(tools, list) else ()), *definitions]

    def forbid_calls(self, body: dict[str, Any]) -> None:
        body["tool_choice"] = "none"

    def read(self, data: bytes, streamed: bool) -> UpstreamTurn | None:
        if streamed:
            stream = StreamAnswer()
            stream.feed(data)
            stream.close()
            message: Any = stream.message()
        else:
            parsed = _json(data)
            try:
                message = answer_message(parsed["choices"][0]["message"])
            except (TypeError, LookupError, ValueError):
                return None
        if not isinstance(message, Mapping):
            return None
        calls = [
            RecallCall(
                str(c.get("id", "")),
                str(_function(c).get("name", "")),
                _function(c).get("arguments") or "",
            )
            for c in message.get("tool_calls") or ()
            if isinstance(c, Mapping)
        ]
        return UpstreamTurn(message, calls)

    def continued(
        self, body: dict[str, Any], turn: UpstreamTurn, answered: Sequence[tuple[RecallCall, str]]
    ) -> dict[str, Any]:
        ids = {call.id for call, _ in answered}
        kept = [c for c in turn.output.get("tool_calls") or () if c.get("id") in ids]
        text = turn.output.get("content")
        said = {"role": "assistant", "content": text or None, "tool_calls": kept}
        results = [
            {"role": "tool", "tool_call_id": call.id, "content": result}
            for call, result in answered
        ]
        return {**body, "messages": [*body["messages"], said, *results]}


class ResponsesRecall:
    """The Responses API: ``tools`` of ``{"type": "function", "name", ...}``, the output's
    ``function_call`` items, ``function_call_output`` items for the results."""

    def client_tools(self, body: Mapping[str, Any]) -> set[str]:
        return _named(body.get("tools"))

    def with_tools(self, body: dict[str, Any], definitions: Sequence[Mapping[str, Any]]) -> None:
        tools = body.get("tools")
        ours = [
            {
                "type": "function",
                "name": _function(d)["name"],
                "description": _function(d).get("description", ""),
                "parameters": _function(d).get("parameters", {}),
                # Responses makes a function strict unless told: the schemas have optional fields.
                "strict": False,
            }
            for d in definitions
        ]
        body["tools"] = [*(tools if isinstance(tools, list) else ()), *ours]

    def forbid_calls(self, body: dict[str, Any]) -> None:
        body["tool_choice"] = "none"

    def read(self, data: bytes, streamed: bool) -> UpstreamTurn | None:
        if streamed:
            stream = ResponseStream()
            reader = SseReader(lambda name, raw: stream.event(name, _json(raw)))
            reader.feed(data)
            reader.close()
            if not stream.complete:
                return None
            output: Any = stream.response.get("output") or [
                stream.items[k] for k in sorted(stream.items)
            ]
        else:
            parsed = _json(data)
            if not isinstance(parsed, Mapping) or parsed.get("status") not in (None, "completed"):
                return None
            output = parsed.get("output")
        if not isinstance(output, list):
            return None
        calls = [
            RecallCall(
                str(item.get("call_id", "")), str(item.get("name", "")), item.get("arguments") or ""
            )
            for item in output
            if isinstance(item, Mapping) and item.get("type") == "function_call"
        ]
        return UpstreamTurn(output, calls)

    def continued(
        self, body: dict[str, Any], turn: UpstreamTurn, answered: Sequence[tuple[RecallCall, str]]
    ) -> dict[str, Any]:
        ids = {call.id for call, _ in answered}
        kept = [
            item
            for item in turn.output
            if not (item.get("type") == "function_call" and item.get("call_id") not in ids)
        ]
        results = [
            {"type": "function_call_output", "call_id": call.id, "output": result}
            for call, result in answered
        ]
        earlier = body.get("input")
        if isinstance(earlier, str):
            earlier = [{"role": "user", "content": earlier}]
        return {**body, "input": [*(earlier or ()), *kept, *results]}


class MessagesRecall:
    """The Messages API: ``tools`` of ``{"name", "description", "input_schema"}``, the
    content's ``tool_use`` blocks, a user turn of ``tool_result`` blocks for the results."""

    def client_tools(self, body: Mapping[str, Any]) -> set[str]:
        return _named(body.get("tools"))

    def with_tools(self, body: dict[str, Any], definitions: Sequence[Mapping[str, Any]]) -> None:
        tools = body.get("tools")
        ours = [
            {
                "name": _function(d)["name"],
                "description": _function(d).get("description", ""),
                "input_schema": _function(d).get("parameters", {"type": "object"}),
            }
            for d in definitions
        ]
        body["tools"] = [*(tools if isinstance(tools, list) else ()), *ours]

    def forbid_calls(self, body: dict[str, Any]) -> None:
        body["tool_choice"] = {"type": "none"}

    def read(self, data: bytes, streamed: bool) -> UpstreamTurn | None:
        if streamed:
            stream = MessageStream()
            stream.feed(data)
            stream.close()
            content: Any = stream.content()
        else:
            parsed = _json(data)
            content = parsed.get("content") if isinstance(parsed, Mapping) else None
        if not isinstance(content, list):
            return None
        calls = [
            RecallCall(str(block.get("id", "")), str(block.get("name", "")), _input(block))
            for block in content
            if isinstance(block, Mapping) and block.get("type") == "tool_use"
        ]
        return UpstreamTurn(content, calls)

    def continued(
        self, body: dict[str, Any], turn: UpstreamTurn, answered: Sequence[tuple[RecallCall, str]]
    ) -> dict[str, Any]:
        ids = {call.id for call, _ in answered}
        kept = [
            block
            for block in turn.output
            if not (block.get("type") == "tool_use" and block.get("id") not in ids)
        ]
        results = [
            {"type": "tool_result", "tool_use_id": call.id, "content": result}
            for call, result in answered
        ]
        turns = [{"role": "assistant", "content": kept}, {"role": "user", "content": results}]
        return {**body, "messages": [*body["messages"], *turns]}


RECALL_FORMATS: dict[str, RecallFormat] = {
    "chat_completions": ChatRecall(),
    "responses": ResponsesRecall(),
    "messages": MessagesRecall(),
}
"""Each wire's recall tools, by ``Wire.name``."""
