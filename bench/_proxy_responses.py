"""The Responses API as ``bench/proxy.py``'s instant upstream answers it: a whole Response
and its event stream, a reasoning item and a message, as OpenAI sends them."""

from __future__ import annotations

import json
from typing import Any

WORDS = ["Noted;", " the", " loader", " reads", " it", " lazily."]
OUTPUT: list[dict[str, Any]] = [
    {"type": "reasoning", "id": "rs_bench", "summary": [], "encrypted_content": "e" * 400},
    {
        "type": "message",
        "id": "msg_bench",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "".join(WORDS), "annotations": []}],
    },
]
RESPONSE = {
    "id": "resp_bench",
    "object": "response",
    "created_at": 1_700_000_000,
    "model": "bench",
    "status": "completed",
    "output": OUTPUT,
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
    "usage": {"input_tokens": 10, "output_tokens": 8, "total_tokens": 18},
}


def responses_stream() -> bytes:
    """The Response's events: created, each item added and done, the text in deltas,
    completed."""
    events: list[dict[str, Any]] = [
        {
            "type": "response.created",
            "response": {**RESPONSE, "output": [], "status": "in_progress"},
        }
    ]
    for at, item in enumerate(OUTPUT):
        events.append({"type": "response.output_item.added", "output_index": at, "item": item})
        if item["type"] == "message":
            where = {"output_index": at, "item_id": item["id"], "content_index": 0}
            events += [{"type": "response.output_text.delta", **where, "delta": w} for w in WORDS]
        events.append({"type": "response.output_item.done", "output_index": at, "item": item})
    events.append({"type": "response.completed", "response": RESPONSE})
    return b"".join(
        f"event: {e['type']}\ndata: {json.dumps({**e, 'sequence_number': n})}\n\n".encode()
        for n, e in enumerate(events)
    )
