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

``from_anthropic`` (``anthropic_read``) reads an Anthropic conversation back.
``meta`` is never sent and ``name`` has no Anthropic equivalent; both are
dropped, except that ``meta["is_error"]`` on a tool message becomes the
``is_error`` flag of its ``tool_result``, and back again. An assistant's
refusal part is sent as text, and its ``refusal`` field too when it has no
text of its own.


What comes out passes ``checks.prompt_faults(..., "anthropic")``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import validate_messages

Block = dict[str, Any]
KeptTurn = Callable[[Sequence[Mapping[str, Any]], int], tuple[dict[str, Any], int] | None]
"""Given the messages and an index: a turn to send as it is for the ``count`` messages from
there, as ``(turn, count)``, or None to translate them."""

_SYSTEM_ROLES = ("system", "developer")
_ID_CHARS = re.compile(r"[^A-Za-z0-9_-]")
PART_JOIN = "\n"
"""How text parts are joined, as ``text_of`` joins them, so a round trip keeps the text."""
LEADING_USER_TEXT = "[contextfold: the conversation so far]"
"""The user turn put first when a prompt would open with an assistant turn."""


def to_anthropic(
    messages: Sequence[Mapping[str, Any]], *, kept: KeptTurn | None = None, valid: bool = False
) -> tuple[str | None, list[dict[str, Any]]]:
    """OpenAI messages as ``(system, messages)`` for Anthropic's Messages API.

    The input is validated first, so a bad message fails here naming its
    index and field rather than as a provider's HTTP 400. ``kept`` names turns
    to send exactly as a client sent them (the proxy keeps a Messages
    request's own blocks): such a turn is neither merged, sorted nor stripped.
    ``valid`` skips the validation of messages known valid (a prompt rendered from a log).
    """
    msgs = list(messages) if valid else validate_messages(messages)
    first = 0
    system: list[str] = []
    while first < len(msgs) and msgs[first]["role"] in _SYSTEM_ROLES:
        text = _plain_text(msgs[first]["content"])
        if text.strip():
            system.append(text)
        first += 1
    ids = _CallIds()
    turns: list[dict[str, Any]] = []
    verbatim: set[int] = set()  # ids of the turns sent as kept
    index = first
    while index < len(msgs):
        found = kept(msgs, index) if kept is not None else None
        if found is not None:
            turn, count = found
            for block in turn["content"] if isinstance(turn["content"], list) else ():
                if isinstance(block, Mapping) and block.get("type") == "tool_use":
                    ids.call(str(block.get("id")))
            turns.append(turn)
            verbatim.add(id(turn))
            index += count
            continue
        msg = msgs[index]
        role = msg["role"]
        if role == "tool":
            _add(turns, "user", [_tool_result(msg, ids)], verbatim)
        elif role == "assistant":
            blocks = _content_blocks(msg["content"], index)
            if not blocks and isinstance(msg.get("refusal"), str):
                blocks = _content_blocks(msg["refusal"], index)
            blocks += [
                _tool_use(call, index, j, ids) for j, call in enumerate(msg.get("tool_calls") or ())
            ]
            _add(turns, "assistant", blocks, verbatim)
        else:
            _add(turns, "user", _content_blocks(msg["content"], index), verbatim)
        index += 1
    for turn in turns:
        if turn["role"] == "user" and id(turn) not in verbatim:
            turn["content"].sort(key=lambda block: block["type"] != "tool_result")
    last = turns[-1]["content"][-1] if turns and id(turns[-1]) not in verbatim else None
    if last is not None and turns[-1]["role"] == "assistant" and last["type"] == "text":
        last["text"] = last["text"].rstrip()
    if not turns or turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": LEADING_USER_TEXT}]})
    return ("\n\n".join(system) or None), turns


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
        # Validation has checked that an earlier call holds this id (or a kept turn's).
        return self._latest.get(call_id, call_id)


def _add(turns: list[dict[str, Any]], role: str, blocks: list[Block], verbatim: set[int]) -> None:
    if not blocks:
        return
    if turns and turns[-1]["role"] == role and id(turns[-1]) not in verbatim:
        turns[-1]["content"].extend(blocks)
    else:
        turns.append({"role": role, "content": blocks})


def _plain_text(content: str | list[dict[str, Any]]) -> str:
    if isinstance(content, str):
        return content
    return PART_JOIN.join(part["text"] for part in content if part["text"])


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
