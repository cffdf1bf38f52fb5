"""Pydantic AI's ``ModelMessage``s to chat messages and back, without loss.

A ``ModelRequest`` becomes one chat message per part the model reads
(consecutive system prompt parts merged into one system message, a user
prompt a user message, a tool return a tool message answering its call, a
retry feedback a user message); a ``ModelResponse`` becomes one assistant
message (its text parts as content, its tool calls as ``tool_calls``). The
chat messages are what contextfold counts, folds and matches; each carries
the exact JSON of its parts and of the message around them
(``ModelMessagesTypeAdapter``) in ``meta["pydantic_ai"]``, so the log gives the
original messages back. Parts no chat message shows (thinking, files the model
made, provider-run tool calls, instruction and settings records) ride in the
``meta`` of a neighbouring chat message of the same ``ModelMessage``.

Going back, chat messages that came from one ``ModelMessage`` (same ``key``,
part indices rising) are put together again: all its parts give the original,
some of them (the rest was folded) give a message of those parts. A chat
message that keeps nothing (a fold's summary, a marker, a clipped message, the
synthetic answer of an unanswered call) becomes parts built from its fields.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import messages as pm

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message

META_KEY = "pydantic_ai"
"""The ``meta`` key a chat message keeps its Pydantic AI parts under."""

MADE_KEY = "contextfold"
"""The ``meta`` key of a chat message that keeps no parts (a fold, a marker), copied to
the ``metadata`` of the message made from it: what made it (never sent to a model)."""

_Segment = dict[str, Any]


@dataclass(frozen=True)
class Converted:
    """One ``ModelMessage`` as chat: its key, and each chat message it shows (or none)
    with the segment of its parts that message keeps."""

    message: pm.ModelMessage
    key: str
    shown: tuple[tuple[Message, _Segment], ...]
    hidden: _Segment | None
    """All its parts, when no chat message shows any of them."""


ChatMemo = dict[int, Converted]
"""Conversions by ``id`` of the message (each keeps its message alive, so ids stay
unique): a framework resends the same objects on every call."""


def to_chat(
    messages: Sequence[pm.ModelMessage],
    originals: dict[str, pm.ModelMessage] | None = None,
    memo: ChatMemo | None = None,
) -> list[Message]:
    """Chat messages for ``messages``, each keeping the parts it came from in ``meta``;
    ``originals`` is given each message by its key (``from_chat`` hands them back);
    ``memo`` keeps conversions for the next call with the same objects."""
    memo = {} if memo is None else memo
    fresh = [m for m in messages if (c := memo.get(id(m))) is None or c.message is not m]
    if fresh:
        dumped = pm.ModelMessagesTypeAdapter.dump_python(fresh, mode="json")
        for message, data in zip(fresh, dumped, strict=True):
            memo[id(message)] = _converted(message, data)
    out: list[Message] = []
    waiting: list[_Segment] = []  # messages no chat message shows, until one does
    for message in messages:
        converted = memo[id(message)]
        if originals is not None:
            originals[converted.key] = message
        if converted.hidden is not None:
            # Nothing in it a model reads: it goes with the chat message before it.
            if out:
                out[-1]["meta"][META_KEY].append(converted.hidden)
            else:
                waiting.append(converted.hidden)
            continue
        for chat, segment in converted.shown:
            out.append({**chat, "meta": {META_KEY: [*waiting, segment]}})
            waiting = []
    if waiting:
        raise InvalidInput("no message holds a part a model reads", field="messages")
    return out


def _converted(message: pm.ModelMessage, data: dict[str, Any]) -> Converted:
    key = message_key(data)
    header = {k: v for k, v in data.items() if k != "parts"}
    parts = data["parts"]
    if isinstance(message, pm.ModelRequest):
        shown = _request_chat(message)
    else:
        shown = [(_response_chat(message), [])]
    if not shown:
        return Converted(message, key, (), _segment(key, header, parts, range(len(parts))))
    owned: list[list[int]] = [[] for _ in shown]
    firsts = [indices[0] if indices else 0 for _, indices in shown]
    for i in range(len(parts)):
        # Each part goes with the chat message that shows it, or else the one shown before it.
        owner = next((n for n, (_, ix) in enumerate(shown) if i in ix), None)
        if owner is None:
            owner = max([n for n, first in enumerate(firsts) if first <= i] or [0])
        owned[owner].append(i)
    pairs = tuple(
        (chat, _segment(key, header, parts, indices))
        for (chat, _), indices in zip(shown, owned, strict=True)
    )
    return Converted(message, key, pairs, None)


def from_chat(
    chat: Sequence[Mapping[str, Any]], originals: Mapping[str, pm.ModelMessage] | None = None
) -> list[pm.ModelMessage]:
    """``ModelMessage``s for chat messages: whole originals where every part is present
    (the very object of ``originals``, by key, when given), else messages of the parts
    present, and messages built from the fields of chat messages that keep none."""
    built: list[_Built] = []
    for message in chat:
        meta = message.get("meta")
        kept = meta.get(META_KEY) if isinstance(meta, Mapping) else None
        if not kept:
            _add_loose(built, message)
            continue
        for segment in kept:
            indices = [int(i) for i, _ in segment["parts"]]
            parts = [p for _, p in segment["parts"]]
            last = built[-1] if built else None
            if (
                last is not None
                and last.key == segment["key"]
                and indices
                and last.indices
                and min(indices) > max(last.indices)
            ):
                last.indices += indices
                last.parts += parts
            else:
                built.append(
                    _Built(segment["key"], segment["message"], segment["count"], indices, parts)
                )
    return [b.message(originals or {}) for b in built]


def message_key(data: Mapping[str, Any]) -> str:
    """A ``ModelMessage``'s identity: a digest of its JSON."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass
class _Built:
    """A ``ModelMessage`` being put together: from its kept parts (``key`` set), in part
    order, or built from chat fields (``made``)."""

    key: str | None
    header: dict[str, Any] = field(default_factory=dict)
    count: int = 0
    indices: list[int] = field(default_factory=list)
    parts: list[dict[str, Any]] = field(default_factory=list)
    made: pm.ModelRequest | pm.ModelResponse | None = None

    def message(self, originals: Mapping[str, pm.ModelMessage]) -> pm.ModelMessage:
        if self.made is not None:
            return self.made
        original = originals.get(self.key) if self.key is not None else None
        if original is not None and sorted(self.indices) == list(range(self.count)):
            return original
        data = {**self.header, "parts": self.parts}
        return pm.ModelMessagesTypeAdapter.validate_python([data])[0]


def _segment(key: str, header: dict[str, Any], parts: list[Any], indices: Any) -> _Segment:
    return {
        "key": key,
        "message": header,
        "count": len(parts),
        "parts": [[i, parts[i]] for i in indices],
    }


def _request_chat(request: pm.ModelRequest) -> list[tuple[Message, list[int]]]:
    """The chat messages a request's parts show, each with the indices of its parts."""
    shown: list[tuple[Message, list[int]]] = []
    for i, part in enumerate(request.parts):
        if isinstance(part, pm.SystemPromptPart):
            if shown and shown[-1][0]["role"] == "system" and shown[-1][1][-1] == i - 1:
                shown[-1][0]["content"] += "\n\n" + part.content
                shown[-1][1].append(i)
                continue
            shown.append(({"role": "system", "content": part.content}, [i]))
        elif isinstance(part, pm.UserPromptPart):
            shown.append(({"role": "user", "content": _user_content(part.content)}, [i]))
        elif isinstance(part, pm.ToolReturnPart):
            tool = {"role": "tool", "tool_call_id": part.tool_call_id}
            shown.append(({**tool, "content": part.model_response_str()}, [i]))
        elif isinstance(part, pm.RetryFeedbackPart):
            shown.append(({"role": "user", "content": part.model_response()}, [i]))
    return shown


def _response_chat(response: pm.ModelResponse) -> Message:
    """The assistant message a response shows: its text and its tool calls."""
    texts = [p.content for p in response.parts if isinstance(p, pm.TextPart)]
    calls = [
        {
            "id": p.tool_call_id,
            "type": "function",
            "function": {"name": p.tool_name, "arguments": _arguments(p)},
        }
        for p in response.parts
        if isinstance(p, pm.ToolCallPart)
    ]
    chat: Message = {"role": "assistant", "content": "\n\n".join(texts)}
    if calls:
        chat["tool_calls"] = calls
        chat["content"] = chat["content"] or None
    return chat


def _arguments(call: pm.ToolCallPart) -> str:
    """A call's arguments as the model wrote them (Pydantic AI keeps that string; it
    sends it re-serialized, never longer)."""
    return call.args if isinstance(call.args, str) else call.args_as_json_str()


def _user_content(content: str | Sequence[pm.UserContent]) -> str | list[dict[str, Any]]:
    """A user prompt as chat content: text, images, audio and files as OpenAI's parts."""
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for item in content:
        part = _user_part(item)
        if part is not None:
            parts.append(part)
    return parts


def _user_part(item: pm.UserContent) -> dict[str, Any] | None:
    if isinstance(item, str):
        return {"type": "text", "text": item}
    if isinstance(item, pm.TextContent):
        return {"type": "text", "text": item.content}
    if isinstance(item, pm.ImageUrl):
        return {"type": "image_url", "image_url": {"url": item.url}}
    if isinstance(item, pm.BinaryContent):
        data = base64.b64encode(item.data).decode()
        if item.is_image:
            return {"type": "image_url", "image_url": {"url": item.data_uri}}
        if item.is_audio:
            return {"type": "input_audio", "input_audio": {"data": data, "format": item.format}}
        return {"type": "file", "file": {"file_data": item.data_uri}}
    if isinstance(item, pm.UploadedFile):
        return {"type": "file", "file": {"file_id": item.file_id}}
    if isinstance(item, pm.FileUrl):
        return {"type": "text", "text": f"[{item.kind}: {item.url}]"}
    return None  # a cache point: no content


def _add_loose(built: list[_Built], message: Mapping[str, Any]) -> None:
    """A message from a chat message that keeps no parts; consecutive requests made so
    are one ``ModelRequest``. ``meta[MADE_KEY]`` goes to its ``metadata`` (the latest
    one's, for a request made of several)."""
    meta = message.get("meta")
    made = meta.get(MADE_KEY) if isinstance(meta, Mapping) else None
    metadata = None if made is None else {MADE_KEY: made}
    role = message["role"]
    text = _text(message.get("content"))
    if role == "assistant":
        answer: list[pm.ModelResponsePart] = [pm.TextPart(text)] if text else []
        for call in message.get("tool_calls") or []:
            fn = call["function"]
            answer.append(pm.ToolCallPart(fn["name"], fn["arguments"], tool_call_id=call["id"]))
        built.append(_Built(None, made=pm.ModelResponse(parts=answer, metadata=metadata)))
        return
    part: pm.ModelRequestPart
    if role == "tool":
        call_id = message["tool_call_id"]
        part = pm.ToolReturnPart(_called_name(built, call_id), text, tool_call_id=call_id)
    elif role == "user":
        part = pm.UserPromptPart(text)
    else:
        part = pm.SystemPromptPart(text)
    last = built[-1] if built else None
    if last is not None and isinstance(last.made, pm.ModelRequest):
        last.made.parts = [*last.made.parts, part]
        last.made.metadata = metadata or last.made.metadata
    else:
        built.append(_Built(None, made=pm.ModelRequest(parts=[part], metadata=metadata)))


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if p.get("type") == "text")
    return ""


def _called_name(built: Sequence[_Built], call_id: str) -> str:
    """The name of the tool the nearest earlier call with this id called."""
    for b in reversed(built):
        if isinstance(b.made, pm.ModelResponse):
            for call in b.made.tool_calls:
                if call.tool_call_id == call_id:
                    return call.tool_name
        for part in b.parts:
            if part.get("part_kind") == "tool-call" and part.get("tool_call_id") == call_id:
                return str(part.get("tool_name"))
    return ""
