"""One answer or one grade: a model call that may fail, timed to its prompt, kept for audit.

Every call ``contextfold eval`` makes to answer a question or a probe (``--model``)
or to grade an answer (``--judge``) goes through ``Asker``:

- its timeout is ``--timeout`` when given, else sized to the prompt:
  ``BASE_TIMEOUT_S`` plus the prompt's tokens read at ``READ_RATE`` tokens a
  second (a small model on a CPU reads a few hundred; this assumes less, so a
  slow full-context answer is waited for rather than abandoned and asked again);
- it is made once (no retry by the adapter): a failure (timeout, HTTP 5xx,
  refusal, connection) is written down with its reason and never ends the run,
  and a re-run with the same ``--results`` asks it again;
- it is written to the ledger as it comes, and an item the ledger holds as
  done is not asked again: the record read back stands for the call, its
  usage included, so a resumed run's figures equal an uninterrupted run's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from contextfold.core.errors import ContextfoldError, ModelError
from contextfold.core.messages import Message, text_of
from contextfold.core.tokens import TokenCounter
from contextfold.evaluation.ledger import Ledger
from contextfold.evaluation.probes import exact_match
from contextfold.llm.base import LLM, call_limits

BASE_TIMEOUT_S = 60.0
READ_RATE = 50.0
"""Prompt tokens a second the sized timeout assumes a model reads."""


def call_seconds(prompt_tokens: int, timeout: float | None) -> float:
    """The timeout of one call: ``timeout`` when the user gave one, else sized to the prompt."""
    if timeout is not None:
        return timeout
    return BASE_TIMEOUT_S + prompt_tokens / READ_RATE


def failure_reason(exc: Exception) -> str:
    """A short reason a call failed, the same for the same kind of failure (counted by it)."""
    status = exc.status if isinstance(exc, ModelError) else None
    text = str(exc)
    if status is not None:
        return f"HTTP {status}"
    if "no answer within" in text:
        return "timeout"
    if "connection" in text.lower():
        return "connection"
    return type(exc).__name__


@dataclass
class Asker:
    """Makes (or reads back) answer and grade calls; see the module docstring."""

    ledger: Ledger
    counter: TokenCounter
    timeout: float | None = None

    def call(
        self,
        key: str,
        kind: str,
        llm: LLM,
        prompt: Callable[[], Sequence[Message]],
        max_tokens: int,
    ) -> dict[str, Any]:
        """The record of ``key``: read back when done, else ``llm`` asked ``prompt()`` once
        (built only then: a resumed run renders nothing it does not ask)."""
        done = self.ledger.done(key)
        if done is not None:
            return done
        messages = prompt()
        tokens = self.counter.messages(messages)
        record: dict[str, Any] = {
            "kind": kind,
            "key": key,
            "prompt_tokens": tokens,
            "text": None,
            "calls": 1,
            "tokens": 0,
            "seconds": 0.0,
            "error": None,
        }
        started = time.perf_counter()
        try:
            with call_limits(timeout=call_seconds(tokens, self.timeout), attempts=1):
                completion = llm.complete(messages, max_tokens=max_tokens)
        except ContextfoldError as exc:
            record.update(error=str(exc), reason=failure_reason(exc))
        else:
            usage = completion.usage
            record.update(
                text=completion.text,
                calls=usage.calls,
                tokens=usage.input_tokens + usage.output_tokens,
            )
            if completion.refusal is not None:
                record.update(error=f"refused: {completion.refusal}", reason="refused")
        record["seconds"] = round(time.perf_counter() - started, 3)
        self.ledger.write(record)
        return record

    def exact(
        self, key: str, prompt: Callable[[], Sequence[Message]], keys: Sequence[str]
    ) -> dict[str, Any]:
        """The offline grade of ``key``: whether ``prompt()`` holds the gold's key words."""
        done = self.ledger.done(key)
        if done is not None:
            return done
        messages = prompt()
        record = {
            "kind": "exact",
            "key": key,
            "prompt_tokens": self.counter.messages(messages),
            "verdict": exact_match(keys, "\n".join(text_of(m) for m in messages)),
            "error": None,
        }
        self.ledger.write(record)
        return record
