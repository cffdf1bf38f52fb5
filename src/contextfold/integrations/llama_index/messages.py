"""LlamaIndex ``ChatMessage`` to and from the log's chat messages, without loss.

The chat message is what a model sees, so it is what the log matches, counts
and folds: the role (``function`` is logged as ``tool``, ``chatbot`` and
``model`` as ``assistant``), text, a user's images, audio and documents as
OpenAI content parts, ``ToolCallBlock`` (or OpenAI-style
``additional_kwargs["tool_calls"]``) as ``tool_calls``, and
``additional_kwargs["tool_call_id"]`` and ``["name"]``. What a chat message
cannot hold (thinking blocks and their signatures, media in an assistant or
tool message, cache points, citations, any other ``additional_kwargs``) is
kept whole: when the plain mapping would not give the message back exactly,
the message's own JSON dump rides along in ``meta["llama_index"]``, which is
stored but never sent to a model, and ``to_llama_index`` rebuilds the message
from it. A media block the model cannot be shown in its role leaves a short
text marker (``[image]``) so a summary knows it was there.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any, Literal

from contextfold.core.errors import InvalidInput
from contextfold.core.extras import needs_extra
from contextfold.core.messages import Message, validate_message

with needs_extra("the LlamaIndex adapter", "llama-index"):
    from llama_index.core.base.llms.types import (
        AudioBlock,
        ChatMessage,
        ContentBlock,
        DocumentBlock,
        ImageBlock,
        MessageRole,
        TextBlock,
        ThinkingBlock,
        ToolCallBlock,
    )

CallsIn = Literal["blocks", "additional_kwargs"]
"""Where a ``ChatMessage`` built from a chat message carries its tool calls: as
``ToolCallBlock`` (LlamaIndex's own way, read by most LLM classes) or as
OpenAI-style ``additional_kwargs["tool_calls"]`` (the only way some read, LiteLLM's)."""

META_KEY = "llama_index"
"""The key of ``meta`` that holds a message's own dump when the chat shape loses something."""

_ROLES = {
    MessageRole.SYSTEM: "system",
    MessageRole.DEVELOPER: "developer",
    MessageRole.USER: "user",
    MessageRole.ASSISTANT: "assistant",
    MessageRole.TOOL: "tool",
    MessageRole.FUNCTION: "tool",
    MessageRole.CHATBOT: "assistant",
    MessageRole.MODEL: "assistant",
}


def from_llama_index(message: ChatMessage, *, index: int = 0) -> Message:
    """The chat message a model sees of ``message``, its native dump in ``meta`` when needed.

    ``InvalidInput`` (naming ``index`` and the field) for what no model could
    take: a tool message without ``additional_kwargs["tool_call_id"]``, a tool
    call without an id, a user, system or tool message without any block.
    """
    if not isinstance(message, ChatMessage):
        raise InvalidInput(
            f"expected a llama_index ChatMessage, got {type(message).__name__}", index=index
        )
    plain = _plain(message, index)
    native = _native_of(message)
    if _native_of(to_llama_index(plain)) != native:
        plain["meta"] = {META_KEY: native}
    return validate_message(plain, index=index)


def to_llama_index(message: Mapping[str, Any], *, calls_in: CallsIn = "blocks") -> ChatMessage:
    """The ``ChatMessage`` of a logged or rendered chat message: the one it was made
    from when ``meta`` keeps it, else built from what a model sees, its tool calls
    where ``calls_in`` says."""
    try:
        return _built(message, calls_in)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        # Checked only when it cannot be built, so reading the log costs no validation.
        checked = validate_message(message)
        meta = checked.get("meta", {}).get(META_KEY)
        field = "content" if meta is None else f"meta.{META_KEY}"
        raise InvalidInput(f"cannot be a llama_index ChatMessage: {exc}", field=field) from None


def _built(message: Mapping[str, Any], calls_in: CallsIn) -> ChatMessage:
    meta = message.get("meta")
    if isinstance(meta, Mapping) and isinstance(meta.get(META_KEY), Mapping):
        return ChatMessage.model_validate(meta[META_KEY])
    extra: dict[str, Any] = {}
    if message.get("tool_call_id") is not None:
        extra["tool_call_id"] = message["tool_call_id"]
    if message.get("name") is not None:
        extra["name"] = message["name"]
    if message.get("refusal") is not None:
        extra["refusal"] = message["refusal"]
    blocks: list[ContentBlock] = list(_blocks_of(message.get("content")))
    calls = message.get("tool_calls") or []
    if calls and calls_in == "additional_kwargs":
        extra["tool_calls"] = [dict(call) for call in calls]
    else:
        for call in calls:
            function = call["function"]
            blocks.append(
                ToolCallBlock(
                    tool_call_id=call["id"],
                    tool_name=function["name"],
                    tool_kwargs=_arguments_of(function["arguments"]),
                )
            )
    return ChatMessage(role=MessageRole(message["role"]), blocks=blocks, additional_kwargs=extra)


def calls_in_of(message: ChatMessage) -> CallsIn | None:
    """Where ``message`` carries its tool calls; None when it has none."""
    if any(isinstance(block, ToolCallBlock) for block in message.blocks):
        return "blocks"
    if message.additional_kwargs.get("tool_calls"):
        return "additional_kwargs"
    return None


def stored_calls_in(message: Mapping[str, Any]) -> CallsIn | None:
    """Where the ``ChatMessage`` kept in a logged message's ``meta`` carried its tool
    calls, read from the dump without building it; None without one or without calls."""
    meta = message.get("meta")
    native = meta.get(META_KEY) if isinstance(meta, Mapping) else None
    if not isinstance(native, Mapping):
        return None
    if any(block.get("block_type") == "tool_call" for block in native.get("blocks") or []):
        return "blocks"
    if (native.get("additional_kwargs") or {}).get("tool_calls"):
        return "additional_kwargs"
    return None


def _native_of(message: ChatMessage) -> dict[str, Any]:
    dumped: dict[str, Any] = message.model_dump(mode="json")
    return dumped


def _plain(message: ChatMessage, index: int) -> Message:
    role = _ROLES.get(message.role)
    if role is None:
        raise InvalidInput(f"unknown role {message.role!r}", index=index, field="role")
    user = role == "user"
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for block in message.blocks:
        if isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ToolCallBlock):
            calls.append(_call(block.tool_call_id, block.tool_name, block.tool_kwargs, index))
        elif isinstance(block, ThinkingBlock):
            continue  # the model's own reasoning: kept in meta, never re-sent as text
        elif user and isinstance(block, ImageBlock):
            image_url: dict[str, Any] = {"url": _image_url(block)}
            if block.detail is not None:
                image_url["detail"] = block.detail
            parts.append({"type": "image_url", "image_url": image_url})
        elif user and isinstance(block, AudioBlock):
            data = block.resolve_audio(as_base64=True).read().decode("ascii")
            parts.append(
                {
                    "type": "input_audio",
                    "input_audio": {"data": data, "format": block.format or "wav"},
                }
            )
        elif user and isinstance(block, DocumentBlock):
            parts.append(
                {"type": "file", "file": {"file_data": block.inline_url(), "filename": block.title}}
            )
        elif block.block_type in ("image", "audio", "video", "document"):
            parts.append({"type": "text", "text": f"[{block.block_type}]"})
    if not calls:
        calls = [
            _openai_call(raw, index) for raw in message.additional_kwargs.get("tool_calls") or []
        ]
    if not parts and not calls and role != "assistant":
        raise InvalidInput(
            f"a {role} message needs content: it has no text, media or file block",
            index=index,
            field="content",
        )
    plain: Message = {"role": role}
    if len(parts) == 1 and parts[0]["type"] == "text":
        plain["content"] = parts[0]["text"]
    elif parts:
        plain["content"] = parts
    else:
        plain["content"] = None if role == "assistant" and calls else ""
    if calls:
        plain["tool_calls"] = calls
    kwargs = message.additional_kwargs
    if role == "tool":
        call_id = kwargs.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidInput(
                "a tool message needs additional_kwargs['tool_call_id']",
                index=index,
                field="tool_call_id",
            )
        plain["tool_call_id"] = call_id
    if isinstance(kwargs.get("name"), str) and kwargs["name"]:
        plain["name"] = kwargs["name"]
    if role == "assistant" and isinstance(kwargs.get("refusal"), str):
        plain["refusal"] = kwargs["refusal"]
    return plain


def _call(call_id: str | None, name: str, arguments: Any, index: int) -> dict[str, Any]:
    if not call_id:
        raise InvalidInput(
            f"tool call {name!r} has no id", index=index, field="blocks.tool_call_id"
        )
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def _openai_call(raw: Any, index: int) -> dict[str, Any]:
    """An OpenAI-style tool call from ``additional_kwargs`` (a dict or the SDK's object)."""
    call = raw.model_dump() if hasattr(raw, "model_dump") else raw
    if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
        raise InvalidInput(
            "additional_kwargs['tool_calls'] holds OpenAI tool calls",
            index=index,
            field="additional_kwargs.tool_calls",
        )
    function = call["function"]
    return _call(call.get("id"), function.get("name"), function.get("arguments", ""), index)


def _arguments_of(text: str) -> dict[str, Any] | str:
    """A call's arguments as LlamaIndex keeps them: the object when they parse as one."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    return parsed if isinstance(parsed, dict) else text


def _image_url(block: ImageBlock) -> str:
    if block.url is not None and block.image is None:
        return str(block.url)
    return block.inline_url()


def _blocks_of(content: Any) -> list[ContentBlock]:
    if content is None:
        return []
    if isinstance(content, str):
        return [TextBlock(text=content)]
    blocks: list[ContentBlock] = []
    for part in content:
        kind = part["type"]
        if kind == "text":
            blocks.append(TextBlock(text=part["text"]))
        elif kind == "refusal":
            blocks.append(TextBlock(text=part["refusal"]))
        elif kind == "image_url":
            url = part["image_url"]["url"]
            detail = part["image_url"].get("detail")
            mime, data = _data_url(url)
            if data is None:
                blocks.append(ImageBlock(url=url, detail=detail))
            else:
                blocks.append(ImageBlock(image=data, image_mimetype=mime, detail=detail))
        elif kind == "input_audio":
            audio = part["input_audio"]
            blocks.append(
                AudioBlock(audio=base64.b64decode(audio["data"]), format=audio.get("format"))
            )
        elif kind == "file":
            file = part["file"]
            mime, data = _data_url(file.get("file_data") or "")
            blocks.append(
                DocumentBlock(data=data, title=file.get("filename"), document_mimetype=mime)
            )
    return blocks


def _data_url(url: str) -> tuple[str | None, bytes | None]:
    """The media type and base64 bytes of a ``data:`` URL; (None, None) for any other URL."""
    if not url.startswith("data:") or ";base64," not in url:
        return None, None
    head, data = url[len("data:") :].split(";base64,", 1)
    return head or None, data.encode("ascii")
