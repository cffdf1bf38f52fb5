"""Converters to and from the Anthropic Messages format.

contextfold keeps OpenAI chat messages; Anthropic wants a different shape, and
each rule below exists because its API refuses the plain translation:

- The system prompt is a parameter, not a turn. Leading system (and developer)
  messages are joined into it; one in mid-conversation becomes user text.
- Tool calls are ``tool_use`` blocks in the assistant turn, with ``input`` a
  JSON object; results are ``tool_result`` blocks in the user turn after it,
  placed before any text of that turn.
- Roles must alternate, so consecutive messages of one role are merged.
- The first turn must be a user turn. When the prompt opens with an assistant
  turn (a ``[GOAL BATCH]`` or ``[SUMMARIZED]`` fold, or a chat the other
  party began), or has no turn at all, a user turn reading
  ``LEADING_USER_TEXT`` is put first.
- ``tool_use`` ids must be unique in a request and match ``[A-Za-z0-9_-]+``.
  Real logs reuse ids across turns, so a reused or ill-formed id gets a fresh
  one, and each result follows the nearest earlier call with its old id.
- Text blocks must hold some non-whitespace text: empty or blank text is
  dropped, and so is a message left with no block at all.
- A final assistant turn is a prefill and must not end with whitespace: its
  last text is stripped on the right.

``meta`` is never sent and ``name`` has no Anthropic equivalent; both are
dropped, except that ``meta["is_error"]`` on a tool message becomes the
``is_error`` flag of its ``tool_result``, and back again. An assistant's
refusal part is sent as text, and its ``refusal`` field too when it has no
text of its own.

What comes out passes ``prompt_check.prompt_faults(..., "anthropic")``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message, validate_messages

Block = dict[str, Any]

_SYSTEM_ROLES = ("system", "developer")
_ID_CHARS = re.compile(r"[^A-Za-z0-9_-]")
# Anthropic's reasoning blocks: OpenAI chat format has nowhere to keep them.
_DROPPED_BLOCKS = frozenset({"thinking", "redacted_thinking"})
_JOIN = "\n"  # as ``text_of`` joins text parts, so a round trip keeps the text
LEADING_USER_TEXT = "[contextfold: the conversation so far]"
"""The user turn put first when a prompt would open with an assistant turn."""


def to_anthropic(
    messages: Sequence[Mapping[str, Any]],
) -> tuple[str | None, list[dict[str, Any]]]:
    """OpenAI messages as ``(system, messages)`` for Anthropic's Messages API.

    The input is validated first, so a bad message fails here naming its
    index and field rather than as a provider's HTTP 400.
    """
    msgs = validate_messages(messages)
    first = 0
    system: list[str] = []
    while first < len(msgs) and msgs[first]["role"] in _SYSTEM_ROLES:
        text = _plain_text(msgs[first]["content"])
        if text.strip():
            system.append(text)
        first += 1
    ids = _CallIds()
    turns: list[dict[str, Any]] = []
    for index in range(first, len(msgs)):
        msg = msgs[index]
        role = msg["role"]
        if role == "tool":
            _add(turns, "user", [_tool_result(msg, ids)])
        elif role == "assistant":
            blocks = _content_blocks(msg["content"], index)
            if not blocks and isinstance(msg.get("refusal"), str):
                blocks = _content_blocks(msg["refusal"], index)
            blocks += [
                _tool_use(call, index, j, ids) for j, call in enumerate(msg.get("tool_calls") or ())
            ]
            _add(turns, "assistant", blocks)
        else:
            _add(turns, "user", _content_blocks(msg["content"], index))
    for turn in turns:
        if turn["role"] == "user":
            turn["content"].sort(key=lambda block: block["type"] != "tool_result")
    if turns and turns[-1]["role"] == "assistant" and turns[-1]["content"][-1]["type"] == "text":
        last = turns[-1]["content"][-1]
        last["text"] = last["text"].rstrip()
    if not turns or turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": LEADING_USER_TEXT}]})
    return ("\n\n".join(system) or None), turns


def from_anthropic(
    system: str | Sequence[Mapping[str, Any]] | None,
    messages: Sequence[Mapping[str, Any]],
) -> list[Message]:
    """Anthropic ``(system, messages)`` as OpenAI chat messages.

    Text blocks become a content string, ``tool_use`` blocks ``tool_calls``
    and each ``tool_result`` block a tool message. Errors name the index and
    field in the Anthropic input.
    """
    out: list[Message] = []
    system_text = _system_text(system)
    if system_text:
        out.append({"role": "system", "content": system_text})
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
            out.append({"role": role, "content": content})
        elif not isinstance(content, list):
            raise InvalidInput(
                "content must be a string or a list of blocks", index=index, field="content"
            )
        elif role == "assistant":
            out.append(_assistant(content, index, names))
        else:
            out.extend(_user(content, index, names))
    return out


class _CallIds:
    """Unique Anthropic ids for OpenAI call ids, which real logs reuse."""

    def __init__(self) -> None:
        self._used: set[str] = set()
        self._latest: dict[str, str] = {}

    def call(self, call_id: str) -> str:
        base = _ID_CHARS.sub("_", call_id)
        new, n = base, 1
        while new in self._used:
            n += 1
            new = f"{base}_{n}"
        self._used.add(new)
        self._latest[call_id] = new
        return new

    def result(self, call_id: str) -> str:
        # Validation has checked that an earlier call holds this id.
        return self._latest[call_id]


def _add(turns: list[dict[str, Any]], role: str, blocks: list[Block]) -> None:
    if not blocks:
        return
    if turns and turns[-1]["role"] == role:
        turns[-1]["content"].extend(blocks)
    else:
        turns.append({"role": role, "content": blocks})


def _plain_text(content: str | list[dict[str, Any]]) -> str:
    if isinstance(content, str):
        return content
    return _JOIN.join(part["text"] for part in content if part["text"])


def _content_blocks(content: str | list[dict[str, Any]] | None, index: int) -> list[Block]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content.strip() else []
    blocks: list[Block] = []
    for j, part in enumerate(content):
        if part["type"] in ("text", "refusal"):
            # An assistant's refusal part is what it said: Anthropic has only text for it.
            if part[part["type"]].strip():
                blocks.append({"type": "text", "text": part[part["type"]]})
        elif part["type"] == "image_url":
            blocks.append(_image(part, index, j))
        else:
            raise InvalidInput(
                f"part of type {part['type']!r} has no Anthropic equivalent",
                index=index,
                field=f"content[{j}].type",
            )
    return blocks


def _image(part: Mapping[str, Any], index: int, j: int) -> Block:
    ref = part.get("image_url")
    url = ref.get("url") if isinstance(ref, Mapping) else ref
    field = f"content[{j}].image_url.url"
    if not isinstance(url, str):
        raise InvalidInput("image part needs a URL string", index=index, field=field)
    if url.startswith(("http://", "https://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    if url.startswith("data:"):
        header, comma, data = url[5:].partition(",")
        media_type, *params = header.split(";")
        if comma and media_type and "base64" in params:
            source = {"type": "base64", "media_type": media_type, "data": data}
            return {"type": "image", "source": source}
        raise InvalidInput(
            "a data URL image must be 'data:<media type>;base64,<data>'", index=index, field=field
        )
    raise InvalidInput("image URL must be http(s) or a base64 data URL", index=index, field=field)


def _tool_use(call: Mapping[str, Any], index: int, j: int, ids: _CallIds) -> Block:
    fn = call["function"]
    args = fn["arguments"]
    field = f"tool_calls[{j}].function.arguments"
    try:
        value = json.loads(args) if args.strip() else {}
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"arguments are not valid JSON: {exc.msg}", index=index, field=field
        ) from exc
    if not isinstance(value, dict):
        raise InvalidInput(
            "arguments must be a JSON object, as Anthropic's tool input is",
            index=index,
            field=field,
        )
    return {"type": "tool_use", "id": ids.call(call["id"]), "name": fn["name"], "input": value}


def _tool_result(msg: Mapping[str, Any], ids: _CallIds) -> Block:
    block: Block = {"type": "tool_result", "tool_use_id": ids.result(msg["tool_call_id"])}
    content = msg["content"]
    if isinstance(content, str):
        if content.strip():
            block["content"] = content
    else:
        texts = [{"type": "text", "text": p["text"]} for p in content if p["text"].strip()]
        if texts:
            block["content"] = texts
    if msg.get("meta", {}).get("is_error") is True:
        block["is_error"] = True
    return block


def _system_text(system: str | Sequence[Mapping[str, Any]] | None) -> str:
    if system is None or isinstance(system, str):
        return system or ""
    texts: list[str] = []
    for j, block in enumerate(system):
        if not isinstance(block, Mapping) or block.get("type") != "text":
            raise InvalidInput("system blocks must be text", field=f"system[{j}].type")
        texts.append(_block_text(block, None, f"system[{j}].text"))
    return _JOIN.join(texts)


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
        "content": _JOIN.join(texts) if texts or not calls else None,
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
        return [{"role": "user", "content": _JOIN.join(p["text"] for p in parts)}]
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
        text = _JOIN.join(texts)
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
