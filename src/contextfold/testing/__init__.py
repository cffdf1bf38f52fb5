"""Test seams shipped with the package, so users can test their own pipelines.

``ScriptedModel`` answers from a queue: strings, dicts (JSON answers),
``Completion`` records (a refusal, say), exceptions (raised), or functions of
the messages. It records every call.

``block_model_calls()`` makes every ``Model``-based adapter refuse to call a
server that is not on 127.0.0.1 or localhost, so a test cannot reach a paid
API by accident; ``CONTEXTFOLD_BLOCK_MODEL_CALLS=1`` does the same for a
whole process (set it in CI).

``bad_answers()`` is the corpus of model answers that must never become a fold
(refusals, error pages and bodies, null): serve them to a pipeline of yours
and check that nothing is committed (``SchemaFilling`` serves one as text, or
in every field of the JSON a strategy asks for). Adding a case is adding a
line to ``bad_answers.txt`` beside this module.
"""

from __future__ import annotations

import importlib.resources
import json
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from contextfold.core.errors import ModelError
from contextfold.core.messages import Message, text_of
from contextfold.llm.base import Completion, Usage, parse_json, set_blocked

Reply = str | Mapping[str, Any] | Completion | BaseException | Callable[[Sequence[Message]], str]


@dataclass
class ScriptedCall:
    messages: list[Message]
    max_tokens: int | None
    schema: Mapping[str, Any] | None


@dataclass
class ScriptedModel:
    """A model double: replies come from ``replies`` in order; ``default`` when it runs dry."""

    replies: Iterable[Reply] = ()
    default: Reply | None = None
    name: str = "scripted"
    calls: list[ScriptedCall] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._queue: deque[Reply] = deque(self.replies)

    def add(self, *replies: Reply) -> None:
        self._queue.extend(replies)

    def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        self.calls.append(ScriptedCall(list(messages), max_tokens, schema))
        if self._queue:
            reply = self._queue.popleft()
        elif self.default is not None:
            reply = self.default
        else:
            raise ModelError(f"{self.name}: no scripted reply left for call {len(self.calls)}")
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, Completion):
            return reply
        if callable(reply):
            reply = reply(messages)
        text = reply if isinstance(reply, str) else json.dumps(reply)
        data = parse_json(text) if schema is not None else None
        prompt_chars = sum(len(text_of(m)) for m in messages)
        usage = Usage(self.name, prompt_chars // 4 + 1, len(text) // 4 + 1, 0.0, 1)
        return Completion(text, usage, data)

    async def acomplete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        return self.complete(messages, max_tokens=max_tokens, schema=schema)


@contextmanager
def block_model_calls() -> Iterator[None]:
    """Block remote model calls while inside; raises ModelError("model calls are blocked ...").

    Works as a pytest fixture body too: ``with block_model_calls(): yield``.
    Blocks nest, and hold for every thread and event loop of the process.
    """
    set_blocked(1)
    try:
        yield
    finally:
        set_blocked(-1)


def bad_answers() -> list[str]:
    """The corpus: one answer a line, ``\\n`` ``\\r`` ``\\t`` escaped, ``\\e`` the empty one."""
    corpus = importlib.resources.files("contextfold.testing").joinpath("bad_answers.txt")
    cases = []
    for line in corpus.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        text = line.replace("\\n", "\n").replace("\\r", "\r").replace("\\t", "\t")
        cases.append("" if line == "\\e" else text)
    return cases


class SchemaFilling:
    """A model that answers ``case`` in the shape asked for: as text, or in every JSON field."""

    name = "schema-filling"

    def __init__(self, case: str) -> None:
        self.case = case
        self.calls = 0

    def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        self.calls += 1
        if schema is None:
            return Completion(self.case, Usage(self.name))
        text = json.dumps(_filled(schema, self.case))
        return Completion(text, Usage(self.name), parse_json(text))

    async def acomplete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        return self.complete(messages, max_tokens=max_tokens, schema=schema)


def _filled(schema: Mapping[str, Any], case: str) -> dict[str, Any]:
    """The JSON ``schema`` asks for, with ``case`` in every field."""
    out: dict[str, Any] = {}
    for key, spec in schema.get("properties", {}).items():
        kind = spec.get("type")
        out[key] = [case] if kind == "array" else {"note": case} if kind == "object" else case
    return out
