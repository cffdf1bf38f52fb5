"""One evaluation: the conversations read, replayed through every arm, pooled into one object.

``evaluate`` is the library call behind ``contextfold eval``: it builds the
models the settings name (``--model`` for the strategies and the answers,
``--judge`` for the grades), replays each conversation, and returns the
summary with the inputs and settings it rests on, and the suggestion when
asked for. An arm that cannot run on a conversation skips it (counted by reason
in its row); the run fails only when no arm ran on any conversation, or when
``--suggest`` is asked of data with no question to measure retention by.
Everything is computed before anything is printed or written, so an error
leaves no partial report; only the ``--results`` file (``ledger``) is written
as the run goes, so that a stopped run resumes where it stopped.

With probes on (``--probes N``, or ``--judge`` on a conversation without
questions), keep-recent is added as an arm when not given: plain trimming is
the baseline a preset's probe scores are read against.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message
from contextfold.core.tokens import get_counter
from contextfold.evaluation.asking import Asker
from contextfold.evaluation.budgets import Budget
from contextfold.evaluation.grading import FULL, Grading, grade_probes, grade_questions
from contextfold.evaluation.inputs import Inputs
from contextfold.evaluation.judge import judged_questions
from contextfold.evaluation.ledger import Ledger
from contextfold.evaluation.probes import Probe, make_probes
from contextfold.evaluation.replay import (
    ArmResult,
    ConversationResult,
    StepCallback,
    replay,
    sample_turns,
)
from contextfold.evaluation.results import summarize
from contextfold.evaluation.scores import (
    agreement,
    arm_costs,
    probe_scores,
    read_hand_grades,
)
from contextfold.evaluation.suggest import HOW_TO_MEASURE, NO_MEASURE, require_measure, suggest
from contextfold.llm.base import LLM
from contextfold.llm.registry import get_model
from contextfold.memory.conversation_file import FileConversation


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
    probes: int | None = None
    """``--probes N``: at most N probes a conversation; None: ``JUDGED_PROBES`` with a judge on
    a conversation without questions, else none."""
    timeout: float | None = None
    """``--timeout``: seconds an answer or a grade may take (None: sized to its prompt)."""
    results: Path | None = None
    """``--results FILE``: written as the run goes, read back to resume."""
    hand_grades: Path | None = None
    """``--hand-grades FILE``: the judge's agreement with a reader, on the ids graded there."""

    def probes_for(self, conversation_has_questions: bool) -> int:
        if self.probes is not None:
            return self.probes
        return JUDGED_PROBES if self.judge is not None and not conversation_has_questions else 0

    def arms(self, probing: bool) -> list[str]:
        """The presets run: keep-recent added as the baseline when probes are on."""
        presets = list(self.presets)
        return [*presets, BASELINE] if probing and BASELINE not in presets else presets


JUDGED_PROBES = 8
BASELINE = "keep-recent"


def _model(spec: str, flag: str) -> LLM:
    try:
        return get_model(spec)
    except InvalidInput as exc:
        raise InvalidInput(f"{flag} {spec!r}: {exc.reason}", field=flag) from exc


def total_steps(inputs: Inputs, settings: EvalSettings) -> int:
    """How many times ``evaluate`` calls ``on_step``: sampled turns, then graded questions."""
    steps = sum(len(sample_turns(len(c.messages), settings.samples)) for c in inputs.conversations)
    if settings.judge is not None and settings.model is not None:
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
    hand = None if settings.hand_grades is None else read_hand_grades(settings.hand_grades)
    llm = None if settings.model is None else _model(settings.model, "--model")
    judge = None if settings.judge is None else _model(settings.judge, "--judge")
    probing = any(settings.probes_for(bool(c.questions)) for c in inputs.conversations)
    presets = settings.arms(probing)
    ledger = Ledger(
        settings.results,
        {
            "model": _named(settings.model),
            "judge": _named(settings.judge),
            "encoding": settings.encoding,
            "samples": settings.samples,
            "probes": settings.probes,
        },
    )
    grading = Grading(
        Asker(ledger, get_counter(settings.encoding), settings.timeout),
        llm if judge is not None else None,
        judge,
        on_step,
    )
    try:
        results = [
            _conversation(index, conversation, presets, settings, llm, grading, ledger)
            for index, conversation in enumerate(inputs.conversations)
        ]
    finally:
        ledger.close()
    summary = summarize(results)
    if not any(row["conversations"] for row in summary["results"]):
        raise InvalidInput(_nothing_measured(summary), field="budgets")
    summary.update(
        path=path,
        format=inputs.format,
        skipped=inputs.skipped,
        presets=presets,
        budgets=[b.label for b in settings.budgets],
        samples=settings.samples,
        encoding=settings.encoding,
        model=settings.model,
        judge=settings.judge,
    )
    audit = [entry for result in results for entry in result.audit]
    if audit:
        for row in summary["results"]:
            row.update(arm_costs(audit, f"{row['preset']}@{row['budget']}"))
        summary["full"] = arm_costs(audit, FULL)
    if settings.judge is not None:
        answers = [e for e in audit if e["calls"]]
        summary.update(
            questions_per_conversation=settings.questions,
            qa_model_calls=sum(e["calls"] for e in answers),
            qa_model_tokens=sum(e["tokens"] for e in answers),
            judge_calls=sum(e.get("judge_calls", 0) for e in audit),
            judge_tokens=sum(e.get("judge_tokens", 0) for e in audit),
            unclear_verdicts=sum(bool(e.get("unclear")) for e in audit),
            agreement=agreement(audit, hand),
        )
    if probing:
        arms = [FULL, *(f"{row['preset']}@{row['budget']}" for row in summary["results"])]
        summary["probes"] = {
            "grading": "judge" if grading.judged else "exact match in the prompt",
            "made": sum(1 for e in audit if e.get("kind") == "probe" and e["arm"] == FULL),
            "arms": probe_scores(audit, arms),
        }
    summary.update(
        timeout=settings.timeout,
        results_file=None if settings.results is None else str(settings.results),
        resumed=ledger.resumed,
        audit=audit,
    )
    if settings.suggest or settings.report:
        summary["suggestion"] = suggest(summary)
        if settings.suggest and summary["suggestion"]["measure"] is None:
            raise InvalidInput(f"{path}: {NO_MEASURE} {HOW_TO_MEASURE}", field="suggest")
    summary["seconds"] = round(time.perf_counter() - started, 3)
    return summary


def _named(spec: str | None) -> str | None:
    """The model a spec names, without the server's URL (a restarted server may move)."""
    return None if spec is None else spec.rsplit("#", 1)[-1]


def _conversation(
    index: int,
    conversation: FileConversation,
    presets: Sequence[str],
    settings: EvalSettings,
    llm: LLM | None,
    grading: Grading,
    ledger: Ledger,
) -> ConversationResult:
    """Replay one conversation (or read its replay back when every item of it is done),
    then ask and grade its questions and probes."""
    key = f"{index + 1}:{conversation.id}"
    names = [f"{p}@{b.label}" for p in presets for b in settings.budgets]
    questions = (
        judged_questions(conversation.questions, settings.questions) if grading.judged else []
    )
    cached = ledger.done(f"replay|{key}")
    if cached is not None and [a["preset"] + "@" + a["budget"] for a in cached["arms"]] != names:
        cached = None
    result = None
    if cached is not None:
        probes = [Probe.from_dict(p) for p in cached["probes"]]
        restored = _restored(cached)
        if all(
            ledger.done(k) is not None for k in _items(key, restored, questions, probes, grading)
        ):
            result = restored
            for _ in [*result.turns, *questions]:
                if grading.on_step is not None:
                    grading.on_step()
    if result is None:
        result = replay(
            conversation,
            presets,
            settings.budgets,
            samples=settings.samples,
            encoding=settings.encoding,
            llm=llm,
            on_step=grading.on_step,
        )
        if cached is None:
            limit = settings.probes_for(bool(conversation.questions))
            probes = make_probes(conversation.messages, result.folded, limit)
        ledger.write(
            {
                "kind": "replay",
                "key": f"replay|{key}",
                "error": None,
                **_kept(result),
                "probes": [p.to_dict() for p in probes],
            }
        )
    if questions:
        grade_questions(key, result, conversation.messages, questions, grading)
    if probes:
        grade_probes(key, result, conversation.messages, probes, grading)
    return result


_NOT_KEPT = ("audit", "full_prompt", "prompts", "full_correct")


def _kept(result: ConversationResult) -> dict[str, Any]:
    """The replay's figures as the results file keeps them (no prompts, no verdicts)."""
    data = {k: v for k, v in asdict(result).items() if k not in _NOT_KEPT}
    for arm in data["arms"]:
        del arm["correct"]
    return data


def _restored(record: dict[str, Any]) -> ConversationResult:
    fields = {k: v for k, v in record.items() if k not in ("kind", "key", "error", "probes")}
    arms = [ArmResult(**arm) for arm in fields.pop("arms")]
    result = ConversationResult(**fields, arms=arms)
    result.prompts = [_replay_needed] * len(arms)
    result.full_prompt = []
    return result


def _replay_needed(question: Any) -> list[Message]:
    raise RuntimeError("a prompt was asked of a conversation read back without its replay")


def _items(
    key: str,
    result: ConversationResult,
    questions: Sequence[Any],
    probes: Sequence[Probe],
    grading: Grading,
) -> list[str]:
    """The results-file keys a conversation's questions and probes are done with."""
    arms = [FULL, *(a.name for a in result.arms if a.skipped is None)]
    items = [f"q{n}" for n in range(1, len(questions) + 1)]
    kinds = ("answer", "grade")
    keys = [f"{kind}|{key}/{arm}/{item}" for arm in arms for item in items for kind in kinds]
    probe_kinds = kinds if grading.judged else ("exact",)
    keys += [f"{kind}|{key}/{arm}/{p.id}" for arm in arms for p in probes for kind in probe_kinds]
    return keys


def _nothing_measured(summary: dict[str, Any]) -> str:
    """Why no preset x budget could be run on any conversation, and what to try."""
    reasons = sorted({why for row in summary["results"] for why in row["skipped"]})
    return (
        f"nothing could be measured: every preset x budget skipped all "
        f"{summary['conversations']} conversations ({'; '.join(reasons)}). Give larger "
        f"budgets, e.g. --budgets 20%,50% or a number of tokens such as --budgets 2000."
    )
