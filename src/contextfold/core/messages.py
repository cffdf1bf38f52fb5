"""Messages in OpenAI chat format, the native format of contextfold.

A message is a plain ``dict`` (``Message``): ``role`` (system, user, assistant,
tool), ``content`` (a string, a list of parts, or ``None`` beside tool calls),
optional ``name``, ``tool_calls``, ``tool_call_id`` and a free ``meta`` dict that
is stored but never sent to a model. Validation refuses a whole batch before
anything is stored, naming the index and field at fault; it is the one place
input is checked, so every store keeps the same messages and refuses the same.

Every string must be encodable as UTF-8 (no lone surrogates) and ``meta`` must
be JSON (string keys, finite numbers), so what one store keeps another can too.
What may follow what (a tool result after its call, once) is the rule of
``contextfold.core.order``, which every store applies inside its write.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.order import Tail, first_violation

Message = dict[str, Any]

ROLES = frozenset({"system", "user", "assistant", "tool", "developer"})
_KEYS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id", "meta", "refusal"})
# OpenAI's content part types and their keys: user parts, and the assistant's refusal part.
_USER_PARTS: dict[str, frozenset[str]] = {
    "text": frozenset({"type", "text"}),
    "image_url": frozenset({"type", "image_url"}),
    "input_audio": frozenset({"type", "input_audio"}),
    "file": frozenset({"type", "file"}),
}
_PART_BODIES: dict[str, dict[str, type]] = {
    "image_url": {"url": str},
    "input_audio": {"data": str, "format": str},
}
_MAX_DEPTH = 64
_BIG = 10**18  # integers within this print without reaching Python's digit limit


def validate_messages(
    messages: Sequence[Mapping[str, Any]],
    *,
    open_calls: Iterable[str] = (),
    offset: int = 0,
    called: Iterable[str] = (),
) -> list[Message]:
    """Check a batch and return normalised copies.

    Each message is checked on its own, then their order by the rule every
    store applies (``contextfold.core.order``): ``open_calls`` are the ids of
    the call the log ends with that no result has answered yet, so the batch
    may go on answering it; ``called`` are ids called anywhere in the log, only
    to say why a late result is refused. ``offset`` shifts the index in errors.
    Ids may be reused across turns, as real agent logs do.
    """
    out = [validate_message(raw, index=i + offset) for i, raw in enumerate(messages)]
    tail = Tail(offset, frozenset(open_calls), frozenset(called))
    violation = first_violation(tail, out)
    if violation is not None:
        raise violation
    return out


def validate_message(raw: Mapping[str, Any], *, index: int = 0) -> Message:
    """Check one message on its own (tool-call ids are checked by the batch)."""
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"expected an object, got {type(raw).__name__}", index=index)
    role = raw.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise InvalidInput(
            f"unknown role {role!r} (expected one of {', '.join(sorted(ROLES))})",
            index=index,
            field="role",
        )
    extra = sorted(str(k) for k in set(raw) - _KEYS)
    if extra:
        raise InvalidInput(f"unknown keys {extra}", index=index, field=extra[0])
    msg: Message = {"role": role}
    content = raw.get("content")
    calls = raw.get("tool_calls")
    # Only user messages may carry images or other media: OpenAI takes text
    # alone from system, developer, assistant and tool messages.
    text_only = role != "user"
    if role == "assistant" and calls is not None and calls != []:
        if content is not None:
            msg["content"] = _check_content(
                content, index, text_only=text_only, refusal=role == "assistant"
            )
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
        msg["content"] = _check_content(
            content, index, text_only=text_only, refusal=role == "assistant"
        )
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
        if not isinstance(name, str) or not name:
            raise InvalidInput("name must be a non-empty string", index=index, field="name")
        msg["name"] = name
    refusal = raw.get("refusal")
    if refusal is not None:
        if role != "assistant" or not isinstance(refusal, str):
            raise InvalidInput(
                "refusal is a string, on assistant messages only", index=index, field="refusal"
            )
        msg["refusal"] = refusal
    for field, value in msg.items():
        if field != "role":
            check_json(value, field, index=index)
    meta = raw.get("meta")
    if meta is not None:
        if not isinstance(meta, Mapping):
            raise InvalidInput("meta must be an object", index=index, field="meta")
        msg["meta"] = check_json(meta, "meta", index=index)
    return msg


def check_json(value: Any, field: str, *, index: int | None = None) -> Any:
    """``value`` as plain JSON data (a fresh copy), or ``InvalidInput`` naming the field.

    Refused: strings that are not UTF-8 (lone surrogates), keys that are not
    strings, NaN and infinities, integers too long to print, nesting deeper
    than 64 and any other type. Tuples become lists, as JSON would make them.
    """
    try:
        return _plain(value, 0)
    except _NotJSON as exc:
        where = field + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.path[::-1])
        raise InvalidInput(exc.reason, index=index, field=where) from None


class _NotJSON(Exception):
    """Raised deep in ``_plain``; each level adds its key on the way out."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.path: list[str | int] = []


def _plain(value: Any, depth: int) -> Any:
    kind = type(value)
    if kind is str:
        if not value.isascii():
            _check_utf8(value)
        return value
    if value is None or kind is bool or (kind is int and -_BIG < value < _BIG):
        return value
    if kind is float and math.isfinite(value):
        return value
    if depth >= _MAX_DEPTH:
        raise _NotJSON(f"nested deeper than {_MAX_DEPTH} levels")
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise _NotJSON(f"key {key!r} is not a string")
            try:
                out[_plain(key, depth)] = _plain(item, depth + 1)
            except _NotJSON as exc:
                exc.path.append(key)
                raise
        return out
    if isinstance(value, list | tuple):
        items = []
        for j, item in enumerate(value):
            try:
                items.append(_plain(item, depth + 1))
            except _NotJSON as exc:
                exc.path.append(j)
                raise
        return items
    if isinstance(value, str):
        _check_utf8(value)
        return str(value)
    if isinstance(value, int):
        try:
            str(value)
        except ValueError:
            raise _NotJSON("integer too long") from None
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _NotJSON(f"{value} is not JSON")
        return float(value)
    raise _NotJSON(f"{type(value).__name__} is not JSON")


def _check_utf8(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _NotJSON(
            f"not UTF-8 text: lone surrogate {text[exc.start]!r} at character {exc.start}"
        ) from None


def _check_content(
    content: Any, index: int, *, text_only: bool, refusal: bool = False
) -> str | list[dict[str, Any]]:
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
        where = f"content[{j}]"
        if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
            raise InvalidInput("each part needs a 'type'", index=index, field=f"{where}.type")
        kind = part["type"]
        if kind == "refusal" and refusal:
            keys, bodies = frozenset({"type", "refusal"}), {"refusal": str}
        elif kind == "text" or (kind in _USER_PARTS and not text_only):
            keys, bodies = _USER_PARTS[kind], {"text": str}
        else:
            allowed = "text" if text_only else ", ".join(sorted(_USER_PARTS))
            if refusal:
                allowed += ", refusal"
            raise InvalidInput(
                f"part of type {kind!r} is not allowed here (allowed: {allowed})",
                index=index,
                field=f"{where}.type",
            )
        extra = sorted(str(k) for k in set(part) - keys)
        if extra:
            raise InvalidInput(
                f"unknown keys {extra} in a {kind!r} part", index=index, field=f"{where}.{extra[0]}"
            )
        body = part.get(kind)
        if kind in bodies and not isinstance(body, str):
            raise InvalidInput(
                f"{kind} part needs a '{kind}' string", index=index, field=f"{where}.{kind}"
            )
        if kind not in bodies:
            _check_part_body(kind, body, index, f"{where}.{kind}")
        parts.append(check_json(part, where, index=index))
    return parts


def _check_part_body(kind: str, body: Any, index: int, where: str) -> None:
    """The object inside a media part: its required string fields."""
    if not isinstance(body, Mapping):
        raise InvalidInput(f"{kind} part needs a '{kind}' object", index=index, field=where)
    for key, kind_of in _PART_BODIES.get(kind, {}).items():
        if not isinstance(body.get(key), kind_of):
            raise InvalidInput(
                f"{kind} needs a '{key}' string", index=index, field=f"{where}.{key}"
            )
    if kind == "file" and not any(isinstance(body.get(k), str) for k in ("file_data", "file_id")):
        raise InvalidInput("file needs 'file_data' or 'file_id'", index=index, field=where)


def _check_tool_calls(calls: Any, index: int) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise InvalidInput("tool_calls must be a list", index=index, field="tool_calls")
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for j, call in enumerate(calls):
        where = f"tool_calls[{j}]"
        if not isinstance(call, Mapping):
            raise InvalidInput("tool call must be an object", index=index, field=where)
        if not isinstance(call.get("id"), str) or not call["id"]:
            raise InvalidInput("tool call needs an 'id' string", index=index, field=f"{where}.id")
        if call["id"] in seen:
            raise InvalidInput(
                f"id {call['id']!r} is used twice in one message", index=index, field=f"{where}.id"
            )
        seen.add(call["id"])
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
