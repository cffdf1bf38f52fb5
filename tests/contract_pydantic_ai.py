"""The adapter contract's driver for Pydantic AI (``AdapterTurns``).

The contract's chat messages become Pydantic AI's own types as an
application's agent loop holds them: a system or user message, tool results
and the next user message in one ``ModelRequest``, an assistant message a
``ModelResponse`` with its text and ``ToolCallPart``s, an image's data URI
``BinaryContent``. The whole history is handed to ``ContextfoldHistory`` on
every call, as Pydantic AI does before each model request. The prompt is the
processed messages as chat messages (``to_chat``), and each is also sent
through ``OpenAIChatModel`` (``pydantic_ai.direct.model_request_sync``) to a
Chat Completions server on 127.0.0.1, which must receive the same messages:
Pydantic AI re-serializes a call's arguments (``{"a": 1}`` goes as
``{"a":1}``), so those are compared as JSON.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

from fake_openai import openai_reply
from fake_providers import FakeProvider
from pydantic_ai import messages as pm
from pydantic_ai.direct import model_request_sync
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import RunUsage

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message, for_model
from contextfold.integrations.pydantic_ai import ContextfoldHistory, to_chat
from contextfold.memory.session import Memory
from contextfold.testing.adapter_contract_checks import seen


class PydanticAITurns:
    """One conversation of Pydantic AI messages, its history processed by the adapter."""

    def __init__(self, memory: Memory, session_id: str, view: str) -> None:
        self.history = ContextfoldHistory(memory.session(session_id), view)
        self.server = FakeProvider("openai").__enter__()
        self.server.answer("POST", "/v1/chat/completions", lambda request: openai_reply("ok"))
        provider = OpenAIProvider(base_url=self.server.url, api_key="test-key")
        self.model = OpenAIChatModel("gpt-4o-mini", provider=provider)
        self.ctx: RunContext[None] = RunContext(
            deps=None, model=self.model, usage=RunUsage(), run_id="run-1", conversation_id="c-1"
        )
        self.messages: list[pm.ModelMessage] = []

    def add(self, messages: Sequence[Message]) -> None:
        history = [*self.messages, *framework_messages(messages, self.messages)]
        self.history.prompt(self.ctx, history)  # refused: the loop does not keep them
        self.messages = history

    def prompt(self) -> list[Message]:
        processed = self.history.prompt(self.ctx, self.messages)
        model_request_sync(self.model, processed)
        ours = [for_model(m) for m in to_chat(processed)]
        sent = self.server.requests[-1].body["messages"]
        assert read_as_sent(sent) == read_as_sent(ours), sent
        return ours

    def close(self) -> None:
        self.server.__exit__(None, None, None)


def framework_messages(
    chat: Sequence[Message], before: Sequence[pm.ModelMessage]
) -> list[pm.ModelMessage]:
    """Chat messages as Pydantic AI's loop holds them."""
    out: list[pm.ModelMessage] = []
    names = {
        call.tool_call_id: call.tool_name
        for message in before
        if isinstance(message, pm.ModelResponse)
        for call in message.tool_calls
    }
    for message in chat:
        role = message.get("role")
        if role == "assistant":
            parts: list[pm.ModelResponsePart] = []
            if message.get("content"):
                parts.append(pm.TextPart(message["content"]))
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                part = pm.ToolCallPart(
                    function.get("name"), function.get("arguments"), tool_call_id=call.get("id")
                )
                names[part.tool_call_id] = part.tool_name
                parts.append(part)
            out.append(pm.ModelResponse(parts=parts))
            continue
        part_in: pm.ModelRequestPart
        if role == "system":
            part_in = pm.SystemPromptPart(message["content"])
        elif role == "user":
            try:
                part_in = pm.UserPromptPart(_user_content(message.get("content")))
            except ValueError as exc:  # Pydantic AI's own check of what it can send
                raise InvalidInput(str(exc), field="content") from exc
        elif role == "tool":
            call_id = message.get("tool_call_id")
            name = names.get(call_id, "unknown")  # type: ignore[arg-type]
            part_in = pm.ToolReturnPart(name, message.get("content"), call_id)  # type: ignore[arg-type]
        else:
            # Pydantic AI's types have no such role to carry.
            raise InvalidInput(f"no Pydantic AI part for role {role!r}", field="role")
        if out and isinstance(out[-1], pm.ModelRequest):
            out[-1].parts = [*out[-1].parts, part_in]
        else:
            out.append(pm.ModelRequest(parts=[part_in]))
    return out


def read_as_sent(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """What a model reads of a prompt: consecutive system messages read as one (Pydantic
    AI joins a request's system parts in one chat message, its OpenAI model sends each)."""
    out: list[dict[str, Any]] = []
    for message in map(as_sent, messages):
        last = out[-1] if out else None
        if last is not None and last["role"] == message["role"] == "system":
            last["content"] = f"{last['content']}\n\n{message['content']}"
        else:
            out.append(message)
    return out


def as_sent(message: Message) -> dict[str, Any]:
    """What a model reads of a message, a call's arguments as JSON, content as text."""
    out = {k: v for k, v in seen(message).items() if k != "tool_calls"}
    if isinstance(out.get("content"), list):
        out["content"] = [_part_read(p) for p in out["content"]]
    calls = seen(message).get("tool_calls")
    if calls:
        out["tool_calls"] = [{**c, "arguments": json.loads(c["arguments"])} for c in calls]
    return out


def _part_read(part: dict[str, Any]) -> Any:
    """A content part as the model reads it (Pydantic AI adds an image's ``detail``)."""
    if part["type"] == "image_url":
        return {"image_url": part["image_url"]["url"]}
    return part


def _user_content(content: Any) -> Any:
    if not isinstance(content, list):
        return content
    items: list[pm.UserContent] = []
    for part in content:
        if part["type"] == "text":
            items.append(part["text"])
        elif part["type"] == "image_url":
            url = part["image_url"]["url"]
            is_data = url.startswith("data:")
            items.append(pm.BinaryContent.from_data_uri(url) if is_data else pm.ImageUrl(url))
        elif part["type"] == "input_audio":
            audio = part["input_audio"]
            data = base64.b64decode(audio["data"])
            items.append(pm.BinaryContent(data, media_type=f"audio/{audio['format']}"))
    return items
