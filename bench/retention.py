"""Answer-recall retention on LoCoMo: how much of what is later asked survives compaction.

For each conversation of ``locomo_dev`` and each budget (5%, 10% and 20% of the
conversation's full prompt tokens), a view with the ``offline`` preset and one
with ``keep-recent`` are compacted and rendered, and the prompt is scored
against the questions of categories 1-4 (multi-hop, temporal, open-domain,
single-hop; adversarial questions have no answer to keep).

The measure (key words of the gold answers, recall, retention pooled over
the conversations) is ``contextfold.evaluation.retention``, the one
``contextfold eval`` reports; here it is taken per preset and budget after one
compaction of the whole conversation.

Only the public API is used, and every prompt is checked against its budget.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from typing import Any

from _common import conversations, parse_args, report

from contextfold import Memory
from contextfold.core.messages import text_of
from contextfold.evaluation.retention import key_words, prompt_words, recall, words

BUDGETS = {"5pct": 0.05, "10pct": 0.10, "20pct": 0.20}
PRESETS = {"offline": "offline", "keep_recent": "keep-recent"}
CATEGORIES = frozenset({1, 2, 3, 4})
TEMPORAL = 2


def retention(recalls: dict[str, list[tuple[int, float]]], name: str, skip: int = 0) -> float:
    """Mean recall of ``name`` over mean recall of the full conversation, pooled."""

    def mean(key: str) -> float:
        return statistics.fmean(r for category, r in recalls[key] if category != skip)

    return mean(name) / mean("full")


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    rows = list(conversations("locomo_dev", limit=2 if args.quick else None))
    recalls: dict[str, list[tuple[int, float]]] = {"full": []}
    recalls.update({f"{p}_{b}": [] for p in PRESETS for b in BUDGETS})
    seconds: list[float] = []
    for row in rows:
        messages = row["messages"]
        df = Counter(w for m in messages for w in words(text_of(m)))
        limit = max(3.0, 0.01 * len(messages))
        keyed = [
            (q["category"], keys)
            for q in row["questions"]
            if q.get("category") in CATEGORIES and "answer" in q
            for keys in [key_words(q, df, limit)]
            if keys
        ]
        session = Memory().session(row["id"])
        session.extend(messages)
        full_view = session.view("full")
        full_tokens = full_view.state().tokens
        full = prompt_words(full_view.render())
        recalls["full"].extend((c, recall(k, full)) for c, k in keyed)
        for preset_key, preset in PRESETS.items():
            for budget_key, share in BUDGETS.items():
                budget = int(full_tokens * share)
                view = session.view(f"{preset}-{budget_key}", preset=preset, budget=budget)
                start = time.perf_counter()
                view.compact()
                if preset == "offline":
                    seconds.append(time.perf_counter() - start)
                rendered = view.render_report()
                assert rendered.tokens <= budget, (row["id"], preset, budget, rendered.tokens)
                seen = prompt_words(rendered.messages)
                recalls[f"{preset_key}_{budget_key}"].extend((c, recall(k, seen)) for c, k in keyed)
    figures: dict[str, Any] = {
        f"retention_{name}": retention(recalls, name) for name in recalls if name != "full"
    }
    figures["offline_over_keep_recent_10pct"] = (
        figures["retention_offline_10pct"] / figures["retention_keep_recent_10pct"]
    )
    # Session dates are message meta, absent from the full conversation's text:
    # a fold that prints them can beat the full conversation on temporal answers.
    for preset_key in PRESETS:
        figures[f"retention_{preset_key}_10pct_non_temporal"] = retention(
            recalls, f"{preset_key}_10pct", skip=TEMPORAL
        )
    figures["full_conversation_recall"] = statistics.fmean(r for _, r in recalls["full"])
    figures["questions"] = len(recalls["full"])
    figures["conversations"] = len(rows)
    figures["mean_compact_seconds"] = statistics.fmean(seconds)
    report(figures, args.json)


if __name__ == "__main__":
    main()
