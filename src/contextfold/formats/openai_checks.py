"""What OpenAI Chat Completions refuses in a prompt, found before it is sent.

The rules are the ones OpenAI documents and its 400 errors state
(docs/reference/prompts.md lists them): roles, the keys each role takes,
content and part types, names, tool-call shape, and every call answered by the
tool messages right after it. contextfold's own messages are this format, so
there is no converter here, only the checks.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.formats.fault import PromptFault, pairing_faults

_KEYS = {
    "system": frozenset({"role", "content", "name"}),
    "developer": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset(
        {"role", "content", "name", "tool_calls", "function_call", "refusal", "audio"}
    ),
    # OpenAI's own function-calling examples send the tool's name with its result.
    "tool": frozenset({"role", "content", "tool_call_id", "name"}),
}
_PARTS = {
    "system": frozenset({"text"}),
    "developer": frozenset({"text"}),
    "user": frozenset({"text", "image_url", "input_audio", "file"}),
    "assistant": frozenset({"text", "refusal"}),
    "tool": frozenset({"text"}),
}
_NAME = re.compile(r"[a-zA-Z0-9_-]+")


def openai_faults(messages: Sequence[Any], system: Any = None) -> Iterator[PromptFault]:
    """Every fault OpenAI would refuse ``messages`` for; it takes no ``system`` apart."""
    if system is not None:
        raise InvalidInput("OpenAI takes its system prompt as a message, not apart", field="system")
    if not messages:
        yield PromptFault(None, "messages", "a request needs at least one message")
    for i, msg in enumerate(messages):
        if not isinstance(msg, Mapping):
            yield PromptFault(i, None, "a message must be an object")
            continue
        role = msg.get("role")
        if role not in _KEYS:
            yield PromptFault(i, "role", f"unknown role {role!r}")
            continue
        for key in sorted(set(msg) - _KEYS[role], key=str):
            yield PromptFault(i, str(key), f"a {role} message takes no {key!r}")
        yield from _content(i, role, msg)
        name = msg.get("name")
        if name is not None and not (isinstance(name, str) and _NAME.fullmatch(name)):
            yield PromptFault(i, "name", f"name {name!r} must match ^[a-zA-Z0-9_-]+$")
        if role == "assistant" and "tool_calls" in msg:
            yield from _calls(i, msg["tool_calls"])
        if role == "tool" and not (
            isinstance(msg.get("tool_call_id"), str) and msg["tool_call_id"]
        ):
            yield PromptFault(i, "tool_call_id", "a tool message needs a tool_call_id string")
        refusal = msg.get("refusal")
        if refusal is not None and not isinstance(refusal, str):
            yield PromptFault(i, "refusal", "refusal must be a string")
    shaped = [_shape(m) for m in messages]
    fields = {"assistant": "tool_calls", "tool": "tool_call_id"}
    yield from pairing_faults(
        shaped, [(i, fields.get(str(m["role"]))) for i, m in enumerate(shaped)]
    )


def _content(i: int, role: str, msg: Mapping[str, Any]) -> Iterator[PromptFault]:
    content = msg.get("content")
    if content is None:
        if role != "assistant" or not (msg.get("tool_calls") or msg.get("function_call")):
            yield PromptFault(i, "content", f"a {role} message needs content")
        return
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        yield PromptFault(i, "content", "content must be a string or a list of parts")
        return
    if not content:
        yield PromptFault(i, "content", "a list of parts must not be empty")
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        where = f"content[{j}]"
        if kind not in _PARTS[role]:
            yield PromptFault(i, f"{where}.type", f"a {role} message takes no part {kind!r}")
        elif kind in ("text", "refusal") and not isinstance(part.get(kind), str):
            yield PromptFault(i, f"{where}.{kind}", f"a {kind} part needs a {kind!r} string")
        elif kind == "image_url" and not _image_url(part.get("image_url")):
            yield PromptFault(i, f"{where}.image_url", "an image part needs {'url': <string>}")


def _image_url(ref: Any) -> bool:
    return isinstance(ref, Mapping) and isinstance(ref.get("url"), str) and bool(ref["url"])


def _calls(i: int, calls: Any) -> Iterator[PromptFault]:
    if not isinstance(calls, list) or not calls:
        yield PromptFault(i, "tool_calls", "tool_calls must be a non-empty list")
        return
    for j, call in enumerate(calls):
        where = f"tool_calls[{j}]"
        if not isinstance(call, Mapping):
            yield PromptFault(i, where, "a tool call must be an object")
            continue
        if not isinstance(call.get("id"), str) or not call["id"]:
            yield PromptFault(i, f"{where}.id", "a tool call needs an id string")
        if call.get("type") != "function":
            yield PromptFault(i, f"{where}.type", "a tool call's type must be 'function'")
        fn = call.get("function")
        if not isinstance(fn, Mapping):
            yield PromptFault(i, f"{where}.function", "a tool call needs a function object")
            continue
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            yield PromptFault(i, f"{where}.function.name", "a function needs a name")
        if not isinstance(fn.get("arguments"), str):
            yield PromptFault(
                i, f"{where}.function.arguments", "function arguments must be a JSON string"
            )


def _shape(msg: Any) -> dict[str, Any]:
    """The fields pairing reads, from a message however malformed."""
    if not isinstance(msg, Mapping):
        return {"role": None}
    calls = msg.get("tool_calls") if msg.get("role") == "assistant" else None
    listed = calls if isinstance(calls, list) else []
    ids = [c.get("id") for c in listed if isinstance(c, Mapping)]
    return {
        "role": msg.get("role"),
        "tool_calls": [{"id": str(c)} for c in ids],
        "tool_call_id": msg.get("tool_call_id"),
    }
