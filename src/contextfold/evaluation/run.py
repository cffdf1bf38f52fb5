"""One evaluation: the conversations read, replayed through every arm, pooled into one object.

``evaluate`` is the library call behind ``contextfold eval``: it builds the
models the settings name (``--model`` for the strategies and the answers,
``--judge`` for the grades), replays each conversation, and returns the
summary with the inputs and settings it rests on, and the suggestion when
asked for. An arm that cannot run on a conversation skips it (counted by reason
in its row); the run fails only when no arm ran on any conversation, or when
``--suggest`` is asked of data with no question to measure retention by.
Everything is computed before anything is printed or written, so an error
leaves no partial report.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.evaluation.budgets import Budget
from contextfold.evaluation.inputs import Inputs
from contextfold.evaluation.judge import QAJudge, judged_questions
from contextfold.evaluation.metered import MeteredModel
from contextfold.evaluation.replay import StepCallback, replay, sample_turns
from contextfold.evaluation.results import summarize
from contextfold.evaluation.suggest import HOW_TO_MEASURE, NO_MEASURE, require_measure, suggest
from contextfold.llm.base import LLM
from contextfold.llm.registry import get_model


@dataclass(frozen=True)
class EvalSettings:
    """What ``contextfold eval`` was asked to run."""

    presets: Sequence[str]
    budgets: Sequence[Budget]
    samples: int = 10
    encoding: str = "o200k_base"
    model: str | None = None
    judge: str | None = None
    questions: int = 20
    """At most this many questions a conversation are graded (each costs an answer and a
    grade per arm, and one more of each for the full context)."""
    suggest: bool = False
    """``--suggest``: recommend a preset and budget; refused when nothing measures retention."""
    report: bool = False
    """``--report``: the report carries the suggestion when something measured retention, and
    says why there is none otherwise."""


def _model(spec: str, flag: str) -> LLM:
    try:
        return get_model(spec)
    except InvalidInput as exc:
        raise InvalidInput(f"{flag} {spec!r}: {exc.reason}", field=flag) from exc


def total_steps(inputs: Inputs, settings: EvalSettings) -> int:
    """How many times ``evaluate`` calls ``on_step``: sampled turns, then graded questions."""
    steps = sum(len(sample_turns(len(c.messages), settings.samples)) for c in inputs.conversations)
    if settings.judge is not None:
        steps += sum(
            len(judged_questions(c.questions, settings.questions)) for c in inputs.conversations
        )
    return steps


def evaluate(
    inputs: Inputs, settings: EvalSettings, *, path: str, on_step: StepCallback | None = None
) -> dict[str, Any]:
    """Replay ``inputs`` through ``settings``' presets x budgets; the summary (see
    ``results.summarize``) with what it was run on."""
    if settings.judge is not None and settings.model is None:
        raise InvalidInput(
            "--judge grades the answers of --model: give --model too", field="--model"
        )
    if settings.suggest:
        require_measure(inputs, judged=settings.judge is not None, path=path)
    started = time.perf_counter()
    llm = None if settings.model is None else _model(settings.model, "--model")
    qa = None
    if settings.judge is not None:
        assert llm is not None
        qa = QAJudge(MeteredModel(llm), MeteredModel(_model(settings.judge, "--judge")))
    results = [
        replay(
            conversation,
            settings.presets,
            settings.budgets,
            samples=settings.samples,
            encoding=settings.encoding,
            llm=llm,
            qa=qa,
            questions=settings.questions,
            on_step=on_step,
        )
        for conversation in inputs.conversations
    ]
    summary = summarize(results)
    if not any(row["conversations"] for row in summary["results"]):
        raise InvalidInput(_nothing_measured(summary), field="budgets")
    summary.update(
        path=path,
        format=inputs.format,
        skipped=inputs.skipped,
        presets=list(settings.presets),
        budgets=[b.label for b in settings.budgets],
        samples=settings.samples,
        encoding=settings.encoding,
        model=settings.model,
        judge=settings.judge,
    )
    if qa is not None:
        summary.update(
            questions_per_conversation=settings.questions,
            qa_model_calls=qa.model.calls,
            qa_model_tokens=qa.model.tokens,
            judge_calls=qa.judge.calls,
            judge_tokens=qa.judge.tokens,
            unclear_verdicts=qa.unclear,
        )
    if settings.suggest or settings.report:
        summary["suggestion"] = suggest(summary)
        if settings.suggest and summary["suggestion"]["measure"] is None:
            raise InvalidInput(f"{path}: {NO_MEASURE} {HOW_TO_MEASURE}", field="suggest")
    summary["seconds"] = round(time.perf_counter() - started, 3)
    return summary


def _nothing_measured(summary: dict[str, Any]) -> str:
    """Why no preset x budget could be run on any conversation, and what to try."""
    reasons = sorted({why for row in summary["results"] for why in row["skipped"]})
    return (
        f"nothing could be measured: every preset x budget skipped all "
        f"{summary['conversations']} conversations ({'; '.join(reasons)}). Give larger "
        f"budgets, e.g. --budgets 20%,50% or a number of tokens such as --budgets 2000."
    )
