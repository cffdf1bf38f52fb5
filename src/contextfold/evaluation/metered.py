"""A model that counts what every call through it cost, failed jobs' calls included.

A fold's ``usage`` covers only the jobs that committed; a user deciding on a
preset pays for every call, so each arm of ``contextfold eval`` talks to the
user's model through one of these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contextfold.core.messages import Message
from contextfold.llm.base import LLM, Completion


@dataclass
class MeteredModel:
    """``inner`` with the calls (attempts, retries included) and tokens it spent."""

    inner: LLM
    calls: int = 0
    tokens: int = 0
    name: str = ""

    def __post_init__(self) -> None:
        self.name = self.inner.name

    def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        return self._count(self.inner.complete(messages, max_tokens=max_tokens, schema=schema))

    def _count(self, completion: Completion) -> Completion:
        self.calls += completion.usage.calls
        self.tokens += completion.usage.input_tokens + completion.usage.output_tokens
        return completion
