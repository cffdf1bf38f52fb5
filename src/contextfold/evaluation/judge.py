"""QA accuracy by the LoCoMo protocol: a model answers from the prompt, a judge grades it.

For each question (LoCoMo categories 1 to 4 when the data has categories:
multi-hop, temporal, open-domain, single-hop; category 5, "never said", has no
gold answer to grade against), the answering model reads a rendered prompt with
the question as the latest user message and answers in a short phrase; the
judge reads the question, the gold answer and that answer and says CORRECT or
WRONG. The prompts are fixed here so that figures from two runs compare. A
verdict that says neither counts as wrong and is counted as unclear.

The question is added to a copy of the rendered prompt: the replayed log is
never changed, so the next arm renders the same conversation.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contextfold.core.messages import Message
from contextfold.evaluation.metered import MeteredModel

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


@dataclass
class QAJudge:
    """The answering model and the judge, each metered, and how many verdicts were unclear."""

    model: MeteredModel
    judge: MeteredModel
    unclear: int = 0

    def grade(self, prompt: Sequence[Message], question: Mapping[str, Any]) -> bool:
        """Whether the model, given ``prompt`` and then ``question``, answers it correctly."""
        asked: Message = {
            "role": "user",
            "content": ANSWER_PROMPT.format(question=question["question"]),
        }
        answer = self.model.complete([*prompt, asked], max_tokens=ANSWER_TOKENS).text
        verdict = self.judge.complete(
            [
                {"role": "system", "content": JUDGE_SYSTEM},
                {
                    "role": "user",
                    "content": JUDGE_PROMPT.format(
                        question=question["question"],
                        gold=question["answer"],
                        answer=answer.strip() or "(no answer)",
                    ),
                },
            ],
            max_tokens=VERDICT_TOKENS,
        ).text
        correct = parse_verdict(verdict)
        if correct is None:
            self.unclear += 1
        return bool(correct)
