"""The model protocol, its records, and the retry loop every adapter shares.

An ``LLM`` takes messages and returns a ``Completion``: text, parsed JSON when a
``schema`` was asked for, and ``Usage`` (tokens, model, latency). The protocol
is what the library calls of a model, ``name`` and ``complete``, so a user's
model needs nothing more. ``Model`` is the base the adapters build on: it adds
``acomplete``, the async twin that behaves the same, and it owns
timeouts, retries with exponential backoff and jitter on 429/5xx/timeouts
(honouring ``Retry-After``), and the per-call token cap, so an adapter only
translates one request and maps its SDK's errors to ``ModelError``
(``status_error`` holds the HTTP status rules the adapters share).

Every attempt is charged to the running job's budget (``llm.budget``: calls,
deadline, cancel), and its timeout never reaches past the job's deadline.
Every attempt first passes ``check_allowed``: while model calls are blocked
(``contextfold.testing.block_model_calls`` or ``CONTEXTFOLD_BLOCK_MODEL_CALLS=1``)
only a model whose ``endpoint()`` is on this machine may run, so a test suite
cannot reach a paid API by accident.
"""

from __future__ import annotations

import asyncio
import contextvars
import email.utils
import json
import math
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, TypeVar, runtime_checkable
from urllib.parse import urlsplit

from contextfold.core.errors import ModelError
from contextfold.core.messages import Message
from contextfold.llm.budget import JobBudget, NoAnswer, call_within, current_budget

T = TypeVar("T")

HISTORY_OPEN = "<history>"
HISTORY_CLOSE = "</history>"


def material(text: str) -> str:
    """Mark the text a prompt asks to summarize.

    Part of the model contract: models read the tags as plain delimiters, and
    the offline stand-in uses them to tell the material from the instructions.
    """
    return f"{HISTORY_OPEN}\n{text}\n{HISTORY_CLOSE}"


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
    """A model's answer; ``refusal`` is set when the provider says the model refused."""

    text: str
    usage: Usage
    data: Any = None
    refusal: str | None = None


@runtime_checkable
class LLM(Protocol):
    """Messages in, text (or parsed JSON when ``schema`` is given) and usage out.

    Only what compaction, recall and evaluation call; ``Model.acomplete`` is
    the adapters' async twin for callers of a model itself.
    """

    name: str

    def complete(
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


@dataclass(frozen=True)
class CallLimits:
    """What the caller of one model call asks of it, over the model's own settings: its
    timeout in seconds and how many attempts it may make (None: the model's own)."""

    timeout: float | None = None
    attempts: int | None = None


_CALL_LIMITS: contextvars.ContextVar[CallLimits | None] = contextvars.ContextVar(
    "contextfold_call_limits", default=None
)


@contextmanager
def call_limits(*, timeout: float | None = None, attempts: int | None = None) -> Iterator[None]:
    """Within the block, every ``Model`` call takes ``timeout`` seconds an attempt and at
    most ``attempts`` attempts (a job's deadline still bounds them): for a caller that
    knows one call's size, like ``contextfold eval`` asking a long prompt, while the other
    callers of the same model keep its settings."""
    token = _CALL_LIMITS.set(CallLimits(timeout, attempts))
    try:
        yield
    finally:
        _CALL_LIMITS.reset(token)


WALL_GRACE_S = 1.0
"""How long past its own timeout an attempt may run before it is left behind."""


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
        cap = self._cap(max_tokens)
        call = partial(self._call, list(messages), cap, schema)
        completion, latency, calls = self.retrying(call)
        return _finish(completion, schema, latency, calls)

    def retrying(self, call: Callable[[], T]) -> tuple[T, float, int]:
        """``call`` (one HTTP attempt) under the retry policy and the job's budget:
        its result, the last attempt's seconds and the attempts made."""
        budget = current_budget()
        for attempt in range(self._attempts()):
            check_allowed(self)
            if budget is not None:
                budget.charge(self.name)
            started = time.perf_counter()
            try:
                result = self._attempt(call, budget)
            except RetryableError as exc:
                if budget is not None:
                    budget.note(exc)
                delay = self._backoff(attempt, exc)
                if budget is None:
                    time.sleep(delay)
                else:
                    budget.pause(delay, exc)
                continue
            return result, time.perf_counter() - started, attempt + 1
        raise ModelError(f"{self.name}: no attempt was made")

    async def acomplete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        cap = self._cap(max_tokens)
        budget = current_budget()
        for attempt in range(self._attempts()):
            check_allowed(self)
            if budget is not None:
                budget.charge(self.name)
            started = time.perf_counter()
            try:
                seconds = self.call_timeout()
                try:
                    completion = await asyncio.wait_for(
                        self._acall(list(messages), cap, schema), seconds + WALL_GRACE_S
                    )
                except TimeoutError:
                    raise RetryableError(f"{self.name}: no answer within {seconds:.3g} s") from None
            except RetryableError as exc:
                if budget is not None:
                    budget.note(exc)
                delay = self._backoff(attempt, exc)
                if budget is not None:
                    delay = budget.pause_for(delay, exc)
                await asyncio.sleep(delay)
                continue
            return _finish(completion, schema, time.perf_counter() - started, attempt + 1)
        raise ModelError(f"{self.name}: no attempt was made")

    def endpoint(self) -> str | None:
        """The base URL this model calls; the guard treats None (unknown) as remote."""
        return None

    def _attempt(self, call: Callable[[], T], budget: JobBudget | None) -> T:
        """One attempt, over about ``call_timeout()`` seconds after it began (or at a cancel)
        even when the server trickles its answer: the SDK's timeout bounds each read, not
        the whole. The grace leaves the SDK's own timeout (and a first client's setup) room."""
        seconds = self.call_timeout()
        try:
            return call_within(call, seconds + WALL_GRACE_S, budget)
        except NoAnswer:
            raise RetryableError(f"{self.name}: no answer within {seconds:.3g} s") from None

    def call_timeout(self) -> float:
        """Seconds one attempt may take: ``timeout`` (or the caller's, ``call_limits``),
        never past the running job's deadline."""
        asked = _CALL_LIMITS.get()
        own = (asked.timeout if asked is not None else None) or self.timeout
        budget = current_budget()
        return own if budget is None else budget.timeout(own)

    def _attempts(self) -> int:
        asked = _CALL_LIMITS.get()
        return (asked.attempts if asked is not None else None) or self.retry.attempts

    def _cap(self, max_tokens: int | None) -> int:
        """The call's token cap: what was asked, never above the model's own."""
        return min(max_tokens or self.max_tokens, self.max_tokens)

    def _backoff(self, attempt: int, exc: RetryableError) -> float:
        """Seconds to wait before the next attempt; re-raises after the last one."""
        if attempt + 1 >= self._attempts():
            raise exc
        return self.retry.delay(attempt, exc.retry_after)

    def _call(
        self, messages: list[Message], max_tokens: int, schema: Mapping[str, Any] | None
    ) -> Completion:
        raise NotImplementedError

    async def _acall(
        self, messages: list[Message], max_tokens: int, schema: Mapping[str, Any] | None
    ) -> Completion:
        return await asyncio.to_thread(self._call, messages, max_tokens, schema)


BLOCK_ENV = "CONTEXTFOLD_BLOCK_MODEL_CALLS"
_LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
_blocked = 0  # depth of nested block_model_calls(); a count so they compose
_blocked_lock = threading.Lock()


def set_blocked(delta: int) -> None:
    """Enter (+1) or leave (-1) a block on remote model calls; see ``contextfold.testing``."""
    global _blocked
    with _blocked_lock:
        _blocked += delta


def check_allowed(model: Model) -> None:
    """Refuse an attempt while calls are blocked, unless the model stays on this machine.

    The flag is process-wide, not per context, so calls made from worker
    threads and event loops a test starts are blocked too.
    """
    if not _blocked and os.environ.get(BLOCK_ENV, "") in ("", "0"):
        return
    url = model.endpoint()
    if url is not None and urlsplit(url).hostname in _LOCAL_HOSTS:
        return
    raise ModelError(
        f"model calls are blocked: {model.name} at {url} is not on 127.0.0.1 or localhost "
        f"(contextfold.testing.block_model_calls or {BLOCK_ENV}=1)"
    )


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds a server asks us to wait: ``retry-after-ms``, else ``retry-after`` (seconds or date)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            seconds = float(millis) / 1000
        except ValueError:
            pass
        else:
            if math.isfinite(seconds):
                return seconds
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def status_error(
    message: str, *, status: int, body: str | None, headers: Mapping[str, str]
) -> ModelError:
    """The error for an HTTP failure: 408, 429 and 5xx are worth another try, other 4xx not.

    ``x-should-retry`` (sent by OpenAI and Anthropic) overrides the status, as
    their own SDKs let it.
    """
    should = headers.get("x-should-retry")
    retry = should == "true" or (should != "false" and (status in (408, 429) or status >= 500))
    if retry:
        return RetryableError(message, status=status, body=body, retry_after=retry_after(headers))
    return ModelError(message, status=status, body=body)


def body_text(body: object) -> str | None:
    """An SDK's error body (decoded JSON, text or None) as the text ``ModelError.body`` keeps."""
    if body is None or isinstance(body, str):
        return body
    try:
        return json.dumps(body, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(body)


def json_instruction(schema: Mapping[str, Any]) -> str:
    """What the system prompt says when JSON is asked for; names the schema and the word JSON."""
    return (
        "Answer with a single JSON object and nothing else. It must follow this JSON schema:\n"
        + json.dumps(schema, ensure_ascii=False)
    )


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
    return Completion(completion.text, usage, data, completion.refusal)


def parse_json(text: str) -> Any:
    """JSON from a model's text (a Markdown code fence around it is fine); None if invalid.

    A fence may follow a line of preamble ("Here is the summary:"), as models
    without a JSON mode (Anthropic, many local ones) often write. Invalid JSON
    is a bad answer, not a failed call: checked compaction rejects it and asks
    again.
    """
    body = text.strip()
    fence = body.find("\n```")
    if not body.startswith("```") and fence >= 0:
        body = body[fence + 1 :]
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0]
    try:
        return json.loads(body)
    except ValueError:
        return None
