"""Messages in OpenAI chat format, the native format of contextfold.

A message is a plain ``dict`` (``Message``): ``role`` (system, user, assistant,
tool), ``content`` (a string, a list of parts, or ``None`` beside tool calls),
optional ``name``, ``tool_calls``, ``tool_call_id`` and a free ``meta`` dict that
is stored but never sent to a model. Validation refuses a whole batch before
anything is stored, naming the index and field at fault.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from contextfold.core.errors import InvalidInput

Message = dict[str, Any]

ROLES = frozenset({"system", "user", "assistant", "tool", "developer"})
_KEYS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id", "meta", "refusal"})


def validate_messages(
    messages: Sequence[Mapping[str, Any]],
    *,
    open_calls: Iterable[str] = (),
    offset: int = 0,
) -> list[Message]:
    """Check a batch and return normalised copies.

    ``open_calls`` are tool-call ids already in the log, so a tool result may
    answer a call appended earlier; ``offset`` shifts the index in errors.
    A tool result answers the nearest earlier call with its id, so ids reused
    across turns (as real agent logs do) are accepted.
    """
    known = set(open_calls)
    out: list[Message] = []
    for i, raw in enumerate(messages):
        idx = i + offset
        msg = validate_message(raw, index=idx)
        if msg["role"] == "assistant":
            for call in msg.get("tool_calls") or ():
                known.add(call["id"])
        elif msg["role"] == "tool" and msg["tool_call_id"] not in known:
            raise InvalidInput(
                f"tool result answers id {msg['tool_call_id']!r}, which no earlier "
                "assistant message called",
                index=idx,
                field="tool_call_id",
            )
        out.append(msg)
    return out


def validate_message(raw: Mapping[str, Any], *, index: int = 0) -> Message:
    """Check one message on its own (tool-call ids are checked by the batch)."""
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"expected an object, got {type(raw).__name__}", index=index)
    role = raw.get("role")
    if role not in ROLES:
        raise InvalidInput(
            f"unknown role {role!r} (expected one of {', '.join(sorted(ROLES))})",
            index=index,
            field="role",
        )
    extra = set(raw) - _KEYS
    if extra:
        raise InvalidInput(f"unknown keys {sorted(extra)}", index=index, field=sorted(extra)[0])
    msg: Message = {"role": role}
    content = raw.get("content")
    calls = raw.get("tool_calls")
    # Only user messages may carry images or other media: OpenAI takes text
    # alone from system, developer, assistant and tool messages.
    text_only = role != "user"
    if role == "assistant" and calls is not None and calls != []:
        if content is not None:
            msg["content"] = _check_content(content, index, text_only=text_only)
        else:
            msg["content"] = None
        msg["tool_calls"] = _check_tool_calls(calls, index)
    else:
        if calls is not None and calls != []:
            raise InvalidInput(
                "only assistant messages carry tool calls", index=index, field="tool_calls"
            )
        if content is None:
            raise InvalidInput("content is required", index=index, field="content")
        msg["content"] = _check_content(content, index, text_only=text_only)
    if role == "tool":
        call_id = raw.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidInput(
                "tool message needs a tool_call_id string", index=index, field="tool_call_id"
            )
        msg["tool_call_id"] = call_id
    elif raw.get("tool_call_id") is not None:
        raise InvalidInput(
            "only tool messages carry tool_call_id", index=index, field="tool_call_id"
        )
    name = raw.get("name")
    if name is not None:
        if not isinstance(name, str):
            raise InvalidInput("name must be a string", index=index, field="name")
        msg["name"] = name
    meta = raw.get("meta")
    if meta is not None:
        if not isinstance(meta, Mapping):
            raise InvalidInput("meta must be an object", index=index, field="meta")
        msg["meta"] = dict(meta)
    if raw.get("refusal") is not None:
        msg["refusal"] = raw["refusal"]
    return msg


def _check_content(content: Any, index: int, *, text_only: bool) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidInput(
            f"content must be a string or a list of parts, got {type(content).__name__}",
            index=index,
            field="content",
        )
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
            raise InvalidInput("each part needs a 'type'", index=index, field=f"content[{j}].type")
        if part["type"] == "text":
            if not isinstance(part.get("text"), str):
                raise InvalidInput(
                    "text part needs a 'text' string", index=index, field=f"content[{j}].text"
                )
        elif text_only:
            raise InvalidInput(
                f"part of type {part['type']!r} where only text is allowed",
                index=index,
                field=f"content[{j}].type",
            )
        parts.append(dict(part))
    return parts


def _check_tool_calls(calls: Any, index: int) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise InvalidInput("tool_calls must be a list", index=index, field="tool_calls")
    out: list[dict[str, Any]] = []
    for j, call in enumerate(calls):
        where = f"tool_calls[{j}]"
        if not isinstance(call, Mapping):
            raise InvalidInput("tool call must be an object", index=index, field=where)
        if not isinstance(call.get("id"), str) or not call["id"]:
            raise InvalidInput("tool call needs an 'id' string", index=index, field=f"{where}.id")
        if call.get("type", "function") != "function":
            raise InvalidInput(
                "tool call type must be 'function'", index=index, field=f"{where}.type"
            )
        fn = call.get("function")
        if not isinstance(fn, Mapping):
            raise InvalidInput(
                "tool call needs a 'function' object", index=index, field=f"{where}.function"
            )
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise InvalidInput(
                "function needs a 'name'", index=index, field=f"{where}.function.name"
            )
        args = fn.get("arguments", "")
        if not isinstance(args, str):
            raise InvalidInput(
                "function arguments must be a JSON string",
                index=index,
                field=f"{where}.function.arguments",
            )
        out.append(
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": fn["name"], "arguments": args},
            }
        )
    return out


def text_of(message: Mapping[str, Any]) -> str:
    """The text a reader sees in a message: content text, then tool calls."""
    content = message.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = "\n".join(p.get("text", "") for p in content if p.get("type") == "text")
    else:
        text = ""
    calls = message.get("tool_calls")
    if calls:
        rendered = [f"{c['function']['name']}({c['function']['arguments']})" for c in calls]
        text = "\n".join([text, *rendered]) if text else "\n".join(rendered)
    return text


def for_model(message: Mapping[str, Any]) -> Message:
    """A copy without ``meta``: what a provider is sent."""
    return {k: v for k, v in message.items() if k != "meta"}


def load_messages(data: Any, *, source: str = "input") -> list[Message]:
    """Accept a list of messages or an object with a ``messages`` list."""
    if isinstance(data, Mapping):
        data = data.get("messages")
    if not isinstance(data, list):
        raise InvalidInput(f"{source}: expected a list of messages or an object with 'messages'")
    return validate_messages(data)


def dumps(message: Mapping[str, Any]) -> str:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))
