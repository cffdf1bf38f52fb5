"""Checked compaction: a model's summary is verified before it can become a fold.

1. The answer is rejected, and asked for again, when it is empty, looks like an
   error message or a refusal, exceeds its length cap, or is not valid JSON
   where JSON was asked for. After ``attempts`` rejections (or failed calls) the
   job is dropped with ``SummaryRejected``: the view keeps its previous folds,
   and a failed call never becomes a fold.
2. Must-keep items are extracted deterministically from the folded range with
   the same extractor the offline strategy uses (paths, URLs, identifiers,
   numbers with units, dates, error strings, user constraints); every item
   missing from the answer is appended verbatim in a ``Pinned`` list. Pins
   get as many characters as the answer may have (``pin_chars``), the newest
   items first, so a fold folded again and again cannot grow without bound;
   the rest stay in the log and are counted in ``pins_dropped``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contextfold.core.artifacts import extract_artifacts, missing_artifacts
from contextfold.core.errors import ModelError
from contextfold.core.messages import Message
from contextfold.llm.base import LLM, Completion, Usage

PINNED_HEADER = "Pinned (verbatim from the folded messages):"
# A transcript's speaker labels ("[assistant Planner -> User]: ") frame the
# material; they are not part of it, so nothing in them is pinned.
_LABEL = re.compile(r"^[ \t]*\[[^\]\n]{1,80}\]: ", re.MULTILINE)
_ERRORISH = re.compile(
    r"^\s*(?:error\b|exception\b|traceback \(most recent call last\)|internal server error"
    r"|rate limit|i'?m sorry\b|i cannot\b|i can'?t\b|as an ai\b|<!doctype html|<html)",
    re.IGNORECASE,
)


class SummaryRejected(ModelError):
    """The model's answers were unusable ``attempts`` times; the job is dropped."""

    def __init__(self, reasons: Sequence[str], usage: Usage | None) -> None:
        self.reasons = list(reasons)
        self.usage = usage
        super().__init__("summary rejected: " + "; ".join(self.reasons))


@dataclass(frozen=True)
class Checked:
    """An accepted answer: its text with pins appended, parsed data, pins, total usage."""

    text: str
    data: Any
    pinned: tuple[str, ...]
    usage: Usage
    attempts: int
    pins_dropped: int = 0


def rejection(completion: Completion, *, max_chars: int, want_json: bool) -> str | None:
    """Why an answer is unusable, or None when it may become a fold."""
    text = completion.text.strip()
    if not text:
        return "empty answer"
    if _ERRORISH.search(text):
        return f"answer looks like an error message: {text[:80]!r}"
    if len(text) > max_chars:
        return f"answer of {len(text)} characters exceeds the cap of {max_chars}"
    if want_json and not isinstance(completion.data, Mapping):
        return "answer is not the JSON object that was asked for"
    return None


def summarize_checked(
    llm: LLM,
    messages: Sequence[Message],
    *,
    source: str,
    max_tokens: int,
    schema: Mapping[str, Any] | None = None,
    attempts: int = 3,
    pin: bool = True,
    pin_chars: int | None = None,
    accept: Callable[[Completion], str | None] | None = None,
) -> Checked:
    """Ask ``llm``, check the answer, pin what it dropped from ``source``.

    ``accept`` adds a strategy's own check (it returns a reason to reject).
    Answers are capped at about four characters a token of ``max_tokens``.
    """
    reasons: list[str] = []
    usage: Usage | None = None
    max_chars = answer_chars(max_tokens)
    for attempt in range(1, attempts + 1):
        try:
            completion = llm.complete(messages, max_tokens=max_tokens, schema=schema)
        except ModelError as exc:
            reasons.append(f"call failed: {exc}")
            continue
        usage = completion.usage if usage is None else usage + completion.usage
        reason = rejection(completion, max_chars=max_chars, want_json=schema is not None)
        if reason is None and accept is not None:
            reason = accept(completion)
        if reason is not None:
            reasons.append(reason)
            continue
        pinned, dropped = (
            pins(source, completion.text, max_chars if pin_chars is None else pin_chars)
            if pin
            else ((), 0)
        )
        return Checked(
            with_pins(completion.text.strip(), pinned),
            completion.data,
            pinned,
            usage,
            attempt,
            dropped,
        )
    raise SummaryRejected(reasons, usage)


def answer_chars(max_tokens: int) -> int:
    """The most characters an answer of ``max_tokens`` may have (about four a token)."""
    return max_tokens * 4 + 200


def pins(source: str, answer: str, chars: int) -> tuple[tuple[str, ...], int]:
    """The must-keep items of ``source`` missing from ``answer``, newest first within ``chars``.

    Also how many missing items did not fit. An answer that summarizes
    several ranges at once pins each range against its own part.
    """
    missing = missing_artifacts(must_keep(source), answer)
    pinned = newest_within(missing, chars)
    return pinned, len(missing) - len(pinned)


def newest_within(
    items: Sequence[str], limit: int, cost: Callable[[str], int] = lambda item: len(item) + 3
) -> tuple[str, ...]:
    """The latest items (in their order) whose pinned lines fit in ``limit``.

    ``cost`` is what one pinned line takes: characters by default, tokens
    for a strategy that budgets in tokens.
    """
    kept: list[str] = []
    used = 0
    for item in reversed(items):
        used += cost(item)
        if used > limit:
            break
        kept.append(item)
    return tuple(reversed(kept))


def must_keep(source: str) -> list[str]:
    """The items a summary of ``source`` must keep: artifacts of its material, labels aside."""
    return extract_artifacts(_LABEL.sub("", source))


def with_pins(text: str, pinned: Sequence[str]) -> str:
    if not pinned:
        return text
    return text + "\n\n" + PINNED_HEADER + "\n" + "\n".join(f"- {item}" for item in pinned)
