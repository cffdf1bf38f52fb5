"""Reading an Anthropic Messages conversation as contextfold's (OpenAI chat) messages.

The inverse of ``to_anthropic``'s rules (``formats.anthropic``): text blocks
become a content string, ``tool_use`` blocks ``tool_calls``, each
``tool_result`` block a tool message (named after its call), and
``is_error`` the tool message's ``meta["is_error"]``. Reasoning blocks
(``thinking``, ``redacted_thinking``) have nowhere to go in the OpenAI chat
format and are dropped; any other block a role cannot hold is refused, naming
the index and field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message
from contextfold.formats.anthropic import PART_JOIN

_DROPPED_BLOCKS = frozenset({"thinking", "redacted_thinking"})


def from_anthropic(
    system: str | Sequence[Mapping[str, Any]] | None,
    messages: Sequence[Mapping[str, Any]],
) -> list[Message]:
    """Anthropic ``(system, messages)`` as OpenAI chat messages.

    Text blocks become a content string, ``tool_use`` blocks ``tool_calls``
    and each ``tool_result`` block a tool message. Errors name the index and
    field in the Anthropic input.
    """
    head, turns = from_anthropic_turns(system, messages)
    return [*head, *(message for turn in turns for message in turn)]


def from_anthropic_turns(
    system: str | Sequence[Mapping[str, Any]] | None,
    messages: Sequence[Mapping[str, Any]],
) -> tuple[list[Message], list[list[Message]]]:
    """As ``from_anthropic``, the system message (if any) apart and each turn's messages
    apart: a user turn of tool results and text is several messages."""
    head: list[Message] = []
    system_text = _system_text(system)
    if system_text:
        head.append({"role": "system", "content": system_text})
    turns: list[list[Message]] = []
    names: dict[str, str] = {}
    for index, raw in enumerate(messages):
        if not isinstance(raw, Mapping):
            raise InvalidInput(f"expected an object, got {type(raw).__name__}", index=index)
        role = raw.get("role")
        if role not in ("user", "assistant"):
            raise InvalidInput(
                f"unknown role {role!r} (expected assistant or user)", index=index, field="role"
            )
        content = raw.get("content")
        if isinstance(content, str):
            turns.append([{"role": role, "content": content}])
        elif not isinstance(content, list):
            raise InvalidInput(
                "content must be a string or a list of blocks", index=index, field="content"
            )
        elif role == "assistant":
            turns.append([_assistant(content, index, names)])
        else:
            turns.append(_user(content, index, names))
    return head, turns


def _system_text(system: str | Sequence[Mapping[str, Any]] | None) -> str:
    if system is None or isinstance(system, str):
        return system or ""
    texts: list[str] = []
    for j, block in enumerate(system):
        if not isinstance(block, Mapping) or block.get("type") != "text":
            raise InvalidInput("system blocks must be text", field=f"system[{j}].type")
        texts.append(_block_text(block, None, f"system[{j}].text"))
    return PART_JOIN.join(texts)


def _block_text(block: Mapping[str, Any], index: int | None, field: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise InvalidInput("text block needs a 'text' string", index=index, field=field)
    return text


def _block_type(block: Any, index: int, j: int) -> str:
    if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
        raise InvalidInput("each block needs a 'type'", index=index, field=f"content[{j}].type")
    return str(block["type"])


def _assistant(content: list[Any], index: int, names: dict[str, str]) -> Message:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        kind = _block_type(block, index, j)
        if kind == "text":
            texts.append(_block_text(block, index, f"content[{j}].text"))
        elif kind == "tool_use":
            call_id, name = block.get("id"), block.get("name")
            if not isinstance(call_id, str) or not call_id:
                raise InvalidInput("tool_use needs an 'id'", index=index, field=f"content[{j}].id")
            if not isinstance(name, str) or not name:
                raise InvalidInput(
                    "tool_use needs a 'name'", index=index, field=f"content[{j}].name"
                )
            arguments = json.dumps(block.get("input", {}), ensure_ascii=False)
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            )
            names[call_id] = name
        elif kind not in _DROPPED_BLOCKS:
            raise InvalidInput(
                f"block of type {kind!r} cannot be an OpenAI assistant message",
                index=index,
                field=f"content[{j}].type",
            )
    msg: Message = {
        "role": "assistant",
        "content": PART_JOIN.join(texts) if texts or not calls else None,
    }
    if calls:
        msg["tool_calls"] = calls
    return msg


def _user(content: list[Any], index: int, names: dict[str, str]) -> list[Message]:
    out: list[Message] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        kind = _block_type(block, index, j)
        if kind == "text":
            parts.append({"type": "text", "text": _block_text(block, index, f"content[{j}].text")})
        elif kind == "image":
            parts.append(_image_part(block, index, j))
        elif kind == "tool_result":
            out.extend(_user_message(parts))
            parts = []
            out.append(_tool_message(block, index, j, names))
        else:
            raise InvalidInput(
                f"block of type {kind!r} cannot be an OpenAI user message",
                index=index,
                field=f"content[{j}].type",
            )
    out.extend(_user_message(parts))
    return out


def _user_message(parts: list[dict[str, Any]]) -> list[Message]:
    if not parts:
        return []
    if all(p["type"] == "text" for p in parts):
        return [{"role": "user", "content": PART_JOIN.join(p["text"] for p in parts)}]
    return [{"role": "user", "content": parts}]


def _image_part(block: Mapping[str, Any], index: int, j: int) -> dict[str, Any]:
    source = block.get("source")
    kind = source.get("type") if isinstance(source, Mapping) else None
    if kind == "url" and isinstance(source, Mapping) and isinstance(source.get("url"), str):
        url = source["url"]
    elif kind == "base64" and isinstance(source, Mapping):
        media_type, data = source.get("media_type"), source.get("data")
        if not isinstance(media_type, str) or not isinstance(data, str):
            raise InvalidInput(
                "base64 image needs 'media_type' and 'data' strings",
                index=index,
                field=f"content[{j}].source",
            )
        url = f"data:{media_type};base64,{data}"
    else:
        raise InvalidInput(
            "image source must be a url or base64 source", index=index, field=f"content[{j}].source"
        )
    return {"type": "image_url", "image_url": {"url": url}}


def _tool_message(block: Mapping[str, Any], index: int, j: int, names: dict[str, str]) -> Message:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or call_id not in names:
        raise InvalidInput(
            f"tool_result answers id {call_id!r}, which no earlier tool_use called",
            index=index,
            field=f"content[{j}].tool_use_id",
        )
    content = block.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    elif isinstance(content, list):
        texts: list[str] = []
        for k, inner in enumerate(content):
            where = f"content[{j}].content[{k}]"
            if not isinstance(inner, Mapping) or inner.get("type") != "text":
                raise InvalidInput(
                    "an OpenAI tool message holds text only", index=index, field=f"{where}.type"
                )
            texts.append(_block_text(inner, index, f"{where}.text"))
        text = PART_JOIN.join(texts)
    else:
        raise InvalidInput(
            "tool_result content must be a string or a list of text blocks",
            index=index,
            field=f"content[{j}].content",
        )
    msg: Message = {
        "role": "tool",
        "tool_call_id": call_id,
        "name": names[call_id],
        "content": text,
    }
    if block.get("is_error") is True:
        msg["meta"] = {"is_error": True}
    return msg
