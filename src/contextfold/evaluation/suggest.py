"""``--suggest``: a preset and a budget for the user's data, from the figures, with the reason.

An arm with a failed job is never suggested. Then, by what the data lets us measure:

- with judged questions, QA accuracy over the full context's; else with
  questions, answer-recall retention (already relative to the full context).
  The suggestion is the smallest budget at which an arm keeps ``FLOOR`` of the
  full context, and at that budget the best score, then the most compression,
  then the fastest render (p50). When no arm reaches the floor, the best score.
- without questions there is nothing to keep, so the most compression among the
  arms whose folds alone kept the view within its budget at every sampled turn
  (no overshoot; render's last-resort cut never needed), then the fastest
  render; when every arm overshot, the least overshoot.

Ties fall to the arm run first, so the answer depends on the figures alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

FLOOR = 0.8
"""The share of the full context's score an arm must keep to be suggested."""


def suggest(summary: Mapping[str, Any]) -> dict[str, Any]:
    """``{"preset", "budget", "measure", "reason"}``; preset and budget are None when
    every arm failed."""
    rows: list[Mapping[str, Any]] = summary["results"]
    eligible = [(i, r) for i, r in enumerate(rows) if not r["failed_jobs"]]
    if not eligible:
        return _pick(None, "none", "every arm had a failed job: no preset to suggest.")
    full_qa = summary.get("full_qa_accuracy")
    if full_qa and any(r.get("qa_accuracy") is not None for _, r in eligible):
        return _by_score(eligible, "QA accuracy", lambda r: float(r["qa_accuracy"] or 0) / full_qa)
    if any(r.get("retention") is not None for _, r in eligible):
        return _by_score(eligible, "answer-recall retention", lambda r: float(r["retention"] or 0))
    return _by_compression(eligible)


def _pick(row: Mapping[str, Any] | None, measure: str, reason: str) -> dict[str, Any]:
    return {
        "preset": None if row is None else row["preset"],
        "budget": None if row is None else row["budget"],
        "measure": measure,
        "reason": reason,
    }


def _compression(row: Mapping[str, Any]) -> float:
    return float(row["compression"] or 0.0)


def _figures(row: Mapping[str, Any]) -> str:
    return f"{_compression(row):.1f}x compression, render p50 {row['render_p50_ms']:.2f} ms"


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


def _by_compression(eligible: Sequence[tuple[int, Mapping[str, Any]]]) -> dict[str, Any]:
    def rank(item: tuple[int, Mapping[str, Any]]) -> tuple[int, float, float, int]:
        i, r = item
        return (max(r["overshoot_tokens"], 0), -_compression(r), r["render_p50_ms"], i)

    _, best = min(eligible, key=rank)
    if best["overshoot_tokens"] > 0:
        why = (
            f"every arm's folds overshot its budget at some turn; this one least "
            f"({best['overshoot_tokens']:,} tokens)"
        )
    elif _compression(best) <= 1.0:
        why = (
            "the conversations fit this budget whole (nothing folded); every arm that "
            "compressed overshot its budget or failed"
        )
    else:
        why = "the most compression with no failed job and no overshoot of its budget"
    return _pick(
        best,
        "compression",
        f"{best['preset']} at {best['budget']}: {why}, {_figures(best)}. No questions with "
        "gold answers: retention was not measured.",
    )
