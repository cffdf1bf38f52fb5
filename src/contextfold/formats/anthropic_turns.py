"""A Messages API request to and from the log without loss: each turn's own blocks kept.

The log holds OpenAI chat messages (``from_anthropic``); what they cannot
hold (thinking blocks and their signatures, ``cache_control``, documents,
citations, images in a tool result, a system prompt as blocks, where one turn
ends and the next begins) is kept in ``meta["anthropic"]`` of the turn's first
message: the turn's content as the client sent it, and how many log messages
it reads as. ``request_of`` sends a kept turn back exactly as it came, any
other message translated (``to_anthropic``). A block the log has no place for
is read as a short text (``[document: title]``, a plain-text document's text
after it), so search and summaries see that something was there.

The round trip is exact (``request_of(read_request(s, m)) == (s, m)``) for
every request Anthropic accepts, but for: an empty system prompt (``""`` or
``[]``) is left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message
from contextfold.formats.anthropic import to_anthropic
from contextfold.formats.anthropic_read import from_anthropic_turns

KEY = "anthropic"
_READ = {
    "user": frozenset({"text", "image", "tool_result"}),
    "assistant": frozenset({"text", "tool_use", "thinking", "redacted_thinking"}),
}


def read_request(system: Any, messages: Any) -> list[Message]:
    """A request's ``system`` and ``messages`` as log messages, each turn's own content in
    the ``meta`` of its first message. Errors name the field (``messages``, ``system``)."""
    if not isinstance(messages, list) or not messages:
        raise InvalidInput("messages must be a non-empty list of turns", field="messages")
    if system is not None and not isinstance(system, str | list):
        raise InvalidInput("system must be a string or a list of text blocks", field="system")
    for index, turn in enumerate(messages):
        for key in turn if isinstance(turn, Mapping) else ():
            if key not in ("role", "content"):
                shown = (
                    key if isinstance(key, str) and key.isascii() and key.isprintable() else None
                )
                raise InvalidInput(
                    f"a turn holds only role and content, not {key!a}",
                    index=index,
                    field=shown or "messages",
                )
    readable = [_readable(turn) for turn in messages]
    head, turns = from_anthropic_turns(system, readable)
    if head and isinstance(system, list):
        head[0]["meta"] = {KEY: {"system": system}}
    out = head
    for index, (raw, turn) in enumerate(zip(messages, turns, strict=True)):
        if not turn:
            raise InvalidInput("a user turn needs some content", index=index, field="content")
        first = turn[0]
        first["meta"] = {
            **first.get("meta", {}),
            KEY: {"content": raw["content"], "count": len(turn)},
        }
        out.extend(turn)
    return out


def request_of(
    messages: Sequence[Mapping[str, Any]], *, valid: bool = False
) -> tuple[Any, list[dict[str, Any]]]:
    """Log messages as ``(system, messages)`` of a request: kept turns as they came.
    ``valid``: the messages are known valid (``to_anthropic``)."""
    system: Any
    system, turns = to_anthropic(messages, kept=_kept, valid=valid)
    leading = 0
    while leading < len(messages) and messages[leading].get("role") in ("system", "developer"):
        leading += 1
    if leading == 1:
        kept = _meta(messages[0]).get("system")
        if isinstance(kept, list):
            system = kept
    return system, turns


def answer_of(content: Any) -> Message:
    """The log message of an answer's ``content`` blocks, its own blocks kept as a turn's."""
    return read_request(None, [{"role": "assistant", "content": content}])[0]


def _meta(message: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = message.get("meta")
    found = meta.get(KEY) if isinstance(meta, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def _kept(messages: Sequence[Mapping[str, Any]], index: int) -> tuple[dict[str, Any], int] | None:
    kept = _meta(messages[index])
    count = kept.get("count")
    if "content" not in kept or type(count) is not int or not 0 < count <= len(messages) - index:
        return None
    if any("content" in _meta(m) for m in messages[index + 1 : index + count]):
        return None
    role = "assistant" if messages[index].get("role") == "assistant" else "user"
    return {"role": role, "content": kept["content"]}, count


def _readable(turn: Any) -> Any:
    """The turn with each block the log cannot hold read as a short text."""
    if not isinstance(turn, Mapping) or not isinstance(turn.get("content"), list):
        return turn
    known = _READ.get(str(turn.get("role")), frozenset())
    blocks = [_block(block, known) for block in turn["content"]]
    return {**turn, "content": blocks}


def _block(block: Any, known: frozenset[str]) -> Any:
    kind = block.get("type") if isinstance(block, Mapping) else None
    if not isinstance(kind, str) or (kind in known and kind != "tool_result"):
        return block
    if kind == "tool_result":
        inner = block.get("content")
        if isinstance(inner, list):
            return {**block, "content": [_block(part, frozenset({"text"})) for part in inner]}
        return block
    title = block.get("title")
    said = f"[{kind}: {title}]" if isinstance(title, str) and title else f"[{kind}]"
    source = block.get("source")
    if isinstance(source, Mapping) and source.get("type") == "text":
        # A plain-text document is read whole: searched, summarised and counted as sent.
        said += f"\n{source.get('data', '')}"
    return {"type": "text", "text": said}
