"""Answer-recall retention per half of the dev data: how much of what is later asked survives.

For each conversation and each budget (5%, 10% and 20% of the conversation's
full prompt tokens), a view with the ``offline`` preset and one with
``keep-recent`` are compacted and rendered, and the prompt is scored against
the conversation's questions. Figures are given for each half of the data
(``contextfold.evaluation.split``): the tuning half, the only one looked at
while changing a strategy, and the checking half, the figure that counts.

Datasets: ``locomo_dev`` (categories 1-4: multi-hop, temporal, open-domain,
single-hop; adversarial questions have no answer to keep) and
``longmemeval_oracle_dev`` (every question but abstentions, whose answer is
that it was never said, and preferences, whose "answer" is a grading rubric).

The measure (key words of the gold answers, recall, retention pooled over
the conversations) is ``contextfold.evaluation.retention``, the one
``contextfold eval`` reports; here it is taken per preset and budget after one
compaction of the whole conversation. Only the public API is used, and every
prompt is checked against its budget. ``--half`` limits the run to one half.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from _common import conversations, parse_args, report

from contextfold import Memory
from contextfold.core.errors import BudgetError
from contextfold.core.messages import text_of
from contextfold.evaluation.retention import key_words, prompt_words, recall, words
from contextfold.evaluation.split import HALVES, rows_of

BUDGETS = {"5pct": 0.05, "10pct": 0.10, "20pct": 0.20}
PRESETS = {"offline": "offline", "keep_recent": "keep-recent"}
LOCOMO_TEMPORAL = 2
# name in the figures, file, rows of --quick, which questions count, which are temporal
Dataset = tuple[str, str, int, Callable[[dict[str, Any]], bool], Callable[[dict[str, Any]], bool]]
DATASETS: tuple[Dataset, ...] = (
    (
        "locomo",
        "locomo_dev",
        2,
        lambda q: q.get("category") in {1, 2, 3, 4},
        lambda q: q.get("category") == LOCOMO_TEMPORAL,
    ),
    (
        "longmemeval",
        "longmemeval_oracle_dev",
        40,
        lambda q: not q.get("abstention") and q.get("category") != "single-session-preference",
        lambda q: q.get("category") == "temporal-reasoning",
    ),
)
Recalls = dict[str, list[tuple[bool, float]]]


def retention(recalls: Recalls, name: str, skip_temporal: bool = False) -> float:
    """Mean recall of ``name`` over mean recall of the full conversation, pooled."""

    def mean(key: str) -> float:
        return statistics.fmean(
            r for temporal, r in recalls[key] if not skip_temporal or not temporal
        )

    return mean(name) / mean("full")


def measure(
    rows: Iterable[dict[str, Any]],
    counts: Callable[[dict[str, Any]], bool],
    temporal: Callable[[dict[str, Any]], bool],
    seconds: list[float],
) -> tuple[Recalls, int, int]:
    """Recall of every counted question's key words in each preset's prompt, the
    conversations measured, and those left out because 5% cannot hold their last
    user message (a budget no strategy can meet)."""
    recalls: Recalls = {"full": []}
    recalls.update({f"{p}_{b}": [] for p in PRESETS for b in BUDGETS})
    n = skipped = 0
    for row in rows:
        try:
            found = _recalls(row, counts, temporal, seconds)
        except BudgetError:
            skipped += 1
            continue
        if found is not None:
            n += 1
            for key, values in found.items():
                recalls[key].extend(values)
    return recalls, n, skipped


def _recalls(
    row: dict[str, Any],
    counts: Callable[[dict[str, Any]], bool],
    temporal: Callable[[dict[str, Any]], bool],
    seconds: list[float],
) -> Recalls | None:
    recalls: Recalls = {"full": []}
    recalls.update({f"{p}_{b}": [] for p in PRESETS for b in BUDGETS})
    messages = row["messages"]
    df = Counter(w for m in messages for w in words(text_of(m)))
    limit = max(3.0, 0.01 * len(messages))
    keyed = [
        (temporal(q), keys)
        for q in row["questions"]
        if counts(q) and "answer" in q
        for keys in [key_words(q, df, limit)]
        if keys
    ]
    if not keyed:
        return None
    session = Memory().session(str(row["id"]))
    session.extend(messages)
    full_view = session.view("full")
    full_tokens = full_view.state().tokens
    full = prompt_words(full_view.render())
    recalls["full"].extend((t, recall(k, full)) for t, k in keyed)
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
            recalls[f"{preset_key}_{budget_key}"].extend((t, recall(k, seen)) for t, k in keyed)
    return recalls


def figures_of(recalls: Recalls, prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        f"{prefix}_retention_{name}": retention(recalls, name) for name in recalls if name != "full"
    }
    # None when keep-recent keeps no key word at all (no ratio to give).
    kept = out[f"{prefix}_retention_keep_recent_10pct"]
    out[f"{prefix}_offline_over_keep_recent_10pct"] = (
        out[f"{prefix}_retention_offline_10pct"] / kept if kept else None
    )
    # Session dates are message meta, absent from the full conversation's text:
    # a fold that prints them can beat the full conversation on temporal answers.
    out[f"{prefix}_retention_offline_10pct_non_temporal"] = retention(
        recalls, "offline_10pct", skip_temporal=True
    )
    out[f"{prefix}_full_conversation_recall"] = statistics.fmean(r for _, r in recalls["full"])
    out[f"{prefix}_questions"] = len(recalls["full"])
    return out


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--half", choices=[*HALVES, "both"], default="both", help="the half of the data to run"
    )


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], add_options)
    halves = HALVES if args.half == "both" else (args.half,)
    figures: dict[str, Any] = {}
    seconds: list[float] = []
    for name, file, quick_rows, counts, temporal in DATASETS:
        for half in halves:
            rows = rows_of(conversations(file, limit=quick_rows if args.quick else None), half)
            recalls, n, skipped = measure(rows, counts, temporal, seconds)
            figures.update(figures_of(recalls, f"{name}_{half}"))
            figures[f"{name}_{half}_conversations"] = n
            figures[f"{name}_{half}_too_short_for_5pct"] = skipped
    figures["mean_compact_seconds"] = statistics.fmean(seconds)
    report(figures, args.json)


if __name__ == "__main__":
    main()
