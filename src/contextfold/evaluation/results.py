"""Pool the replayed conversations into one row per preset x budget, as plain JSON data.

Beside the rows, ``session`` holds the prompt tokens per sampled turn of one
conversation (the one with the most tokens, the first on a tie), for each arm and
for the full context: what the tokens-per-turn plot draws.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from contextfold.evaluation.replay import ArmResult, ConversationResult
from contextfold.evaluation.retention import retention


def percentile_ms(seconds: Sequence[float], percent: int) -> float:
    """The ``percent``-th percentile in milliseconds (inclusive method; one sample is itself)."""
    if len(seconds) == 1:
        return seconds[0] * 1000
    return statistics.quantiles(seconds, n=100, method="inclusive")[percent - 1] * 1000


def accuracy(verdicts: Sequence[bool]) -> float | None:
    """The share of correct verdicts (None: nothing was graded)."""
    return sum(verdicts) / len(verdicts) if verdicts else None


def summarize(conversations: Sequence[ConversationResult]) -> dict[str, Any]:
    """Totals and pooled figures per preset x budget, in the order they were run."""
    full_recalls = [r for c in conversations for r in c.full_recalls]
    full_correct = [v for c in conversations for v in c.full_correct]
    tokens_before = sum(c.tokens for c in conversations)
    rows: list[dict[str, Any]] = []
    for i, first in enumerate(conversations[0].arms if conversations else []):
        arms: list[ArmResult] = [c.arms[i] for c in conversations]
        after = sum(a.tokens_after for a in arms)
        seconds = [s for a in arms for s in a.render_seconds]
        rows.append(
            {
                "preset": first.preset,
                "budget": first.budget,
                "budget_tokens": sum(a.budget_tokens for a in arms),
                "tokens_before": tokens_before,
                "tokens_after": after,
                "compression": tokens_before / after if after else None,
                "folds": sum(a.folds for a in arms),
                "folds_made": sum(a.folds_made for a in arms),
                "model_calls": sum(a.model_calls for a in arms),
                "model_tokens": sum(a.model_tokens for a in arms),
                "stand_in_calls": sum(a.stand_in_calls for a in arms),
                "failed_jobs": sum(a.failed_jobs for a in arms),
                "overshoot_tokens": max(a.overshoot_tokens for a in arms),
                "cut_renders": sum(a.cut_renders for a in arms),
                "render_p50_ms": percentile_ms(seconds, 50),
                "render_p99_ms": percentile_ms(seconds, 99),
                "renders": len(seconds),
                "retention": retention([r for a in arms for r in a.recalls], full_recalls),
                "qa_accuracy": accuracy([v for a in arms for v in a.correct]),
            }
        )
    return {
        "conversations": len(conversations),
        "messages": sum(c.messages for c in conversations),
        "tokens": tokens_before,
        "questions": len(full_recalls),
        "full_recall": statistics.fmean(full_recalls) if full_recalls else None,
        "qa_questions": len(full_correct),
        "full_qa_accuracy": accuracy(full_correct),
        "results": rows,
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
                "tokens": a.turn_tokens,
            }
            for a in longest.arms
        ],
    }
