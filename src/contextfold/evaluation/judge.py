"""QA accuracy by the LoCoMo protocol: a model answers from the prompt, a judge grades it.

For each question (LoCoMo categories 1 to 4 when the data has categories:
multi-hop, temporal, open-domain, single-hop; category 5, "never said", has no
gold answer to grade against), the answering model reads a rendered prompt with
the question as the latest user message and answers in a short phrase; the
judge reads the question, the gold answer and that answer and says CORRECT or
WRONG. The prompts are fixed here so that figures from two runs compare. A
verdict that says neither counts as wrong and is counted as unclear.

The question is added to a copy of the rendered prompt: the replayed log is
never changed, so the next arm renders the same conversation. Probes
(``probes``) are graded the same way, the judge reading also the messages the
probe was made from, taken from the full log.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from contextfold.core.messages import Message, text_of

JUDGED_CATEGORIES = frozenset({1, 2, 3, 4})
ANSWER_TOKENS = 64
VERDICT_TOKENS = 8

ANSWER_PROMPT = (
    "Answer this question about our conversation above in a short phrase, using the "
    "conversation's own words where you can (a date as the conversation gives it).\n"
    "Question: {question}"
)

JUDGE_SYSTEM = "You grade answers to questions about a conversation. Reply with one word."
JUDGE_PROMPT = (
    "Question: {question}\n"
    "Gold answer: {gold}\n"
    "Answer to grade: {answer}\n\n"
    "The answer is CORRECT if it says what the gold answer says (the same person, place, "
    "thing, number or time; wording, extra detail and date format may differ) and WRONG "
    "if it says something else, says it does not know, or misses the point. "
    "Reply CORRECT or WRONG."
)

_VERDICT = re.compile(r"\b(CORRECT|WRONG|INCORRECT)\b")


def judged_questions(questions: Sequence[Mapping[str, Any]], limit: int) -> list[Mapping[str, Any]]:
    """The first ``limit`` questions of categories 1 to 4 (or without a category)."""
    kept = [q for q in questions if q.get("category") in (None, *JUDGED_CATEGORIES)]
    return kept[:limit]


def parse_verdict(text: str) -> bool | None:
    """True for CORRECT, False for WRONG (or INCORRECT), None when the judge said neither;
    the first verdict word counts."""
    found = _VERDICT.search(text.upper())
    return None if found is None else found.group(1) == "CORRECT"


def answer_messages(prompt: Sequence[Message], question: str) -> list[Message]:
    """``prompt`` with ``question`` as the latest user message (a copy: the log is unchanged)."""
    asked: Message = {"role": "user", "content": ANSWER_PROMPT.format(question=question)}
    return [*prompt, asked]


def judge_messages(question: str, gold: str, answer: str | None) -> list[Message]:
    """What the judge reads to grade ``answer`` to a question against its ``gold`` answer."""
    content = JUDGE_PROMPT.format(
        question=question, gold=gold, answer=(answer or "").strip() or "(no answer)"
    )
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": content}]


def probe_judge_messages(
    question: str, gold: str, sources: Sequence[Message], answer: str | None
) -> list[Message]:
    """What the judge reads to grade a probe's answer: the messages the probe was made from,
    from the full log (not the compacted prompt), then the probe, its gold and the answer
    last, so grades of one probe across arms share their prefix."""
    said = "\n".join(f"{m.get('role', '?')}: {text_of(m)}" for m in sources)
    content = f"The conversation said:\n{said}\n\n" + JUDGE_PROMPT.format(
        question=question, gold=gold, answer=(answer or "").strip() or "(no answer)"
    )
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": content}]
