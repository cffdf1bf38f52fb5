"""Prefix stability: how often a turn's prompt extends the previous turn's prompt unchanged.

Providers cache prompt prefixes; a prompt whose beginning changes every turn
pays full price every turn. Each shared agent run (tau-bench and OpenHands) is
replayed one message a turn at a third of its tokens (``bench/_replay.py``:
the budget, and ``budgets_raised`` counting the runs whose largest user
message needed more), compacting inline after each append (the ``offline``
and ``keep-recent`` presets). ``bench/cache_share.py`` weighs the same replay
by tokens. A turn is stable when
its prompt starts with the whole previous prompt. Turns are pooled over all
runs; goal for ``offline``: >= 90%.
"""

from __future__ import annotations

from typing import Any

from _common import parse_args, report
from _replay import agent_runs, budget_of, replay

from contextfold import get_counter

PRESETS = ("offline", "keep-recent")


def stability(messages: list[dict[str, Any]], preset: str, budget: int) -> tuple[int, int, int]:
    """(stable turns, turns, folds committed) for one run."""
    previous: list[dict[str, Any]] | None = None
    stable = turns = folds = 0
    for turn in replay(messages, preset, budget):
        folds += len(turn.compacted.folds)
        if previous is not None:
            turns += 1
            stable += turn.prompt[: len(previous)] == previous
        previous = turn.prompt
    return stable, turns, folds


def main() -> None:
    args = parse_args(__doc__ or "")
    rows = agent_runs(args.quick)
    counter = get_counter("o200k_base")
    figures: dict[str, Any] = {"runs": len(rows)}
    budgets = [budget_of(row["messages"], counter) for row in rows]
    figures["budgets_raised"] = sum(raised for _, raised in budgets)
    for preset in PRESETS:
        stable = turns = folds = 0
        for row, (budget, _) in zip(rows, budgets, strict=True):
            s, t, f = stability(row["messages"], preset, budget)
            stable, turns, folds = stable + s, turns + t, folds + f
        key = preset.replace("-", "_")
        figures[f"stable_share_{key}"] = round(stable / turns, 4)
        figures[f"turns_{key}"] = turns
        figures[f"folds_{key}"] = folds
    report(figures, args.json)


if __name__ == "__main__":
    main()
