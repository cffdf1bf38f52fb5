"""The providers' own compaction, scripted on ``FakeProvider`` as documented.

``AnthropicCompaction`` answers ``POST /v1/messages`` as the Messages API with
on-demand compaction (beta ``compact-2026-09-04``): a request with the
top-level ``compaction`` parameter gets one signed ``compaction`` block and
``stop_reason: "compaction"``; any request carrying a block must carry the beta
header, exactly one block, first in ``messages``, with a signature this server
issued and its content unchanged, else a 400 with the documented code. The
rules enforced are the ones the compaction-on-demand page lists.

``OpenAICompaction`` answers ``POST /v1/responses/compact`` with a
``response.compaction`` object whose output keeps the user messages and adds one
``compaction`` item with ``encrypted_content``, and ``POST /v1/responses`` with
a response, refusing a compaction item it did not issue (a 400, as for a
ciphertext that no longer decrypts).

Ordinary requests (the view's own summarizer) get ``OWN_SUMMARY``.
``expire()`` forgets every item issued so far: the provider refusing its own
items, as after a key rotation or retention limit.
"""

from __future__ import annotations

import hashlib
import itertools
from typing import Any

from fake_providers import (
    FakeProvider,
    Reply,
    Request,
    anthropic_reply,
    error_reply,
    openai_reply,
)

BETA = "compact-2026-09-04"
BLOCK_FIELDS = frozenset(
    {"type", "content", "signature", "encrypted_content", "tool_changes", "cache_control"}
)
"""What a block sent back may hold (the SDK's ``BetaCompactionBlockParam``); more is a 400."""
OWN_SUMMARY = "The user asked for the build steps; the assistant ran each with the shell tool."
"""What either server answers an ordinary request: the view's own summarizer reads it."""


def digest(texts: list[str], words: int = 40) -> str:
    """The scripted summary: the opening words of what was sent, in order."""
    joined = " ".join(" ".join(texts).split()[:words])
    return f"Summary of the conversation: {joined}"


def _texts_anthropic(turns: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for turn in turns:
        content = turn.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for block in blocks or []:
            for key in ("text", "content"):
                value = block.get(key)
                if isinstance(value, str):
                    out.append(value)
    return out


class AnthropicCompaction:
    """On-demand compaction and block checking on an Anthropic ``FakeProvider``."""

    def __init__(self, server: FakeProvider) -> None:
        self.server = server
        self.signatures: dict[str, str] = {}
        self.compactions = 0
        self.refusals = 0
        self.stop_reason = "compaction"
        """Another one is the documented 200 without a block (``max_tokens``, ``refusal``)."""
        server.answer("POST", "/v1/messages", self)

    def expire(self) -> None:
        self.signatures.clear()

    def __call__(self, request: Request) -> Reply:
        body = request.body
        turns = body.get("messages") or []
        beta = BETA in request.headers.get("anthropic-beta", "")
        fault = self._blocks_fault(turns, beta)
        if fault is not None:
            self.refusals += 1
            return fault
        if "compaction" not in body:
            return anthropic_reply(OWN_SUMMARY, model=body["model"])
        if not beta:
            return _anthropic_error(
                400, "the compaction parameter requires anthropic-beta: compact-2026-09-04"
            )
        if "context_management" in body:
            return _anthropic_error(400, "compaction cannot be combined with context_management")
        if not any(t.get("role") in ("user", "assistant") for t in turns):
            return _anthropic_error(400, "nothing to summarize", "compaction_nothing_to_summarize")
        if _ends_in_open_call(turns):
            return _anthropic_error(400, "the last assistant turn ends in an unanswered tool call")
        unanswered = _unanswered(turns)
        if unanswered:
            return _anthropic_error(
                400, f"tool_use ids were found without tool_result blocks: {unanswered}"
            )
        return self._compacted(body)

    def _compacted(self, body: dict[str, Any]) -> Reply:
        self.compactions += 1
        if self.stop_reason != "compaction":
            empty = anthropic_reply("", model=body["model"], stop_reason=self.stop_reason)
            empty.body["content"] = []  # a 200 with empty content, as documented
            return empty
        summary = digest(_texts_anthropic(body["messages"]))
        signature = hashlib.sha256(f"{self.compactions}:{summary}".encode()).hexdigest()
        self.signatures[signature] = summary
        block = {"type": "compaction", "content": summary, "signature": signature}
        return Reply(
            body={
                "id": f"msg_compact_{self.compactions}",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [block],
                "stop_reason": "compaction",
                "stop_sequence": None,
                "usage": {
                    "input_tokens": 0,
                    "output_tokens": 0,
                    "iterations": [
                        {"type": "compaction", "input_tokens": 900, "output_tokens": 60}
                    ],
                },
            }
        )

    def _blocks_fault(self, turns: list[dict[str, Any]], beta: bool) -> Reply | None:
        """The documented 400s for a request that carries compaction blocks."""
        found = [
            (i, j, block)
            for i, turn in enumerate(turns)
            if isinstance(turn.get("content"), list)
            for j, block in enumerate(turn["content"])
            if block.get("type") == "compaction"
        ]
        if not found:
            return None
        if not beta:
            return _anthropic_error(
                400, "compaction is not one of the expected content block types"
            )
        if len(found) > 1:
            return _anthropic_error(400, "send exactly one compaction block")
        i, j, block = found[0]
        if (i, j) != (0, 0):
            return _anthropic_error(400, "the block must come first", "compaction_block_misplaced")
        if set(block) - BLOCK_FIELDS:
            return _anthropic_error(400, "messages.0.content.0.compaction: Extra inputs")
        if block.get("signature") not in self.signatures:
            return _anthropic_error(400, "invalid signature", "compaction_signature_invalid")
        if self.signatures[block["signature"]] != block.get("content"):
            return _anthropic_error(400, "content changed", "compaction_content_mismatch")
        return None


def _ends_in_open_call(turns: list[dict[str, Any]]) -> bool:
    last = turns[-1] if turns else {}
    content = last.get("content")
    return (
        last.get("role") == "assistant"
        and isinstance(content, list)
        and any(b.get("type") == "tool_use" for b in content)
    )


def _unanswered(turns: list[dict[str, Any]]) -> list[str]:
    """``tool_use`` ids not answered by a ``tool_result`` in the next turn, which the
    Messages API refuses wherever they are."""
    missing: list[str] = []
    for turn, after in zip(turns, [*turns[1:], {}], strict=True):
        if turn.get("role") != "assistant" or not after:
            continue
        blocks = turn["content"] if isinstance(turn.get("content"), list) else []
        answers = after.get("content") if isinstance(after.get("content"), list) else []
        answered = {b.get("tool_use_id") for b in answers if b.get("type") == "tool_result"}
        missing += [
            b["id"] for b in blocks if b.get("type") == "tool_use" and b["id"] not in answered
        ]
    return missing


def _anthropic_error(status: int, message: str, code: str | None = None) -> Reply:
    reply = error_reply("anthropic", status, message)
    if code is not None:
        reply.body["error"]["details"] = {"error_code": code}
        reply.body["error"]["type"] = "invalid_request_error"
    return reply


class OpenAICompaction:
    """``/responses/compact`` and ``/responses`` on an OpenAI ``FakeProvider``."""

    def __init__(self, server: FakeProvider) -> None:
        self.server = server
        self.issued: dict[str, str] = {}
        self.compactions = 0
        self.refusals = 0
        self.unsupported = False
        """Answer compactions with a 400, as for a model without compaction."""
        self._ids = itertools.count(1)
        server.answer("POST", "/v1/responses/compact", self.compact)
        server.answer("POST", "/v1/responses", self.respond)
        server.answer("POST", "/v1/chat/completions", lambda _: openai_reply(OWN_SUMMARY))

    def expire(self) -> None:
        self.issued.clear()

    def compact(self, request: Request) -> Reply:
        body = request.body
        items = body.get("input")
        if not body.get("model") or not isinstance(items, list):
            return error_reply("openai", 400, "model and an input list are required")
        fault = self._items_fault(items)
        if fault is not None:
            return fault
        if self.unsupported:
            return error_reply("openai", 400, f"compaction is not supported for {body['model']}")
        self.compactions += 1
        n = next(self._ids)
        texts = [_item_text(i) for i in items]
        secret = hashlib.sha256(digest([t for t in texts if t]).encode()).hexdigest() * 4
        self.issued[secret] = f"cmp_{n}"
        retained = [
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": _item_text(i)}],
            }
            for i in items
            if i.get("type") == "message" and i.get("role") == "user"
        ]
        output = [*retained, {"type": "compaction", "id": f"cmp_{n}", "encrypted_content": secret}]
        return Reply(
            body={
                "id": f"resp_compact_{n}",
                "object": "response.compaction",
                "created_at": 1_700_000_000 + n,
                "model": body["model"],
                "output": output,
                "usage": {
                    "input_tokens": 1200,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": 300,
                    "output_tokens_details": {"reasoning_tokens": 180},
                    "total_tokens": 1500,
                },
            }
        )

    def respond(self, request: Request) -> Reply:
        items = request.body.get("input")
        fault = self._items_fault(items if isinstance(items, list) else [])
        if fault is not None:
            return fault
        return Reply(
            body={
                "id": "resp_1",
                "object": "response",
                "status": "completed",
                "model": request.body.get("model"),
                "output": [
                    {
                        "type": "message",
                        "id": "msg_1",
                        "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": "ok", "annotations": []}],
                    }
                ],
                "usage": {"input_tokens": 10, "output_tokens": 1, "total_tokens": 11},
            }
        )

    def _items_fault(self, items: list[dict[str, Any]]) -> Reply | None:
        for item in items:
            if (
                item.get("type") == "compaction"
                and item.get("encrypted_content") not in self.issued
            ):
                self.refusals += 1
                return error_reply("openai", 400, "The encrypted content could not be verified.")
        return None


def _item_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(item.get("output") or item.get("arguments") or "")
