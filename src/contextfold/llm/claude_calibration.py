"""The Claude factor measured on real prompts by the provider's own count, off the hot path.

The offline estimate (``contextfold.core.claude_tokens``) multiplies
``o200k_base`` counts by a factor high enough for every conversation measured,
so it usually gives away some of the window. Where the upstream answers
Anthropic's ``POST /v1/messages/count_tokens``, a ``Calibration`` asks it to
count a Messages body that is going upstream anyway and compares that with the
``o200k_base`` count of the same body. The ratio moves with the content (prose,
code, tool output: ``bench/anthropic_tokens.py`` measures it from 1.32 to 1.81
on one vocabulary), and one factor serves every conversation of the model, so
the model's factor is the highest of its last ``KEEP`` ratios times ``MARGIN``.
The proxy uses it only where it is higher than the estimate's
(``contextfold.server.proxy_budget``): it catches content and models the
estimate was not measured on, and never gives away the estimate's margin.

It never slows or fails a call: ``observe`` only starts a background count when
the model's factor is missing or older than ``refresh_s`` (and no count for it
is running), the body is tokenized on a worker thread, a failed count is logged
and tried again ``retry_s`` later, and a ratio outside ``BOUNDS`` (a count that
cannot be right) is not kept. Bodies smaller than ``min_tokens`` are not
counted (a later one is, ``retry_s`` later): the few tokens the endpoint adds
to every request would weigh on the ratio.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from contextfold.core.claude_tokens import model_name, vocabulary
from contextfold.core.tokens import (
    IMAGE_TOKENS,
    REPLY_PRIMING,
    TOKENS_PER_CALL,
    TOKENS_PER_MESSAGE,
    TokenCounter,
    get_counter,
)

log = logging.getLogger("contextfold.claude_calibration")

CountTokens = Callable[[Mapping[str, Any]], Awaitable[int]]
"""Counts a Messages body (``model``, ``system``, ``messages``, ``tools``) as the provider does."""

MARGIN = 1.05
KEEP = 16
BOUNDS = (0.5, 4.0)
COUNTED_FIELDS = ("model", "system", "messages", "tools", "tool_choice", "thinking")
"""The Messages request fields that ``count_tokens`` takes; the others are not sent to it."""


class Calibration:
    """Per-model Claude factors from the provider's count; ``count`` does the counting."""

    def __init__(
        self,
        count: CountTokens,
        *,
        refresh_s: float = 900.0,
        retry_s: float = 600.0,
        min_tokens: int = 2000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._count = count
        self.refresh_s = refresh_s
        self.retry_s = retry_s
        self.min_tokens = min_tokens
        self._clock = clock
        self._counter = get_counter("o200k_base")
        self._factors: dict[str, float] = {}
        self._ratios: dict[str, deque[float]] = {}
        self._not_before: dict[str, float] = {}
        self._running: dict[str, asyncio.Task[float | None]] = {}

    def factor(self, model: str) -> float | None:
        """The measured factor of ``model``, however old; None before a count succeeded."""
        return self._factors.get(_key(model))

    def observe(self, body: Mapping[str, Any]) -> asyncio.Task[float | None] | None:
        """Start counting ``body`` in the background when its model's factor is due; return
        the task (None when nothing was started). Never raises, never waits."""
        model = body.get("model")
        if not isinstance(model, str) or vocabulary(model) is None:
            return None
        key = _key(model)
        now = self._clock()
        if key in self._running or now < self._not_before.get(key, 0.0):
            return None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        task = loop.create_task(self.refresh(body))
        self._running[key] = task
        task.add_done_callback(lambda _: self._running.pop(key, None))
        return task

    async def aclose(self) -> None:
        """Cancel the counts still running (the server's shutdown): none outlives it."""
        running = list(self._running.values())
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    async def refresh(self, body: Mapping[str, Any]) -> float | None:
        """Count ``body`` now and keep its model's factor; None (logged) when the count
        failed, was implausible, or the body was too small to say."""
        model = str(body.get("model"))
        key = _key(model)
        self._not_before[key] = self._clock() + self.retry_s
        local = await asyncio.to_thread(local_tokens, body, self._counter)
        if local < self.min_tokens:
            return None
        sent = {name: body[name] for name in COUNTED_FIELDS if name in body}
        try:
            provider = await self._count(sent)
        except Exception as exc:  # any failure of the count leaves the estimate in place
            log.warning("count_tokens for %s failed, the estimate stays: %r", model, exc)
            return None
        ratio = provider / local if isinstance(provider, int) and provider > 0 else 0.0
        if not BOUNDS[0] <= ratio <= BOUNDS[1]:
            log.warning(
                "count_tokens for %s said %r for %d local tokens: not kept", model, provider, local
            )
            return None
        ratios = self._ratios.setdefault(key, deque(maxlen=KEEP))
        ratios.append(ratio)
        factor = self._factors[key] = round(max(ratios) * MARGIN, 4)
        self._not_before[key] = self._clock() + self.refresh_s
        log.info(
            "%s: %d tokens by count_tokens, %d by o200k_base: factor %.3f",
            model,
            provider,
            local,
            factor,
        )
        return factor


def local_tokens(body: Mapping[str, Any], counter: TokenCounter) -> int:
    """A Messages body counted as ``TokenCounter.messages`` counts the same conversation
    in the chat shape: so the ratio of the provider's count to it scales a view's counts.
    Thinking blocks count nothing: the provider ignores those of earlier turns."""
    count = counter.text
    total = REPLY_PRIMING + _blocks(body.get("system"), count)
    if body.get("system"):
        total += TOKENS_PER_MESSAGE
    for message in _items(body.get("messages")):
        total += TOKENS_PER_MESSAGE + _blocks(message.get("content"), count)
    for tool in _items(body.get("tools")):
        total += count(json.dumps(tool, ensure_ascii=False))
    return total


def _blocks(content: Any, count: Callable[[str], int]) -> int:
    if isinstance(content, str):
        return count(content)
    total = 0
    for block in _items(content):
        kind = block.get("type")
        if kind == "text":
            total += count(str(block.get("text", "")))
        elif kind == "tool_use":
            arguments = json.dumps(block.get("input", {}), ensure_ascii=False)
            total += TOKENS_PER_CALL + count(f"{block.get('id', '')}{block.get('name', '')}")
            total += count(arguments)
        elif kind == "tool_result":
            total += count(str(block.get("tool_use_id", ""))) + _blocks(block.get("content"), count)
        elif kind in ("image", "document"):
            total += IMAGE_TOKENS
    return total


def _items(value: Any) -> Iterable[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _key(model: str) -> str:
    return model_name(model)
