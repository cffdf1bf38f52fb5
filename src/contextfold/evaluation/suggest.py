"""``--suggest``: a preset and a budget for the user's data, from the figures, with the reason.

An arm with a failed job, or that could be run on no conversation, is never
suggested. The score is, with judged questions, QA accuracy over the full
context's on the same conversations; else answer-recall retention (already
relative to the full context). The suggestion is the smallest budget at which
an arm keeps ``FLOOR`` of the full context, and at that budget the best score,
then the most compression, then the fastest render (p50). When no arm reaches
the floor, the best score.

Without questions nothing measures what a preset keeps, and the figures left
(tokens, latency) make a preset that keeps less look better (a suggestion
from them would favour plain trimming): so there is no suggestion. ``require_measure`` refuses ``--suggest`` before the
replay when the inputs hold no question to score; ``suggest`` returns no pick
(``measure`` None) when no row was scored.

Ties fall to the arm run first, so the answer depends on the figures alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.evaluation.inputs import Inputs
from contextfold.evaluation.judge import judged_questions
from contextfold.evaluation.results import skip_reasons
from contextfold.evaluation.retention import keyed_questions

FLOOR = 0.8
"""The share of the full context's score an arm must keep to be suggested."""


def require_measure(inputs: Inputs, *, judged: bool, path: str) -> None:
    """Refuse ``--suggest`` (``InvalidInput``) when no question of ``inputs`` can be scored:
    none has a gold answer with key words in its conversation (nor, with ``judged``, a
    gradable category)."""
    for c in inputs.conversations:
        if keyed_questions(c.messages, c.questions):
            return
        if judged and judged_questions(c.questions, 1):
            return
    raise InvalidInput(f"{path}: {NO_MEASURE} {HOW_TO_MEASURE}", field="suggest")


NO_MEASURE = (
    "--suggest needs questions with gold answers to measure what each preset keeps, and "
    "none of these conversations has one whose answer the conversation states; without "
    "them only tokens and latency are measured, and by those a preset that keeps less "
    "always looks better."
)
HOW_TO_MEASURE = (
    'Give a JSONL file, one {"messages": [...], "questions": [{"question": ..., '
    '"answer": ...}]} a line (a ChatGPT export has no questions: write its chats out '
    "that way), or run without --suggest to compare tokens, folds and render times."
)


def suggest(summary: Mapping[str, Any]) -> dict[str, Any]:
    """``{"preset", "budget", "measure", "reason"}``; preset and budget are None when
    every arm failed, and measure is None too when no row was scored."""
    rows: list[Mapping[str, Any]] = summary["results"]
    eligible = [(i, r) for i, r in enumerate(rows) if r["conversations"] and not r["failed_jobs"]]
    if not eligible:
        return _pick(
            None,
            "none",
            "every arm had a failed job or ran on no conversation: no preset to suggest.",
        )
    if any(r.get("qa_accuracy") is not None and r.get("full_qa_accuracy") for _, r in eligible):
        return _by_score(
            eligible,
            "QA accuracy",
            lambda r: float(r["qa_accuracy"] or 0) / float(r["full_qa_accuracy"] or 1),
        )
    if any(r.get("retention") is not None for _, r in eligible):
        return _by_score(eligible, "answer-recall retention", lambda r: float(r["retention"] or 0))
    return _pick(
        None,
        None,
        "none: no question with a gold answer measured what each preset keeps, and by tokens "
        "and latency alone a preset that keeps less always looks better.",
    )


def _pick(row: Mapping[str, Any] | None, measure: str | None, reason: str) -> dict[str, Any]:
    return {
        "preset": None if row is None else row["preset"],
        "budget": None if row is None else row["budget"],
        "measure": measure,
        "reason": reason,
    }


def _compression(row: Mapping[str, Any]) -> float:
    return float(row["compression"] or 0.0)


def _figures(row: Mapping[str, Any]) -> str:
    figures = f"{_compression(row):.1f}x compression, render p50 {row['render_p50_ms']:.2f} ms"
    skipped: Mapping[str, int] = row.get("skipped") or {}
    if skipped:
        total = row["conversations"] + sum(skipped.values())
        figures += (
            f" (over {row['conversations']} of {total} conversations; "
            f"{sum(skipped.values())} skipped: {skip_reasons(skipped)})"
        )
    return figures


def _by_score(
    eligible: Sequence[tuple[int, Mapping[str, Any]]],
    measure: str,
    score: Callable[[Mapping[str, Any]], float],
) -> dict[str, Any]:
    def rank(item: tuple[int, Mapping[str, Any]]) -> tuple[float, float, float, int]:
        i, r = item
        return (-score(r), -_compression(r), r["render_p50_ms"], i)

    meeting = [(i, r) for i, r in eligible if score(r) >= FLOOR]
    if not meeting:
        _, best = min(eligible, key=rank)
        return _pick(
            best,
            measure,
            f"{best['preset']} at {best['budget']}: no arm keeps {FLOOR:g} of the full "
            f"context's {measure}; this one keeps the most ({score(best):.2f}), "
            f"{_figures(best)}. Try larger budgets.",
        )
    smallest = min(r["budget_tokens"] for _, r in meeting)
    at_smallest = [(i, r) for i, r in meeting if r["budget_tokens"] == smallest]
    _, best = min(at_smallest, key=rank)
    others = sorted(
        (r for _, r in eligible if r["budget"] == best["budget"] and r is not best),
        key=lambda r: -score(r),
    )
    beside = "".join(f"; {r['preset']} {score(r):.2f}" for r in others)
    return _pick(
        best,
        measure,
        f"{best['preset']} at {best['budget']}: the smallest budget that keeps {FLOOR:g} of "
        f"the full context's {measure} ({score(best):.2f}{beside}), {_figures(best)}.",
    )
