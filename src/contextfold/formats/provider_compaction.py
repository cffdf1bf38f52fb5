"""The wire shapes of the providers' own compaction, in one place.

Anthropic, on-demand compaction (beta ``compact-2026-09-04``): a Messages API
request (``POST /v1/messages``) with the top-level ``"compaction": {"type":
"summarize"}`` (and optional ``instructions``, up to 16,384 characters)
answers ``stop_reason: "compaction"`` and ``content`` holding one
``compaction`` block (``content``: the summary as text, ``signature``, and
possibly ``encrypted_content`` and ``tool_changes``), to be sent back first in
``messages``, exactly as it came, with the same beta header. Any other
``stop_reason`` (``max_tokens``, ``refusal``, ``tool_use``, ...) is a 200 with
no block: no summary.

OpenAI, ``POST /v1/responses/compact``: ``{"model", "input": [items],
"instructions"}`` answers ``{"object": "response.compaction", "output":
[items], "usage"}``; the output is the next context window as it must be sent
(retained items and one ``{"type": "compaction", "encrypted_content"}``
item), never pruned. The item is opaque: there is no readable summary.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from contextfold.core.errors import ModelError
from contextfold.core.messages import Message, text_of
from contextfold.core.provider_items import ProviderCompacted, provider_items
from contextfold.core.tokens import TokenCounter
from contextfold.formats.anthropic import to_anthropic

ANTHROPIC_COMPACTION_BETA = "compact-2026-09-04"
OPENAI_COMPACT_PATH = "/responses/compact"
INSTRUCTIONS_LIMIT = 16_384
"""Anthropic's cap on ``compaction.instructions``, in characters."""


def anthropic_compaction_request(
    messages: Sequence[Message], *, model: str, max_tokens: int, instructions: str | None
) -> tuple[dict[str, Any], dict[str, str]]:
    """The body and headers of an on-demand compaction of ``messages``.

    A leading message that carries a block Anthropic made (a fold rendered for
    it) is sent first, as the block: compacting again summarizes the old
    summary and what follows it.
    """
    system, turns = anthropic_turns(messages)
    compaction: dict[str, Any] = {"type": "summarize"}
    if instructions:
        compaction["instructions"] = instructions[:INSTRUCTIONS_LIMIT]
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "messages": turns,
        "compaction": compaction,
    }
    if system:
        body["system"] = system
    return body, {"anthropic-beta": ANTHROPIC_COMPACTION_BETA}


def anthropic_turns(
    messages: Sequence[Message],
) -> tuple[str | None, list[dict[str, Any]]]:
    """``to_anthropic``, except that the first message after the system prompt, when
    it carries a block Anthropic made, is sent as that block, first in
    ``messages`` as the API requires."""
    lead = _system_run(messages)
    block = provider_items(messages[lead], "anthropic") if lead < len(messages) else None
    if not block:
        return to_anthropic(messages)
    system, turns = to_anthropic([*messages[:lead], *messages[lead + 1 :]])
    return system, [{"role": "assistant", "content": block}, *turns]


def read_anthropic_compaction(
    data: Any, name: str
) -> tuple[list[dict[str, Any]], str | None, dict[str, int]]:
    """The block, its readable summary and the call's usage (summed over
    ``usage.iterations``, since the top-level counts are zero); ``ModelError``
    when no block came back, naming the ``stop_reason``."""
    if not isinstance(data, Mapping) or not isinstance(data.get("content"), list):
        raise ModelError(f"{name}: the compaction answer is not a message", body=_text(data))
    blocks = [b for b in data["content"] if isinstance(b, dict) and b.get("type") == "compaction"]
    stop = data.get("stop_reason")
    if stop != "compaction" or len(blocks) != 1:
        raise ModelError(
            f"{name}: no compaction block came back (stop_reason {stop!r})", body=_text(data)
        )
    summary = blocks[0].get("content")
    usage = _mapping(data.get("usage"))
    iterations = usage.get("iterations")
    parts = iterations if isinstance(iterations, list) else []
    counted = [it for it in parts if isinstance(it, Mapping)] or [usage]
    return (
        blocks,
        summary if isinstance(summary, str) and summary.strip() else None,
        {
            "input_tokens": sum(_int(it.get("input_tokens")) for it in counted),
            "output_tokens": sum(_int(it.get("output_tokens")) for it in counted),
        },
    )


def openai_compaction_request(
    messages: Sequence[Message], *, model: str, instructions: str | None
) -> dict[str, Any]:
    """The body of ``POST /responses/compact`` for ``messages``.

    The leading system prompt goes as ``instructions``, the API's place for it,
    with ``instructions`` after it: sent as an input item, it could come back in
    the compacted window, and the prompt would hold it twice.
    """
    lead = _system_run(messages)
    said = [text_of(m) for m in messages[:lead]] + ([instructions] if instructions else [])
    body: dict[str, Any] = {"model": model, "input": response_items(messages[lead:])}
    if said:
        body["instructions"] = "\n\n".join(said)
    return body


def read_openai_compaction(data: Any, name: str) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The compacted window (every output item, as it came) and the call's usage;
    ``ModelError`` when it holds no compaction item."""
    output = data.get("output") if isinstance(data, Mapping) else None
    if not isinstance(output, list) or not all(isinstance(i, dict) for i in output):
        raise ModelError(f"{name}: the compaction answer has no output list", body=_text(data))
    if not any(i.get("type") == "compaction" for i in output):
        raise ModelError(f"{name}: the compacted window holds no compaction item", body=_text(data))
    usage = _mapping(data.get("usage"))
    details = usage.get("output_tokens_details")
    reasoning = _int(details.get("reasoning_tokens")) if isinstance(details, Mapping) else 0
    return output, {
        "input_tokens": _int(usage.get("input_tokens")),
        "output_tokens": _int(usage.get("output_tokens")),
        "reasoning_tokens": reasoning,
    }


def items_tokens(compacted: ProviderCompacted, counter: TokenCounter) -> int:
    """What a provider's items cost in a prompt of that provider.

    Anthropic's block reads as its summary: counted as one message of that
    text. OpenAI's window: its retained items counted as messages of their
    JSON, and the compaction item as the summary the call wrote (its output
    tokens less reasoning), since OpenAI does not say what the item costs when
    read back; when the call reports no output, the ciphertext's own count
    stands in, an overestimate.
    """
    if compacted.provider == "anthropic":
        return counter.message({"role": "assistant", "content": compacted.summary or ""})
    usage = compacted.usage
    written = max(_int(usage.get("output_tokens")) - _int(usage.get("reasoning_tokens")), 0)
    total = 0
    for item in compacted.items:
        if item.get("type") == "compaction":
            total += written or counter.text(str(item.get("encrypted_content") or ""))
        else:
            total += counter.message({"role": "user", "content": _item_text(item)})
    return total


def _item_text(item: Mapping[str, Any]) -> str:
    """What a retained item says: its text parts, or its JSON when it has none."""
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, Mapping) for p in content):
        texts = [p.get("text") for p in content]
        if all(isinstance(t, str) for t in texts):
            return "\n".join(str(t) for t in texts)
    return json.dumps(item, ensure_ascii=False)


def response_items(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Chat messages as Responses API input items; a message carrying items OpenAI
    made (a fold rendered for it) becomes those items, verbatim."""
    items: list[dict[str, Any]] = []
    for message in messages:
        made = provider_items(message, "openai")
        if made is not None:
            items.extend(made)
            continue
        role = str(message["role"])
        if role == "tool":
            output = text_of(message)
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message["tool_call_id"],
                    "output": output,
                }
            )
            continue
        if message.get("content"):
            items.append({"type": "message", "role": role, "content": _content(message)})
        for call in message.get("tool_calls") or []:
            function = call["function"]
            items.append(
                {
                    "type": "function_call",
                    "call_id": call["id"],
                    "name": function["name"],
                    "arguments": function["arguments"],
                }
            )
    return items


def _system_run(messages: Sequence[Message]) -> int:
    """How many messages open with the system prompt: system and developer messages
    that carry no provider's items."""
    lead = 0
    for message in messages:
        if message["role"] not in ("system", "developer") or message.get("meta"):
            break
        lead += 1
    return lead


def _content(message: Message) -> str | list[dict[str, Any]]:
    """A message's content as a Responses input message holds it."""
    content = message["content"]
    if isinstance(content, str) or message["role"] != "user":
        return content if isinstance(content, str) else text_of({"content": content})
    parts: list[dict[str, Any]] = []
    for part in content:
        if part.get("type") == "text":
            parts.append({"type": "input_text", "text": part["text"]})
        elif part.get("type") == "image_url":
            parts.append({"type": "input_image", "image_url": part["image_url"]["url"]})
    return parts


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _text(data: Any) -> str:
    try:
        return json.dumps(data, ensure_ascii=False, default=str)[:2000]
    except (TypeError, ValueError):
        return repr(data)[:2000]
