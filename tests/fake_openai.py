"""The replies of OpenAI's APIs, as ``FakeProvider`` sends them: a chat completion, and the
Responses API's output items, Response objects and their event streams."""

from __future__ import annotations

import json
from typing import Any

from fake_providers import Reply


def openai_reply(
    text: str = "hello",
    *,
    model: str = "gpt-4o-mini-2024-07-18",
    prompt_tokens: int = 12,
    completion_tokens: int = 3,
    refusal: str | None = None,
) -> Reply:
    """A chat completion as OpenAI sends it; a ``refusal`` comes with null content, as OpenAI's does."""
    return Reply(
        body={
            "id": "chatcmpl-abc123",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": None if refusal is not None else text,
                        "refusal": refusal,
                    },
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
            "system_fingerprint": "fp_0123456789",
        },
        headers={"x-request-id": "req_fake"},
    )


def said(text: str, item_id: str = "msg_1") -> dict[str, Any]:
    """An assistant message output item of the Responses API."""
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [part],
    }


def called(name: str, arguments: str, call_id: str) -> dict[str, Any]:
    """A function_call output item of the Responses API."""
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def response_body(
    output: list[dict[str, Any]], *, response_id: str = "resp_1", status: str = "completed"
) -> dict[str, Any]:
    """A Response object as the Responses API sends it."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": 1_700_000_000,
        "model": "gpt-5-2025-08-07",
        "status": status,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "temperature": 1.0,
        "top_p": 1.0,
        "usage": {
            "input_tokens": 20,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 25,
        },
    }


def responses_reply(output: list[dict[str, Any]], *, response_id: str = "resp_1") -> Reply:
    """A whole Responses API answer."""
    return Reply(body=response_body(output, response_id=response_id))


def responses_stream(
    output: list[dict[str, Any]], *, response_id: str = "resp_1", end: str = "response.completed"
) -> Reply:
    """A streamed Responses API answer: its events as the API sends them, ``end`` last."""
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": response_body([], status="in_progress")}
    ]
    for at, item in enumerate(output):
        opened = {**item, "status": "in_progress"}
        if item["type"] == "message":
            opened["content"] = []
        if item["type"] == "function_call":
            opened["arguments"] = ""
        events.append({"type": "response.output_item.added", "output_index": at, "item": opened})
        where = {"item_id": item["id"], "output_index": at}
        if item["type"] == "message":
            text = item["content"][0]["text"]
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            events.append(
                {"type": "response.content_part.added", **where, "content_index": 0, "part": part}
            )
            for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
                delta = {"content_index": 0, "delta": piece, "logprobs": []}
                events.append({"type": "response.output_text.delta", **where, **delta})
            events.append(
                {"type": "response.output_text.done", **where, "content_index": 0, "text": text}
            )
        if item["type"] == "function_call":
            arguments = item["arguments"]
            for piece in (arguments[: len(arguments) // 2], arguments[len(arguments) // 2 :]):
                events.append(
                    {"type": "response.function_call_arguments.delta", **where, "delta": piece}
                )
            events.append(
                {"type": "response.function_call_arguments.done", **where, "arguments": arguments}
            )
        events.append({"type": "response.output_item.done", "output_index": at, "item": item})
    status = {"response.completed": "completed", "response.failed": "failed"}.get(end, "incomplete")
    final = response_body(output, response_id=response_id, status=status)
    events.append({"type": end, "response": final})
    chunks = []
    for number, event in enumerate(events):
        event["sequence_number"] = number
        chunks.append(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n")
    return Reply(body="".join(chunks).encode(), headers={"content-type": "text/event-stream"})
