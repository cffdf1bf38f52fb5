"""Ask and grade one replayed conversation's questions and probes, into its audit list.

Every answer and verdict becomes one audit entry (arm, conversation, item,
prompt tokens, answer, verdict, the judge's raw text, seconds, error), and the
scores are read from the entries (``results``), so what is scored is exactly
what can be audited. Arms are the full context (``full``: the whole
conversation as the prompt) and each preset x budget that ran.

- Questions and probes with ``--model`` and ``--judge``: all answers of one
  arm's prompt one after another, the full context first (a llama.cpp server
  reads only what differs from its previous prompt, so each arm's prompt is
  read once, not once a question), then the grades, one question's or probe's
  across arms together (the judge's prompt starts with the question, or with
  the probe's source messages). A question is a step once it is graded.
- Probes without them: the offline grade, exact match of the gold's key words
  in the arm's prompt; no call, no cost.

A failed call leaves the entry's verdict None and its ``error`` and ``reason``
set; the scores leave it out and count it. Where exact match applies (a probe,
or a question whose gold is a short span with key words) the entry's
``exact`` says whether the answer holds the gold's key words: what the judge's
agreement is measured by.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from contextfold.core.messages import Message, text_of
from contextfold.evaluation.asking import Asker
from contextfold.evaluation.judge import (
    ANSWER_TOKENS,
    VERDICT_TOKENS,
    answer_messages,
    judge_messages,
    parse_verdict,
    probe_judge_messages,
)
from contextfold.evaluation.probes import Probe, exact_match
from contextfold.evaluation.replay import Asked, ConversationResult, StepCallback
from contextfold.evaluation.retention import key_words, word_set
from contextfold.llm.base import LLM

FULL = "full"
"""The audit's name of the full-context arm."""
SHORT_GOLD_WORDS = 6
"""A question's gold answer of at most this many words is a short span: exact match applies."""


@dataclass
class Grading:
    """What asks and grades: the answering model and the judge (both None: offline grades)."""

    asker: Asker
    model: LLM | None = None
    judge: LLM | None = None
    on_step: StepCallback | None = None

    @property
    def judged(self) -> bool:
        return self.model is not None and self.judge is not None


def _arms(result: ConversationResult) -> list[tuple[str, Asked]]:
    full = result.full_prompt
    arms: list[tuple[str, Asked]] = [(FULL, lambda question: full)]
    for arm, asked in zip(result.arms, result.prompts, strict=True):
        if asked is not None and arm.skipped is None:
            arms.append((arm.name, asked))
    return arms


def _entry(
    key: str, result: ConversationResult, arm: str, item: str, **fields: Any
) -> dict[str, Any]:
    return {
        "id": f"{key}/{arm}/{item}",
        "arm": arm,
        "conversation": result.id,
        "item": item,
        "prompt_tokens": None,
        "answer": None,
        "verdict": None,
        "exact": None,
        "judge_raw": None,
        "seconds": 0.0,
        "calls": 0,
        "tokens": 0,
        "error": None,
        "reason": None,
        **fields,
    }


def _answered(entry: dict[str, Any], record: Mapping[str, Any]) -> bool:
    """Fold an answer record into ``entry``; False when the call failed."""
    entry.update(
        prompt_tokens=record["prompt_tokens"],
        answer=record["text"],
        seconds=record["seconds"],
        calls=record["calls"],
        tokens=record["tokens"],
    )
    if record["error"] is not None:
        entry.update(error=record["error"], reason=record.get("reason"))
        return False
    return True


def _graded(entry: dict[str, Any], record: Mapping[str, Any]) -> bool | None:
    """Fold a grade record into ``entry``; the verdict (None: the call failed)."""
    entry["seconds"] = round(entry["seconds"] + record["seconds"], 3)
    entry.update(judge_calls=record["calls"], judge_tokens=record["tokens"])
    if record["error"] is not None:
        entry.update(error=record["error"], reason=record.get("reason"))
        return None
    entry["judge_raw"] = record["text"]
    said = parse_verdict(record["text"] or "")
    entry["unclear"] = said is None
    entry["verdict"] = bool(said)
    return bool(said)


def grade_questions(
    key: str,
    result: ConversationResult,
    messages: Sequence[Message],
    questions: Sequence[Mapping[str, Any]],
    grading: Grading,
) -> None:
    """Answer and grade ``questions`` on every arm (see the module docstring)."""
    assert grading.model is not None and grading.judge is not None
    df = Counter(w for m in messages for w in word_set(text_of(m)))
    rare = max(3.0, 0.01 * len(messages))
    correct = {arm.name: arm.correct for arm in result.arms}
    correct[FULL] = result.full_correct
    items = [(f"q{n}", q, str(q["question"]), str(q["answer"])) for n, q in enumerate(questions, 1)]
    keys = {
        item: key_words(question, df, rare) if len(gold.split()) <= SHORT_GOLD_WORDS else set()
        for item, question, _, gold in items
    }
    answered: dict[str, list[tuple[str, dict[str, Any]]]] = {item: [] for item, *_ in items}
    for arm, asked in _arms(result):
        for item, question, text, gold in items:
            entry = _entry(key, result, arm, item, kind="question", question=text, gold=gold)
            result.audit.append(entry)
            record = grading.asker.call(
                f"answer|{entry['id']}",
                "answer",
                grading.model,
                _asking(asked, question, text),
                ANSWER_TOKENS,
            )
            if not _answered(entry, record):
                continue
            if keys[item]:
                entry["exact"] = exact_match(keys[item], entry["answer"] or "")
            answered[item].append((arm, entry))
    for item, _, text, gold in items:
        for arm, entry in answered[item]:
            grade = grading.asker.call(
                f"grade|{entry['id']}",
                "grade",
                grading.judge,
                partial(judge_messages, text, gold, entry["answer"]),
                VERDICT_TOKENS,
            )
            verdict = _graded(entry, grade)
            if verdict is not None:
                correct[arm].append(verdict)
        if grading.on_step is not None:
            grading.on_step()


def grade_probes(
    key: str,
    result: ConversationResult,
    messages: Sequence[Message],
    probes: Sequence[Probe],
    grading: Grading,
) -> None:
    """Ask and grade ``probes`` on every arm, or grade them offline (module docstring)."""
    arms = _arms(result)
    if not grading.judged:
        for arm, asked in arms:
            for probe in probes:
                entry = _entry(key, result, arm, probe.id, **_probe_fields(probe))
                record = grading.asker.exact(
                    f"exact|{entry['id']}", partial(asked, {"question": probe.question}), probe.keys
                )
                entry.update(
                    prompt_tokens=record["prompt_tokens"],
                    verdict=record["verdict"],
                    exact=record["verdict"],
                )
                result.audit.append(entry)
        return
    assert grading.model is not None and grading.judge is not None
    answered: dict[tuple[str, str], dict[str, Any]] = {}
    for arm, asked in arms:
        for probe in probes:
            entry = _entry(key, result, arm, probe.id, **_probe_fields(probe))
            result.audit.append(entry)
            record = grading.asker.call(
                f"answer|{entry['id']}",
                "answer",
                grading.model,
                _asking(asked, {"question": probe.question}, probe.question),
                ANSWER_TOKENS,
            )
            if _answered(entry, record):
                entry["exact"] = exact_match(probe.keys, entry["answer"] or "")
                answered[(arm, probe.id)] = entry
    for probe in probes:
        sources = [messages[i] for i in probe.sources]
        for arm, _ in arms:
            found = answered.get((arm, probe.id))
            if found is None:
                continue
            entry = found
            grade = grading.asker.call(
                f"grade|{entry['id']}",
                "grade",
                grading.judge,
                partial(probe_judge_messages, probe.question, probe.gold, sources, entry["answer"]),
                VERDICT_TOKENS,
            )
            _graded(entry, grade)


def _asking(asked: Asked, question: Mapping[str, Any], text: str) -> Callable[[], list[Message]]:
    """The answer prompt of ``question`` on an arm, built when the call is made."""
    return lambda: answer_messages(asked(question), text)


def _probe_fields(probe: Probe) -> dict[str, Any]:
    return {
        "kind": "probe",
        "type": probe.type,
        "question": probe.question,
        "gold": probe.gold,
        "sources": list(probe.sources),
    }
