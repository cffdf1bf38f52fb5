"""The replies of Anthropic's Messages API, as ``FakeProvider`` sends them: a message,
whole or streamed event by event, and a ``count_tokens`` answer."""

from __future__ import annotations

import json
from typing import Any

from fake_providers import Reply


def anthropic_reply(
    text: str = "hello",
    *,
    model: str = "claude-haiku-4-5-20251001",
    input_tokens: int = 14,
    output_tokens: int = 4,
    stop_reason: str = "end_turn",
) -> Reply:
    """A Messages API response as Anthropic sends it."""
    return Reply(
        body={
            "id": "msg_01abc",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
        },
        headers={"request-id": "req_fake"},
    )


def anthropic_content_reply(
    content: list[dict[str, Any]], *, stop_reason: str = "end_turn", stream: bool = False
) -> Reply:
    """A Messages answer of these ``content`` blocks, whole or as Anthropic streams it:
    ``message_start``, each block's start, deltas (text, thinking and signature, a tool
    use's input as ``input_json_delta`` pieces) and stop, ``message_delta``, ``message_stop``."""
    message = {
        "id": "msg_01abc",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 14, "output_tokens": 4},
    }
    if not stream:
        return Reply(body=message, headers={"request-id": "req_fake"})
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": {**message, "content": [],
                                                                "stop_reason": None}}),
    ]  # fmt: skip
    for i, block in enumerate(content):
        kind = block["type"]
        empty = {"text": {"text": ""}, "thinking": {"thinking": "", "signature": ""},
                 "tool_use": {"input": {}}}.get(kind, {})  # fmt: skip
        start = {**block, **empty}
        events.append(("content_block_start",
                       {"type": "content_block_start", "index": i, "content_block": start}))  # fmt: skip
        for delta in _deltas(block):
            events.append(("content_block_delta",
                           {"type": "content_block_delta", "index": i, "delta": delta}))  # fmt: skip
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                                     "usage": {"output_tokens": 4}}))  # fmt: skip
    events.append(("message_stop", {"type": "message_stop"}))
    body = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)
    return Reply(body=body, headers={"content-type": "text/event-stream", "request-id": "req_fake"})


def _deltas(block: dict[str, Any]) -> list[dict[str, Any]]:
    kind = block["type"]
    if kind == "text":
        text = block["text"]
        return [{"type": "text_delta", "text": text[:3]}, {"type": "text_delta", "text": text[3:]}]
    if kind == "thinking":
        return [
            {"type": "thinking_delta", "thinking": block["thinking"]},
            {"type": "signature_delta", "signature": block["signature"]},
        ]
    if kind == "tool_use":
        raw = json.dumps(block["input"])
        return [
            {"type": "input_json_delta", "partial_json": raw[:4]},
            {"type": "input_json_delta", "partial_json": raw[4:]},
        ]
    return []


COUNT_TOKENS = "/v1/messages/count_tokens"
"""Anthropic's token counting route; a test adds ``("POST", COUNT_TOKENS)`` to ``routes``."""


def count_tokens_reply(input_tokens: int) -> Reply:
    """A ``count_tokens`` answer as Anthropic sends it."""
    return Reply(body={"input_tokens": input_tokens}, headers={"request-id": "req_fake"})
