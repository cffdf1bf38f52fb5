"""Answer-recall retention per half of the dev data: how much of what is later asked survives.

For each conversation and each budget (5%, 10% and 20% of the conversation's
full prompt tokens), a view with the ``offline`` preset and one with
``keep-recent`` are compacted and rendered, and the prompt is scored against
the conversation's questions. Each is measured twice: ``once``, one compaction
of the whole conversation, and ``replayed``, the messages appended one at a
time with a compaction after every append (as a runner without settle would:
the most folds a view can go through, so the worst case for a fold that
re-selects from the one before it). ``prompt_share`` is the final prompt's
tokens over the budget, averaged over the conversations. These arms have
recall from the log off: they measure what the strategies keep. The
``offline_recall`` arms are the same offline views with recall on, rendered
once per question with the question as the query, in the budget less the
question's tokens (in use the question is the latest user message, so its
tokens come out of the same budget; a budget that cannot hold it scores the
prompt without recall), the recall block's header line left out of the score
(its words are the library's). Figures are given for each half of the data
(``contextfold.evaluation.split``): the tuning half, the only one looked at
while changing a strategy, and the checking half, the figure that counts.

Datasets: ``locomo_dev`` (categories 1-4: multi-hop, temporal, open-domain,
single-hop; adversarial questions have no answer to keep) and
``longmemeval_oracle_dev`` (every question but abstentions, whose answer is
that it was never said, and preferences, whose "answer" is a grading rubric).

The measure (key words of the gold answers, recall, retention pooled over
the conversations) is ``contextfold.evaluation.retention``, the one
``contextfold eval`` reports; here it is taken per preset, budget and arm,
each scored three ways: every question (``retention_<arm>``), without the
temporal ones (``_non_temporal``), and without date gains (``_dateless``:
the answers' date words left out of their key words). Session dates are
message meta the conversation's text lacks: a fold or recalled line that
prints them gains on "when" questions, which says nothing of what it keeps of
the content. Retention is already over the full conversation's recall, so the
asked arms' figures are the asked/full ratios; ``offline_over_keep_recent_<budget>``
are the once arms' ratios in each scoring.
Only the public API is used, and every
prompt is checked against its budget. ``--half`` limits the run to one half.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from _common import conversations, parse_args, report

from contextfold import Memory, View
from contextfold.core.errors import BudgetError
from contextfold.evaluation.replay import asked_prompt
from contextfold.evaluation.retention import dateless, keyed_questions, prompt_words, recall
from contextfold.evaluation.split import HALVES, rows_of
from contextfold.memory.recalled import HEADER

BUDGETS = {"5pct": 0.05, "10pct": 0.10, "20pct": 0.20}
PRESETS = {"offline": "offline", "keep_recent": "keep-recent"}
MODES = ("once", "replayed")
ARMS = [f"{p}_{m}_{b}" for p in PRESETS for m in MODES for b in BUDGETS]
RECALL_ARMS = [f"offline_recall_{m}_{b}" for m in MODES for b in BUDGETS]
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
SCORINGS = ("", "_non_temporal", "_dateless")
# per question: temporal, recall, recall of the dateless key words (None: the answer is a date)
Score = tuple[bool, float, float | None]
Recalls = dict[str, list[Score]]


@dataclass
class Measured:
    """Recalls per arm (and of the full conversation), each arm's prompt share per
    conversation, the conversations measured and those too short for 5%."""

    recalls: Recalls = field(default_factory=lambda: {k: [] for k in ["full", *ARMS, *RECALL_ARMS]})
    shares: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in ARMS})
    conversations: int = 0
    skipped: int = 0


def retention(recalls: Recalls, name: str, scoring: str = "") -> float:
    """Mean recall of ``name`` over mean recall of the full conversation, pooled, in
    ``scoring`` (one of ``SCORINGS``)."""

    def mean(key: str) -> float:
        if scoring == "_dateless":
            return statistics.fmean(d for _, _, d in recalls[key] if d is not None)
        skip = scoring == "_non_temporal"
        return statistics.fmean(r for temporal, r, _ in recalls[key] if not (skip and temporal))

    return mean(name) / mean("full")


def scores(keyed: Iterable[tuple[bool, set[str], set[str]]], seen: set[str]) -> list[Score]:
    return [(t, recall(k, seen), recall(d, seen) if d else None) for t, k, d in keyed]


def measure(
    rows: Iterable[dict[str, Any]],
    counts: Callable[[dict[str, Any]], bool],
    temporal: Callable[[dict[str, Any]], bool],
    seconds: list[float],
) -> Measured:
    """Recall of every counted question's key words in each arm's prompt; conversations
    whose last user message 5% cannot hold (a budget no strategy can meet) are left out."""
    out = Measured()
    for row in rows:
        try:
            found = _recalls(row, counts, temporal, seconds)
        except BudgetError:
            out.skipped += 1
            continue
        if found is not None:
            out.conversations += 1
            recalls, shares = found
            for key, values in recalls.items():
                out.recalls[key].extend(values)
            for key, share in shares.items():
                out.shares[key].append(share)
    return out


def _recalls(
    row: dict[str, Any],
    counts: Callable[[dict[str, Any]], bool],
    temporal: Callable[[dict[str, Any]], bool],
    seconds: list[float],
) -> tuple[Recalls, dict[str, float]] | None:
    messages = row["messages"]
    keyed = [
        (q, temporal(q), keys, dateless(keys, str(q["answer"])))
        for q, keys in keyed_questions(messages, row["questions"])
        if counts(q)
    ]
    keys = [(t, k, d) for _, t, k, d in keyed]
    if not keyed:
        return None
    memory = Memory()
    session = memory.session(str(row["id"]))
    session.extend(messages)
    full_view = session.view("full")
    full_tokens = full_view.state().tokens
    budgets = {key: int(full_tokens * share) for key, share in BUDGETS.items()}
    recalls: Recalls = {"full": scores(keys, prompt_words(full_view.render()))}
    shares: dict[str, float] = {}
    views: dict[str, View] = {}
    for preset_key, preset in PRESETS.items():
        for budget_key, budget in budgets.items():
            name = f"{preset_key}_once_{budget_key}"
            views[name] = view = session.view(name, preset=preset, budget=budget, recall=False)
            start = time.perf_counter()
            view.compact()
            if preset == "offline":
                seconds.append(time.perf_counter() - start)
    replay = memory.session(f"{row['id']}-replayed")
    replayed = {
        f"{p}_replayed_{b}": replay.view(f"{p}-{b}", preset=preset, budget=budget, recall=False)
        for p, preset in PRESETS.items()
        for b, budget in budgets.items()
    }
    for message in messages:
        replay.append(message)
        for view in replayed.values():
            try:
                view.compact()
            except BudgetError:
                continue  # a user message this budget cannot hold: render cuts, as in real use
    views.update(replayed)
    for name, view in views.items():
        budget = budgets[name.rsplit("_", 1)[1]]
        view.compact()
        rendered = view.render_report()
        assert rendered.tokens <= budget, (row["id"], name, budget, rendered.tokens)
        seen = prompt_words(rendered.messages)
        recalls[name] = scores(keys, seen)
        shares[name] = rendered.tokens / budget
        if name.startswith("offline_"):
            view.update(recall=True)
            recalls[name.replace("offline_", "offline_recall_")] = [
                score
                for q, t, k, d in keyed
                for score in scores(
                    [(t, k, d)], asked_words(view, str(q["question"]), budget, seen)
                )
            ]
    return recalls, shares


def asked_words(view: View, question: str, budget: int, plain: set[str]) -> set[str]:
    """The words of the prompt ``question`` gets as the latest user message (``plain``,
    the prompt's words without recall, when the budget cannot hold the question too),
    the recall block's header left out."""
    asked = asked_prompt(view, question, budget)
    if asked is None:
        return plain
    return prompt_words(
        [{**m, "content": str(m.get("content") or "").replace(HEADER, "")} for m in asked]
    )


def figures_of(measured: Measured, prefix: str) -> dict[str, Any]:
    recalls = measured.recalls
    out: dict[str, Any] = {
        f"{prefix}_retention_{name}{scoring}": retention(recalls, name, scoring)
        for name in [*ARMS, *RECALL_ARMS]
        for scoring in SCORINGS
    }
    out.update(
        {f"{prefix}_prompt_share_{name}": statistics.fmean(measured.shares[name]) for name in ARMS}
    )
    for budget in BUDGETS:
        for scoring in SCORINGS:
            # None when keep-recent keeps no key word at all (no ratio to give).
            kept = out[f"{prefix}_retention_keep_recent_once_{budget}{scoring}"]
            offline = out[f"{prefix}_retention_offline_once_{budget}{scoring}"]
            out[f"{prefix}_offline_over_keep_recent_{budget}{scoring}"] = (
                offline / kept if kept else None
            )
    out[f"{prefix}_full_conversation_recall"] = statistics.fmean(r for _, r, _ in recalls["full"])
    out[f"{prefix}_questions"] = len(recalls["full"])
    out[f"{prefix}_conversations"] = measured.conversations
    out[f"{prefix}_too_short_for_5pct"] = measured.skipped
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
            measured = measure(rows, counts, temporal, seconds)
            figures.update(figures_of(measured, f"{name}_{half}"))
    figures["mean_compact_seconds"] = statistics.fmean(seconds)
    report(figures, args.json)


if __name__ == "__main__":
    main()
