"""Pool the replayed conversations into one row per preset x budget, as plain JSON data.

Beside the rows, ``session`` holds the prompt tokens per sampled turn of one
conversation (the one with the most tokens, the first on a tie), for each arm and
for the full context: what the tokens-per-turn plot draws. An arm that skipped a
conversation (see ``replay``) is left out of its row, which counts it by reason.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from contextfold.evaluation.replay import ArmResult, ConversationResult
from contextfold.evaluation.retention import retention


def percentile_ms(seconds: Sequence[float], percent: int) -> float | None:
    """The ``percent``-th percentile in milliseconds (inclusive method; one sample is itself;
    None: no sample)."""
    if not seconds:
        return None
    if len(seconds) == 1:
        return seconds[0] * 1000
    return statistics.quantiles(seconds, n=100, method="inclusive")[percent - 1] * 1000


def accuracy(verdicts: Sequence[bool]) -> float | None:
    """The share of correct verdicts (None: nothing was graded)."""
    return sum(verdicts) / len(verdicts) if verdicts else None


def _row(conversations: Sequence[ConversationResult], i: int, first: ArmResult) -> dict[str, Any]:
    """One preset x budget pooled over the conversations it could be run on; the full
    context's figures it is compared with are over those same conversations."""
    measured = [(c, c.arms[i]) for c in conversations if c.arms[i].skipped is None]
    arms = [a for _, a in measured]
    skipped = Counter(c.arms[i].skipped for c in conversations if c.arms[i].skipped)
    before = sum(c.tokens for c, _ in measured)
    after = sum(a.tokens_after for a in arms)
    seconds = [s for a in arms for s in a.render_seconds]
    full_recalls = [r for c, _ in measured for r in c.full_recalls]
    return {
        "preset": first.preset,
        "budget": first.budget,
        "conversations": len(measured),
        "skipped": dict(sorted(skipped.items())),
        # Over every conversation, so that every preset at one budget has the same figure:
        # what the suggestion and the plots order budgets by.
        "budget_tokens": sum(c.arms[i].budget_tokens for c in conversations),
        "tokens_before": before,
        "tokens_after": after,
        "compression": before / after if after else None,
        "folds": sum(a.folds for a in arms),
        "folds_made": sum(a.folds_made for a in arms),
        # Every call is counted, a skipped conversation's too: it was paid for.
        "model_calls": sum(c.arms[i].model_calls for c in conversations),
        "model_tokens": sum(c.arms[i].model_tokens for c in conversations),
        "stand_in_calls": sum(a.stand_in_calls for a in arms),
        "failed_jobs": sum(a.failed_jobs for a in arms),
        "overshoot_tokens": max((a.overshoot_tokens for a in arms), default=0),
        "cut_renders": sum(a.cut_renders for a in arms),
        "render_p50_ms": percentile_ms(seconds, 50),
        "render_p99_ms": percentile_ms(seconds, 99),
        "renders": len(seconds),
        "retention": retention([r for a in arms for r in a.recalls], full_recalls),
        "qa_accuracy": accuracy([v for a in arms for v in a.correct]),
        "full_qa_accuracy": accuracy([v for c, _ in measured for v in c.full_correct]),
    }


def summarize(conversations: Sequence[ConversationResult]) -> dict[str, Any]:
    """Totals and pooled figures per preset x budget, in the order they were run. A row's
    ``conversations`` are those its arm could be run on, ``skipped`` the others by reason."""
    full_recalls = [r for c in conversations for r in c.full_recalls]
    full_correct = [v for c in conversations for v in c.full_correct]
    return {
        "conversations": len(conversations),
        "messages": sum(c.messages for c in conversations),
        "tokens": sum(c.tokens for c in conversations),
        "questions": len(full_recalls),
        "full_recall": statistics.fmean(full_recalls) if full_recalls else None,
        "qa_questions": len(full_correct),
        "full_qa_accuracy": accuracy(full_correct),
        "results": [
            _row(conversations, i, first)
            for i, first in enumerate(conversations[0].arms if conversations else [])
        ],
        "session": _session(conversations),
        "per_conversation": [
            {
                "id": c.id,
                "title": c.title,
                "messages": c.messages,
                "tokens": c.tokens,
                "questions": len(c.full_recalls),
                "full_qa_accuracy": accuracy(c.full_correct),
                "results": [
                    {
                        "preset": a.preset,
                        "budget": a.budget,
                        "budget_tokens": a.budget_tokens,
                        "skipped": a.skipped,
                        "tokens_after": a.tokens_after,
                        "folds": a.folds,
                        "retention": retention(a.recalls, c.full_recalls),
                        "qa_accuracy": accuracy(a.correct),
                    }
                    for a in c.arms
                ],
            }
            for c in conversations
        ],
    }


def skip_summary(summary: Mapping[str, Any]) -> str:
    """One sentence: per budget, how many conversations each preset skipped and why (empty
    when none was skipped). A single reason is named once, at the head."""
    rows = summary["results"]
    total = summary["conversations"]
    reasons = sorted({why for r in rows for why in r["skipped"]})
    if not reasons:
        return ""

    def why(row: Mapping[str, Any]) -> str:
        return "" if len(reasons) == 1 else f" ({skip_reasons(row['skipped'])})"

    parts = []
    for budget in summary["budgets"]:
        at = [r for r in rows if r["budget"] == budget]
        if not any(r["skipped"] for r in at):
            continue
        if all(r["skipped"] == at[0]["skipped"] for r in at):
            counted = f"{_count(at[0])} of {total} conversations by every preset{why(at[0])}"
        else:
            each = ", ".join(f"{r['preset']} {_count(r)}{why(r)}" for r in at if r["skipped"])
            counted = f"{each} of {total} conversations"
        parts.append(f"at {budget} {counted}")
    head = f"Skipped ({reasons[0]})" if len(reasons) == 1 else "Skipped"
    return f"{head}: {'; '.join(parts)}."


def _count(row: Mapping[str, Any]) -> int:
    return sum(row["skipped"].values())


def skip_reasons(skipped: Mapping[str, int]) -> str:
    """The reasons alone when there is one, else each with its count."""
    if len(skipped) == 1:
        return next(iter(skipped))
    return ", ".join(f"{why}: {n}" for why, n in skipped.items())


def _session(conversations: Sequence[ConversationResult]) -> dict[str, Any] | None:
    if not conversations:
        return None
    longest = max(conversations, key=lambda c: c.tokens)  # max keeps the first on a tie
    return {
        "id": longest.id,
        "title": longest.title,
        "messages": longest.messages,
        "turns": longest.turns,
        "full_tokens": longest.full_turn_tokens,
        "arms": [
            {
                "preset": a.preset,
                "budget": a.budget,
                "budget_tokens": a.budget_tokens,
                "skipped": a.skipped,
                "tokens": a.turn_tokens,
            }
            for a in longest.arms
        ],
    }
