"""Checked compaction: a model's summary is verified before it can become a fold.

1. Every answer goes through the one judge of model answers
   (``contextfold.strategies.answers``): refusals, error pages and bodies,
   error or refusal wording that is not the folded material's, null values,
   answers that miss the strategy's schema or sections, answers longer than
   their cap or than the range they replace. An over-long prose answer is
   trimmed at a sentence end when the trimmed answer passes.
2. A rejected answer is asked for again, and the retry says what was wrong:
   the prompt gains the previous answer (clipped) and a note naming the reason
   and the length cap, which is also sent as ``max_tokens``. A strategy that
   asked for JSON and can use less (``Least``) asks for less from then on:
   the smaller task in plain prose, without the schema
   (``strategies.lenient``), so the request that failed is not sent again. A
   failed call is retried as it was; every call counts against the job's
   ``JobLimits``. After ``attempts`` rejections (or failed calls) the job is
   dropped with ``SummaryRejected``: the view keeps its previous folds, and no
   rejected answer ever becomes a fold.
3. Must-keep items are extracted deterministically from the folded range with
   the same extractor the offline strategy uses (``extract.artifacts.find_facts``:
   paths, URLs, identifiers with their key, quantities, dates, error lines,
   user constraints); every item missing from the answer is appended verbatim in
   a ``Pinned`` list. Pins get as many characters as the answer may have
   (``pin_chars``), the newest items first, so a fold folded again and again
   cannot grow without bound; the rest stay in the log and are counted in
   ``pins_dropped``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from contextfold.core.errors import ModelError
from contextfold.core.messages import Message
from contextfold.core.tokens import TokenCounter
from contextfold.extract.artifacts import Artifact, find_facts, missing_artifacts
from contextfold.llm.base import LLM, Completion, Usage
from contextfold.strategies.answers import Expected, judge, material_of
from contextfold.strategies.lenient import Least, clipped, smaller_request

PINNED_HEADER = "Pinned (verbatim from the folded messages):"
# A transcript's speaker labels ("[assistant Planner -> User]: ") frame the
# material; they are not part of it, so nothing in them is pinned.
_LABEL = re.compile(r"^[ \t]*\[[^\]\n]{1,80}\]: ", re.MULTILINE)


class SummaryRejected(ModelError):
    """The model's answers were unusable ``attempts`` times; the job is dropped."""

    def __init__(self, reasons: Sequence[str], usage: Usage | None) -> None:
        self.reasons = list(reasons)
        self.usage = usage
        super().__init__("summary rejected: " + "; ".join(self.reasons))


@dataclass(frozen=True)
class CheckedAnswer:
    """An accepted answer: its text with pins appended, parsed data, pins, total usage."""

    text: str
    data: Any
    pinned: tuple[str, ...]
    usage: Usage
    attempts: int
    pins_dropped: int = 0


def summarize_checked(
    llm: LLM,
    messages: Sequence[Message],
    *,
    source: str,
    max_tokens: int,
    schema: Mapping[str, Any] | None = None,
    ask_schema: Mapping[str, Any] | None = None,
    attempts: int = 3,
    pin: bool = True,
    pin_chars: int | None = None,
    accept: Callable[[Completion], str | None] | None = None,
    tokens_before: int | None = None,
    counter: TokenCounter | None = None,
    least: Least | None = None,
) -> CheckedAnswer:
    """Ask ``llm``, judge the answer, pin what it dropped from ``source``.

    ``accept`` adds a strategy's own check (it returns a reason to reject);
    ``tokens_before`` is what the folded range costs, which no answer may
    exceed; ``least`` what a JSON-asking strategy can use of less (see
    ``strategies.lenient``). Tokens are ``counter``'s, or about four
    characters each without one. ``ask_schema`` is JSON the model is asked for
    but not held to: a strategy that also reads prose from a small model passes
    its schema here, and its ``accept`` reads whatever comes back.
    """
    expected = Expected(
        material_of(messages),
        max_tokens,
        counter.text if counter is not None else estimated_tokens,
        tokens_before,
        schema,
        accept,
        least if schema is not None else None,
    )
    reasons: list[str] = []
    usage: Usage | None = None
    asked = list(messages)
    asked_schema = schema if schema is not None else ask_schema
    for attempt in range(1, attempts + 1):
        try:
            completion = llm.complete(asked, max_tokens=max_tokens, schema=asked_schema)
        except ModelError as exc:
            reasons.append(f"call failed: {exc}")
            continue
        usage = completion.usage if usage is None else usage + completion.usage
        verdict = judge(completion, expected)
        if verdict.answer is None:
            reason = str(verdict.reason)
            reasons.append(reason)
            least_asked = expected.least
            if least_asked is not None:
                asked_schema = None
                expected = replace(expected, prose=True)
                asked = [
                    *messages,
                    *smaller_request(completion.text, reason, expected.limit, least_asked),
                ]
            else:
                asked = [
                    *messages,
                    *follow_up(completion.text, reason, expected.limit, asked_schema),
                ]
            continue
        answer = verdict.answer
        pinned, dropped = (
            pins(source, answer.text, answer_chars(max_tokens) if pin_chars is None else pin_chars)
            if pin
            else ((), 0)
        )
        return CheckedAnswer(
            with_pins(answer.text.strip(), pinned),
            answer.data,
            pinned,
            usage,
            attempt,
            dropped,
        )
    raise SummaryRejected(reasons, usage)


def follow_up(
    answer: str, reason: str, limit: int, schema: Mapping[str, Any] | None
) -> list[Message]:
    """What a retry adds to the prompt: the rejected answer, clipped, and what was wrong.

    ``limit`` is the tokens the answer may have; the note asks for words, about
    three words for four tokens.
    """
    form = "one JSON object that follows the schema" if schema is not None else "plain text"
    return [
        {"role": "assistant", "content": clipped(answer)},
        {
            "role": "user",
            "content": (
                f"That answer cannot be used: {reason}. Answer again with only the summary "
                f"of the history above, as {form}, in at most {limit * 3 // 4} words."
            ),
        },
    ]


def estimated_tokens(text: str) -> int:
    """About four characters a token, for a caller without a token counter."""
    return len(text) // 4 + 1


def answer_chars(max_tokens: int) -> int:
    """The most characters an answer of ``max_tokens`` may have (about four a token)."""
    return max_tokens * 4 + 200


def pins(source: str, answer: str, chars: int) -> tuple[tuple[str, ...], int]:
    """The must-keep facts of ``source`` missing from ``answer``, newest first within ``chars``.

    Also how many missing facts did not fit. A fact with a key is missing when
    its value is (the answer may word the key as it likes). An answer that
    summarizes several ranges at once pins each range against its own part.
    """
    facts = must_keep_facts(source)
    absent = set(missing_artifacts([f.text for f in facts], answer))
    missing = [f.shown for f in facts if f.text in absent]
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


def must_keep_facts(source: str) -> list[Artifact]:
    """The facts a summary of ``source`` must keep, speaker labels aside."""
    return find_facts(_LABEL.sub("", source))


def must_keep(source: str) -> list[str]:
    """The items a summary of ``source`` must keep, as they are pinned (a value with its key)."""
    return [fact.shown for fact in must_keep_facts(source)]


def with_pins(text: str, pinned: Sequence[str]) -> str:
    if not pinned:
        return text
    return text + "\n\n" + PINNED_HEADER + "\n" + "\n".join(f"- {item}" for item in pinned)


def without_pins(text: str) -> str:
    """A fold's text without its ``Pinned`` list: what a summarizer folding it again reads.

    The list is carried over instead: checked compaction pins each item again
    that the new answer leaves out, from a source that keeps the list.
    """
    return text.split(PINNED_HEADER, 1)[0].strip()
