"""Chat Completions answers, streamed as OpenAI streams them, for LlamaIndex's agents.

``streamed(text, calls)`` is one model turn: text deltas, then each tool call's
id and name, then its arguments in two pieces, the finish reason, a usage chunk
and ``[DONE]``; LlamaIndex's ``FunctionAgent`` streams by default.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from fake_providers import Reply

Call = tuple[str, str, dict[str, Any]]
"""A tool call: its id, the tool's name, its arguments."""


def streamed(text: str = "", calls: Sequence[Call] = (), *, key: str = "1") -> Reply:
    base = {
        "id": f"chatcmpl-{key}",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-4o-mini",
    }
    half = len(text) // 2
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    if text:
        deltas += [{"content": text[:half]}, {"content": text[half:]}]
    for index, (call_id, name, arguments) in enumerate(calls):
        raw = json.dumps(arguments)
        opened = {"index": index, "id": call_id, "type": "function"}
        deltas.append({"tool_calls": [{**opened, "function": {"name": name, "arguments": ""}}]})
        for piece in (raw[: len(raw) // 2], raw[len(raw) // 2 :]):
            deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    chunks = [
        {**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
    ]
    finish = "tool_calls" if calls else "stop"
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    usage = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
    chunks.append({**base, "choices": [], "usage": usage})
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return Reply(body=body.encode(), headers={"content-type": "text/event-stream"})
