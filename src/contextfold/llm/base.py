"""The model protocol, its records, and the retry loop every adapter shares.

An ``LLM`` takes messages and returns a ``Completion``: text, parsed JSON when a
``schema`` was asked for, and ``Usage`` (tokens, model, latency). Sync and async
twins behave the same. ``Model`` is the base the adapters build on: it owns
timeouts, retries with exponential backoff and jitter on 429/5xx/timeouts
(honouring ``Retry-After``), and the per-call token cap, so an adapter only
translates one request and maps its SDK's errors to ``ModelError``.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from contextfold.errors import ModelError
from contextfold.messages import Message


@dataclass(frozen=True)
class Usage:
    """What one completion cost; ``calls`` counts attempts, retries included."""

    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0
    calls: int = 1

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.model or other.model,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.latency_s + other.latency_s,
            self.calls + other.calls,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "latency_s": round(self.latency_s, 4),
            "calls": self.calls,
        }


@dataclass(frozen=True)
class Completion:
    text: str
    usage: Usage
    data: Any = None


@runtime_checkable
class LLM(Protocol):
    """Messages in, text (or parsed JSON when ``schema`` is given) and usage out."""

    name: str

    def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion: ...

    async def acomplete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion: ...


class RetryableError(ModelError):
    """A failure worth another try: 429, 5xx, timeout, connection reset."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        body: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, status=status, body=body)
        self.retry_after = retry_after


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter, capped; ``Retry-After`` wins when given."""

    attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 20.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_delay)
        return random.uniform(0, min(self.max_delay, self.base_delay * 2**attempt))


@dataclass
class Model:
    """Base of the adapters: subclasses implement ``_call`` and ``_acall`` for one attempt."""

    name: str
    timeout: float = 60.0
    max_tokens: int = 1024
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        cap = min(max_tokens or self.max_tokens, self.max_tokens)
        for attempt in range(self.retry.attempts):
            started = time.perf_counter()
            try:
                completion = self._call(list(messages), cap, schema)
            except RetryableError as exc:
                if attempt + 1 >= self.retry.attempts:
                    raise
                time.sleep(self.retry.delay(attempt, exc.retry_after))
                continue
            return _finish(completion, schema, time.perf_counter() - started, attempt + 1)
        raise ModelError(f"{self.name}: no attempt was made")

    async def acomplete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        cap = min(max_tokens or self.max_tokens, self.max_tokens)
        for attempt in range(self.retry.attempts):
            started = time.perf_counter()
            try:
                completion = await self._acall(list(messages), cap, schema)
            except RetryableError as exc:
                if attempt + 1 >= self.retry.attempts:
                    raise
                await asyncio.sleep(self.retry.delay(attempt, exc.retry_after))
                continue
            return _finish(completion, schema, time.perf_counter() - started, attempt + 1)
        raise ModelError(f"{self.name}: no attempt was made")

    def _call(
        self, messages: list[Message], max_tokens: int, schema: Mapping[str, Any] | None
    ) -> Completion:
        raise NotImplementedError

    async def _acall(
        self, messages: list[Message], max_tokens: int, schema: Mapping[str, Any] | None
    ) -> Completion:
        return await asyncio.to_thread(self._call, messages, max_tokens, schema)


def _finish(
    completion: Completion, schema: Mapping[str, Any] | None, latency: float, calls: int
) -> Completion:
    """Stamp latency and attempts; parse JSON when a schema was asked for."""
    usage = Usage(
        completion.usage.model,
        completion.usage.input_tokens,
        completion.usage.output_tokens,
        latency,
        calls,
    )
    data = completion.data
    if schema is not None and data is None:
        data = parse_json(completion.text)
    return Completion(completion.text, usage, data)


def parse_json(text: str) -> Any:
    """JSON from a model's text (a Markdown code fence around it is fine); None if invalid.

    Invalid JSON is a bad answer, not a failed call: checked compaction rejects
    it and asks again.
    """
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0]
    try:
        return json.loads(body)
    except ValueError:
        return None
