"""Prefix stability: how often a turn's prompt extends the previous turn's prompt unchanged.

Providers cache prompt prefixes; a prompt whose beginning changes every turn
pays full price every turn. Each shared agent run (tau-bench and OpenHands) is
replayed one message a turn at a third of its tokens, compacting inline after
each append (the ``offline`` and ``keep-recent`` presets). The budget is the
system prompt, which no preset may fold, plus a third of the conversation
beside it (a third of the whole run would not hold tau-bench's 1,250-token
policy in short runs); where the largest user message needs more, the budget
is raised to it and ``budgets_raised`` counts those runs. A turn is stable when
its prompt starts with the whole previous prompt. Turns are pooled over all
runs; goal for ``offline``: >= 90%.
"""

from __future__ import annotations

from typing import Any

from _common import conversations, parse_args, report

from contextfold import Memory, TokenCounter, get_counter

PRESETS = ("offline", "keep-recent")


def replay(messages: list[dict[str, Any]], preset: str, budget: int) -> tuple[int, int, int]:
    """(stable turns, turns, folds committed) for one run."""
    session = Memory().session("bench")
    view = session.view("v", preset=preset, budget=budget)
    previous: list[dict[str, Any]] | None = None
    stable = turns = 0
    for message in messages:
        session.append(message)
        view.compact()
        prompt = view.render()
        if previous is not None:
            turns += 1
            stable += prompt[: len(previous)] == previous
        previous = prompt
    return stable, turns, len(view.folds(include_superseded=True))


def budget_of(messages: list[dict[str, Any]], counter: TokenCounter) -> tuple[int, bool]:
    """The system prompt and a third of the rest, or what the largest user message needs."""
    system = sum(counter.message(m) for m in messages if m["role"] == "system")
    user = max((counter.message(m) for m in messages if m["role"] == "user"), default=0)
    rest = counter.messages(messages) - system
    third = system + rest // 3
    need = system + user + 256
    return max(third, need), third < need


def main() -> None:
    args = parse_args(__doc__ or "")
    rows = list(conversations("taubench_airline_dev", 20 if args.quick else 100))
    rows += list(conversations("openhands_example"))
    counter = get_counter("o200k_base")
    figures: dict[str, Any] = {"runs": len(rows)}
    budgets = [budget_of(row["messages"], counter) for row in rows]
    figures["budgets_raised"] = sum(raised for _, raised in budgets)
    for preset in PRESETS:
        stable = turns = folds = 0
        for row, (budget, _) in zip(rows, budgets, strict=True):
            s, t, f = replay(row["messages"], preset, budget)
            stable, turns, folds = stable + s, turns + t, folds + f
        key = preset.replace("-", "_")
        figures[f"stable_share_{key}"] = round(stable / turns, 4)
        figures[f"turns_{key}"] = turns
        figures[f"folds_{key}"] = folds
    report(figures, args.json)


if __name__ == "__main__":
    main()
