"""The Anthropic Messages wire: ``system`` and ``messages`` in, a ``message`` (or its events) out.

A request reads as log messages through ``formats.anthropic_turns``: each
turn's own blocks (thinking, ``cache_control``, documents, images) are kept
with it, so what goes upstream is the client's request with the compacted
prompt in place of its conversation: the part of the prompt the client sent
(the latest turns, verbatim) goes as the client sent it in this request, the
rest (summaries, recalled lines) as text. A whole answer's ``content`` is
logged as an assistant message (tool uses as tool calls, the blocks kept); a
stream (``message_start``, ``content_block_*`` with text, thinking,
signature and ``input_json_delta`` pieces, ``message_delta``,
``message_stop``) is assembled to the same ``content`` first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message, check_json
from contextfold.core.provider_items import ProviderName, carried_folds
from contextfold.formats.anthropic_turns import answer_of, read_request, request_of
from contextfold.formats.provider_compaction import ANTHROPIC_COMPACTION_BETA, anthropic_turns
from contextfold.memory.matching import digest
from contextfold.memory.recalled import HEADER
from contextfold.server.proxy_cache import client_marked, with_breakpoints
from contextfold.server.proxy_sse import SseReader
from contextfold.server.proxy_upstream import refusal_body
from contextfold.server.proxy_wire import Conversation

ANTHROPIC_VERSION = "2023-06-01"
"""Sent upstream when the client names none (the SDKs always do)."""
_PASSED = ("anthropic-version", "anthropic-beta")


def aligned(prompt: list[Message], current: list[Message]) -> list[Message]:
    """``prompt`` with its tail that the client's ``current`` messages end with replaced by
    those (meta included: the blocks the client sent in this very request). The recall
    block, which sits in the newest turn, is passed over: the turns before it are the
    client's too."""
    out = list(prompt)
    i, j = len(out) - 1, len(current) - 1
    while i >= 0 and j >= 0:
        if digest(out[i]) == digest(current[j]):
            out[i] = current[j]
            j -= 1
        elif not _recalled(out[i]):
            break
        i -= 1
    return out


def _recalled(message: Message) -> bool:
    content = message.get("content")
    return message["role"] == "system" and isinstance(content, str) and content.startswith(HEADER)


def joined(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``turns`` with each run of one role made one turn (its blocks in order, tool results
    first), as the API requires: the recall block, text in a user turn, follows the
    client's latest user turn, which goes upstream as sent."""
    out: list[dict[str, Any]] = []
    for turn in turns:
        if out and out[-1]["role"] == turn["role"]:
            blocks = [*_blocks(out[-1]["content"]), *_blocks(turn["content"])]
            blocks.sort(key=lambda block: block.get("type") != "tool_result")
            out[-1] = {**out[-1], "content": blocks}
        else:
            out.append(turn)
    return out


def _blocks(content: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def own_turns(turns: Sequence[dict[str, Any]], client: Any) -> int:
    """How many leading ``turns`` the proxy wrote: those before the first of the client's."""
    sent = client if isinstance(client, list) else []
    return next((i for i, turn in enumerate(turns) if turn in sent), len(turns))


def _valid_turns(messages: Sequence[Message]) -> tuple[Any, list[dict[str, Any]]]:
    return request_of(messages, valid=True)


class MessageStream:
    """Feed it a Messages event stream in any pieces; ``message()`` is the answer once
    ``message_stop`` came."""

    end = "message_stop"

    def __init__(self) -> None:
        self._events = SseReader(self._event)
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self.stopped = False
        self.errored = False
        self.failed: str | None = None

    def feed(self, chunk: bytes) -> None:
        self._events.feed(chunk)

    def close(self) -> None:
        self._events.close()

    def _event(self, name: str, data: bytes) -> None:
        try:
            event = json.loads(data)
        except ValueError:
            self.failed = f"a stream event is not JSON: {data[:200]!r}"
            return
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "error" or name == "error":
            self.errored = True
            error = event.get("error") if isinstance(event, dict) else None
            self.failed = f"the stream carried an error: {json.dumps(error)}"
        elif kind == "message_stop":
            self.stopped = True
        elif isinstance(event, dict) and isinstance(event.get("index"), int):
            self._block(kind, event["index"], event)

    def _block(self, kind: Any, index: int, event: dict[str, Any]) -> None:
        if kind == "content_block_start" and isinstance(event.get("content_block"), dict):
            self._blocks[index] = dict(event["content_block"])
            return
        block = self._blocks.get(index)
        if block is None:
            return
        delta = event.get("delta")
        if kind == "content_block_delta" and isinstance(delta, dict):
            self._delta(index, block, delta)
        elif kind == "content_block_stop" and index in self._json:
            pieces = "".join(self._json.pop(index))
            try:
                block["input"] = json.loads(pieces) if pieces.strip() else {}
            except ValueError:
                self.failed = f"a tool use's input is not JSON: {pieces[:200]!r}"

    def _delta(self, index: int, block: dict[str, Any], delta: dict[str, Any]) -> None:
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = block.get("text", "") + str(delta.get("text", ""))
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + str(delta.get("thinking", ""))
        elif kind == "signature_delta":
            block["signature"] = block.get("signature", "") + str(delta.get("signature", ""))
        elif kind == "input_json_delta":
            self._json.setdefault(index, []).append(str(delta.get("partial_json", "")))
        elif kind == "citations_delta":
            block["citations"] = [*(block.get("citations") or ()), delta.get("citation")]

    @property
    def ended(self) -> bool:
        return self.stopped or self.errored

    @property
    def complete(self) -> bool:
        return self.stopped and self.failed is None

    def content(self) -> list[dict[str, Any]] | None:
        """The answer's content blocks as a whole answer has them, or None when incomplete."""
        if not self.complete:
            return None
        return [block for _, block in sorted(self._blocks.items())]

    def message(self) -> Message | None:
        content = self.content()
        return None if content is None else answer_of(content)

    def error_event(self, reason: str) -> bytes:
        """An ``error`` event as Anthropic sends one (the SDK raises it)."""
        error = {"type": "error", "error": {"type": "api_error", "message": reason}}
        return f"event: error\ndata: {json.dumps(error)}\n\n".encode()


class MessagesWire:
    """``POST /v1/messages`` to an Anthropic upstream."""

    name = "messages"
    upstream = "anthropic"
    upstream_path = "/messages"
    provider: ProviderName | None = "anthropic"
    keeps: str | None = None

    def __init__(self, *, breakpoints: bool = True) -> None:
        self.breakpoints = breakpoints
        """Mark where the prompt is stable for Anthropic's cache, when the client marked
        nothing (``contextfold.server.proxy_cache``)."""

    def conversation(self, body: dict[str, Any]) -> Conversation:
        limit = body.get("max_tokens")
        if "max_tokens" in body and (type(limit) is not int or limit < 1):
            raise InvalidInput("max_tokens must be a positive integer", field="max_tokens")
        # Plain JSON throughout, checked before anything is stored: the turns the log
        # already holds are matched by what a model sees, yet go upstream as sent now.
        check_json(body.get("messages"), "messages")
        return Conversation(read_request(body.get("system"), body.get("messages")))

    def upstream_body(self, body: dict[str, Any], prompt: list[Message]) -> dict[str, Any]:
        current = read_request(body.get("system"), body.get("messages"))
        # The rendered prompt and the client's checked turns: valid as they are; a fold
        # carrying Anthropic's compaction block goes first, as that block.
        system, turns = anthropic_turns(aligned(prompt, current), _valid_turns)
        out = {**body, "messages": joined(turns)}
        if system is None:
            out.pop("system", None)
        else:
            out["system"] = system
        if not self.breakpoints or client_marked(body) or client_marked(out):
            return out
        return with_breakpoints(out, own_turns(out["messages"], body.get("messages")))

    def upstream_headers(self, headers: Mapping[str, str], prompt: list[Message]) -> dict[str, str]:
        """The client's version and betas; the compaction beta added while the prompt
        carries a compaction block (Anthropic refuses the block without it)."""
        out = {name: headers[name] for name in _PASSED if name in headers}
        out.setdefault("anthropic-version", ANTHROPIC_VERSION)
        if carried_folds(prompt):
            betas = [b.strip() for b in out.get("anthropic-beta", "").split(",") if b.strip()]
            if ANTHROPIC_COMPACTION_BETA not in betas:
                betas.append(ANTHROPIC_COMPACTION_BETA)
            out["anthropic-beta"] = ",".join(betas)
        return out

    def answer(self, data: bytes) -> Message | None:
        try:
            body = json.loads(data)
        except ValueError:
            return None
        if not isinstance(body, dict) or not isinstance(body.get("content"), list):
            return None
        return answer_of(body["content"])

    def assembler(self) -> MessageStream:
        return MessageStream()

    def refusal(self, status: int, data: bytes, secrets: Iterable[str]) -> bytes:
        """Anthropic's error shape, its ``type`` kept when it is a plain word."""
        kept = json.loads(refusal_body(status, data, secrets))["error"]
        kind = kept["type"] or "invalid_request_error"
        message = f"the upstream refused the request (HTTP {status}, {kind})"
        return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


MESSAGES = MessagesWire()
UNMARKED_MESSAGES = MessagesWire(breakpoints=False)
"""The Messages wire without breakpoints: for a service whose ``cache_breakpoints``
setting is off, and for ``count_tokens`` (a mark changes no count)."""
