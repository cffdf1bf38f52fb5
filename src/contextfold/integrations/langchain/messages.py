"""LangChain messages to and from the log's chat-format messages, without loss.

A LangChain message becomes the chat message a model would be sent
(``contextfold.core.messages``): role, content, name, tool calls, tool call id
and refusal, so the log's digests, token counts and folds see what a model
sees. Whatever that dict cannot hold goes into its ``meta`` under
``"langchain"``: the message's class, id, ``additional_kwargs``,
``response_metadata``, ``usage_metadata``, ``invalid_tool_calls``, a tool
result's ``status`` and ``artifact``, and the original content where the
chat parts differ from it (reasoning blocks, images and files in LangChain's
own block shapes, a tool result's images, provider blocks). Only the fields
that differ from what the chat dict alone gives back are kept, so the common
message carries no ``meta`` at all.

``convert_to_openai_messages`` is not used: it drops ids, reasoning, statuses
and artifacts, and rewrites content blocks one way.

A field whose value is not JSON (an ``artifact`` holding a Python object) cannot
be stored; it is left out and named under ``"langchain_unstored"``, and the
message read back from the log lacks it. The graph's state still holds it.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    ToolMessage,
    messages_from_dict,
)

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message, check_json, validate_message
from contextfold.memory.matching import digest

META_KEY = "langchain"
UNSTORED_KEY = "langchain_unstored"

_ROLE_OF_TYPE = {
    "human": "user",
    "HumanMessageChunk": "user",
    "ai": "assistant",
    "AIMessageChunk": "assistant",
    "tool": "tool",
    "ToolMessageChunk": "tool",
    "system": "system",
    "SystemMessageChunk": "system",
}
_CHAT_ROLES = frozenset({"user", "assistant", "system", "developer"})


def langchain_to_chat(message: BaseMessage, *, index: int = 0) -> Message:
    """The chat message a model would be sent, with what it cannot hold in ``meta``.

    ``InvalidInput`` names the field (``index`` is the message's place in its
    list) for what has no chat form: a ``FunctionMessage``, a ``RemoveMessage``,
    a tool call without an id, arguments that are not JSON.
    """
    if not isinstance(message, BaseMessage):
        raise InvalidInput(
            f"expected a LangChain message, got {type(message).__name__}", index=index
        )
    chat: Message = {"role": _role_of(message, index)}
    role = chat["role"]
    chat["content"] = _chat_content(message.content, user=role == "user")
    if message.name:
        chat["name"] = message.name
    if isinstance(message, AIMessage):
        if message.tool_calls:
            chat["tool_calls"] = [
                _chat_call(call, index, j) for j, call in enumerate(message.tool_calls)
            ]
            if chat["content"] in ("", []):
                chat["content"] = None
        refusal = message.additional_kwargs.get("refusal")
        if isinstance(refusal, str):
            chat["refusal"] = refusal
    if isinstance(message, ToolMessage):
        chat["tool_call_id"] = message.tool_call_id
    chat = validate_message(chat, index=index)
    kept, unstored = _differences(message, chat)
    if kept or unstored:
        chat["meta"] = {}
        if kept:
            chat["meta"][META_KEY] = kept
        if unstored:
            chat["meta"][UNSTORED_KEY] = unstored
    return chat


def chat_to_langchain(message: Mapping[str, Any], *, index: int = 0) -> BaseMessage:
    """The LangChain message a chat message (logged, folded or rendered) stands for.

    With this module's ``meta`` it is the message that was logged, field for
    field; without (a fold's summary, a masked result, a message another client
    logged) it is the natural LangChain message of its role. A message the log
    would refuse is ``InvalidInput`` naming the field (``index``: its place).
    """
    message = validate_message(message, index=index)
    data = _plain_data(message)
    meta = message.get("meta")
    if isinstance(meta, Mapping) and isinstance(meta.get(META_KEY), Mapping):
        data.update(meta[META_KEY])
    return messages_from_dict([{"type": data["type"], "data": data}])[0]


def _role_of(message: BaseMessage, index: int) -> str:
    role = _ROLE_OF_TYPE.get(message.type)
    if role is None and isinstance(message, ChatMessage) and message.role in _CHAT_ROLES:
        role = message.role
    if role is None:
        raise InvalidInput(
            f"a {type(message).__name__} has no chat-format role "
            "(user, assistant, system, developer and tool messages do)",
            index=index,
            field="role",
        )
    return role


def _chat_call(call: Mapping[str, Any], index: int, j: int) -> dict[str, Any]:
    where = f"tool_calls[{j}]"
    if not call.get("id"):
        raise InvalidInput("a tool call needs an id", index=index, field=f"{where}.id")
    try:
        arguments = json.dumps(check_json(call["args"], f"{where}.args"), ensure_ascii=False)
    except InvalidInput as exc:
        raise InvalidInput(exc.reason, index=index, field=exc.field) from None
    return {
        "id": call["id"],
        "type": "function",
        "function": {"name": call["name"], "arguments": arguments},
    }


def _chat_content(content: str | list[str | dict[str, Any]], *, user: bool) -> Any:
    """Text as text; a list as the chat parts a model is sent (media on user messages only)."""
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for block in content:
        part = _chat_part(block) if user else _text_part(block)
        if part is not None:
            parts.append(part)
    return parts


def _text_part(block: str | Mapping[str, Any]) -> dict[str, Any] | None:
    if isinstance(block, str):
        return {"type": "text", "text": block}
    if block.get("type") == "text" and isinstance(block.get("text"), str):
        return {"type": "text", "text": block["text"]}
    return None


def _chat_part(block: str | Mapping[str, Any]) -> dict[str, Any] | None:
    """A user content block as an OpenAI part; LangChain's own media blocks translated."""
    text = _text_part(block)
    if text is not None or isinstance(block, str):
        return text
    kind = block.get("type")
    if kind in ("image_url", "input_audio", "file") and isinstance(block.get(kind), Mapping):
        return {"type": kind, kind: dict(block[kind])}
    data = _inline_data(block)
    if kind == "image":
        url = block.get("url") if block.get("source_type", "url") == "url" else None
        url = url if isinstance(url, str) else data
        return None if url is None else {"type": "image_url", "image_url": {"url": url}}
    if kind == "file":
        body: dict[str, Any] = {}
        if isinstance(block.get("file_id"), str):
            body["file_id"] = block["file_id"]
        elif data is not None:
            body["file_data"] = data
        else:
            return None
        filename = block.get("filename") or (block.get("metadata") or {}).get("filename")
        if isinstance(filename, str):
            body["filename"] = filename
        return {"type": "file", "file": body}
    if kind == "audio" and isinstance(block.get("base64") or block.get("data"), str):
        mime = str(block.get("mime_type") or "audio/wav")
        payload = block.get("base64") or block.get("data")
        return {
            "type": "input_audio",
            "input_audio": {"data": payload, "format": mime.split("/")[-1]},
        }
    return None


def _inline_data(block: Mapping[str, Any]) -> str | None:
    """A base64 block as a data URL (LangChain v1's ``base64``, v0's ``source_type`` ``base64``)."""
    payload = block.get("base64")
    if payload is None and block.get("source_type") == "base64":
        payload = block.get("data")
    if not isinstance(payload, str):
        return None
    mime = block.get("mime_type") or "application/octet-stream"
    return f"data:{mime};base64,{payload}"


def _plain_data(message: Mapping[str, Any]) -> dict[str, Any]:
    """The LangChain fields a chat message gives on its own, as ``model_dump`` spells them."""
    role = message.get("role")
    content = message.get("content")
    data: dict[str, Any] = {
        "content": "" if content is None else content,
        "additional_kwargs": {},
        "response_metadata": {},
        "name": message.get("name"),
        "id": None,
    }
    if role == "user":
        data["type"] = "human"
    elif role == "assistant":
        calls, invalid = _langchain_calls(message.get("tool_calls") or [])
        data.update(type="ai", tool_calls=calls, invalid_tool_calls=invalid, usage_metadata=None)
        if message.get("refusal") is not None:
            data["additional_kwargs"] = {"refusal": message["refusal"]}
    elif role == "tool":
        data.update(type="tool", tool_call_id=message.get("tool_call_id"), artifact=None)
        data["status"] = "success"
    elif role == "system":
        data["type"] = "system"
    else:
        data.update(type="chat", role=role)
    return data


def _langchain_calls(calls: list[Mapping[str, Any]]) -> tuple[list[Any], list[Any]]:
    """Chat tool calls as LangChain's: arguments parsed, the unparsable ones invalid."""
    parsed: list[Any] = []
    invalid: list[Any] = []
    for call in calls:
        function = call.get("function") or {}
        arguments = function.get("arguments") or "{}"
        try:
            args = json.loads(arguments)
        except ValueError as exc:
            args = None
            error = str(exc)
        if isinstance(args, dict):
            parsed.append(
                {
                    "name": function.get("name"),
                    "args": args,
                    "id": call.get("id"),
                    "type": "tool_call",
                }
            )
        else:
            invalid.append(
                {
                    "name": function.get("name"),
                    "args": arguments,
                    "id": call.get("id"),
                    "error": error if args is None else "arguments are not an object",
                    "type": "invalid_tool_call",
                }
            )
    return parsed, invalid


def _differences(message: BaseMessage, chat: Message) -> tuple[dict[str, Any], list[str]]:
    """The fields ``chat`` does not give back, as JSON, and those that are not JSON."""
    plain = _plain_data(chat)
    kept: dict[str, Any] = {}
    unstored: list[str] = []
    for field, value in message.model_dump().items():
        if field in plain and plain[field] == value:
            continue
        try:
            kept[field] = check_json(value, field)
        except InvalidInput:
            unstored.append(field)
    return kept, unstored


class ChatMessages:
    """``langchain_to_chat`` and the log's digest of the result, remembered per message object
    while it lives and reads the same.

    LangGraph hands the middleware its whole state at every model call, mostly the
    same objects as the call before; converting each again costs more than the
    rest of the call. A message whose text content, name, tool calls (arguments
    compared as JSON), tool call id and refusal still read as when it was
    converted gives back that chat message; anything else, and every message with
    content parts, is converted afresh. The chat messages given back are shared:
    read them, never change them.
    """

    def __init__(self) -> None:
        self._seen: dict[int, tuple[weakref.ref[BaseMessage], tuple[Any, ...], Message, bytes]] = {}

    def chat(self, message: BaseMessage, *, index: int = 0) -> tuple[Message, bytes]:
        """The chat message and its digest (``contextfold.memory.matching.digest``)."""
        sign = _signature(message)
        key = id(message)
        found = self._seen.get(key) if sign is not None else None
        if found is not None and found[0]() is message and found[1] == sign:
            return found[2], found[3]
        chat = langchain_to_chat(message, index=index)
        seen = digest(chat)
        if sign is not None:
            gone = weakref.ref(message, lambda _ref, key=key: self._seen.pop(key, None))  # type: ignore[misc]
            self._seen[key] = (gone, sign, chat, seen)
        return chat, seen


def _signature(message: BaseMessage) -> tuple[Any, ...] | None:
    """What a model sees of ``message``, cheap to compare; None for content parts."""
    if not isinstance(message, BaseMessage) or not isinstance(message.content, str):
        return None
    calls: tuple[Any, ...] = ()
    refusal = None
    if isinstance(message, AIMessage):
        calls = tuple(
            (c.get("id"), c.get("name"), json.dumps(c.get("args"), sort_keys=True, default=repr))
            for c in message.tool_calls
        )
        refusal = message.additional_kwargs.get("refusal")
    return (
        type(message),
        message.content,
        message.name,
        getattr(message, "tool_call_id", None),
        getattr(message, "role", None),
        calls,
        refusal,
    )
