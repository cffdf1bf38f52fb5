"""Cache share: how much of each prompt a provider's prefix cache could serve.

Providers cache a prompt's beginning and bill the cached part at a fraction;
a cache serves only the whole messages a prompt shares, from its start and in
order, with the prompt before it. Each shared agent run (tau-bench and
OpenHands) is replayed one message a turn at a third of its tokens
(``bench/_replay.py``), and each turn's prompt is compared with the previous
turn's: ``uncached_share`` is one less the shared messages' tokens over all
prompt tokens, pooled over every turn of every run. Arms: ``offline`` with its
defaults (recall on), ``offline`` with recall off, ``keep-recent``, and
``disabled`` with no budget, which never folds: the ceiling, since only what a
turn adds is new. Goal: ``offline`` within 1.5x the ceiling.

Per arm also: fold steps per run (cycles that committed folds), folds per run,
and the tokens a fold step took out of the prompt, on average.
"""

from __future__ import annotations

import json
from typing import Any

from _common import parse_args, report
from _replay import agent_runs, budget_of, replay

from contextfold import TokenCounter, get_counter

ARMS: dict[str, tuple[str, dict[str, Any]]] = {
    "offline": ("offline", {}),
    "offline_no_recall": ("offline", {"recall": False}),
    "keep_recent": ("keep-recent", {}),
    "disabled": ("disabled", {}),
}
GOAL = 1.5


class Sizes:
    """Each message's token count, counted once per distinct message."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self.known: dict[str, int] = {}

    def of(self, message: dict[str, Any]) -> int:
        key = json.dumps(message, sort_keys=True)
        if key not in self.known:
            self.known[key] = self.counter.message(message)
        return self.known[key]


def shared_prefix(prompt: list[dict[str, Any]], previous: list[dict[str, Any]]) -> int:
    """How many whole messages ``prompt`` shares with ``previous`` from the start."""
    n = 0
    for a, b in zip(prompt, previous, strict=False):
        if a != b:
            break
        n += 1
    return n


def arm(rows: list[dict[str, Any]], budgets: list[int], name: str, sizes: Sizes) -> dict[str, Any]:
    preset, view = ARMS[name]
    total = shared = steps = folds = taken = 0
    for row, budget in zip(rows, budgets, strict=True):
        previous: list[dict[str, Any]] = []
        for turn in replay(
            row["messages"], preset, None if preset == "disabled" else budget, **view
        ):
            prompt = turn.prompt
            total += sum(sizes.of(m) for m in prompt)
            shared += sum(sizes.of(m) for m in prompt[: shared_prefix(prompt, previous)])
            if turn.compacted.folds:
                steps += 1
                folds += len(turn.compacted.folds)
                taken += turn.compacted.tokens_before - turn.compacted.tokens_after
            previous = prompt
    return {
        f"uncached_share_{name}": round(1 - shared / total, 4),
        f"fold_steps_per_run_{name}": round(steps / len(rows), 2),
        f"folds_per_run_{name}": round(folds / len(rows), 2),
        f"tokens_per_fold_step_{name}": round(taken / steps) if steps else 0,
    }


def main() -> None:
    args = parse_args(__doc__ or "")
    rows = agent_runs(args.quick)
    counter = get_counter("o200k_base")
    sizes = Sizes(counter)
    budgets = [budget_of(row["messages"], counter)[0] for row in rows]
    figures: dict[str, Any] = {"runs": len(rows)}
    for name in ARMS:
        figures.update(arm(rows, budgets, name, sizes))
    ceiling = figures["uncached_share_disabled"]
    for name in ARMS:
        if name != "disabled":
            figures[f"ratio_to_ceiling_{name}"] = round(
                figures[f"uncached_share_{name}"] / ceiling, 2
            )
    figures["goal_ratio"] = GOAL
    report(figures, args.json)


if __name__ == "__main__":
    main()
