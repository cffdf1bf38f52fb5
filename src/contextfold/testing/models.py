"""Model providers for load and fault tests of a worker pool, registered on import.

``contextfold worker --plugin contextfold.testing.models`` makes them known to
a worker, as a user's own plugin module would register theirs:

- ``slow:SECONDS``: the offline stand-in's answers, each after a pause (a
  hosted model's latency, with no server and no cost);
- ``failing``: every call raises ``ModelError`` (a poison job).

Neither is an ``OfflineModel``, so jobs use them as they use a real model:
within the job's budget and deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextfold.core.errors import InvalidInput, ModelError
from contextfold.core.messages import Message
from contextfold.llm.base import LLM, Completion
from contextfold.llm.offline import OfflineModel
from contextfold.llm.registry import register_provider


@dataclass
class SlowModel:
    """The offline stand-in, answering each call after ``delay_s`` seconds."""

    delay_s: float
    inner: OfflineModel = field(default_factory=OfflineModel)
    name: str = "slow"

    def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        time.sleep(self.delay_s)
        return self.inner.complete(messages, max_tokens=max_tokens, schema=schema)

    async def acomplete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        await asyncio.sleep(self.delay_s)
        return self.inner.complete(messages, max_tokens=max_tokens, schema=schema)


@dataclass
class FailingModel:
    """A model whose every call fails."""

    name: str = "failing"

    def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        raise ModelError("the failing test model always fails")

    async def acomplete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        return self.complete(messages, max_tokens=max_tokens, schema=schema)


def _slow(rest: str, **options: Any) -> LLM:
    try:
        delay = float(rest)
    except ValueError:
        raise InvalidInput(
            f"a slow model is 'slow:SECONDS', not 'slow:{rest}'", field="model"
        ) from None
    if not 0 <= delay <= 600:
        raise InvalidInput("a slow model's pause is 0..600 seconds", field="model")
    return SlowModel(delay)


def _failing(rest: str, **options: Any) -> LLM:
    return FailingModel()


register_provider("slow", _slow)
register_provider("failing", _failing)
