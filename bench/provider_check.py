"""Rendered prompts a provider would refuse, per preset: the goal is none.

Every preset compacts shared conversations (tau-bench and OpenHands agent
runs, the opening of LoCoMo chats, which the other party begins, and
LongMemEval chats) at several budgets; each rendered prompt is checked with
``prompt_faults`` as OpenAI would take it, and its ``to_anthropic`` form as
Anthropic would. Also counted: prompts that lost the latest user message
(goal 0). Runs whose system prompt and latest user message alone exceed the
budget are refused by design (``BudgetError``) and counted apart.
"""

from __future__ import annotations

import time
from typing import Any

from _common import conversations, parse_args, report

from contextfold import BudgetError, Memory, preset_names, prompt_faults, to_anthropic

CHAT_OPENING = 200  # LoCoMo chats run to 689 turns; their opening is enough here (80 quick)


def runs(quick: bool) -> list[tuple[str, list[dict[str, Any]]]]:
    agent_runs = list(conversations("openhands_example"))
    if quick:
        agent_runs = [min(agent_runs, key=lambda row: len(row["messages"]))]
    picked = [
        *conversations("taubench_airline_dev", 2 if quick else 20),
        *agent_runs,
        *conversations("locomo_dev", 1 if quick else None),
        *conversations("longmemeval_oracle_dev", 1 if quick else 10),
    ]
    opening = 80 if quick else CHAT_OPENING
    return [(row["id"], row["messages"][:opening]) for row in picked]


def main() -> None:
    args = parse_args(__doc__ or "")
    budgets = (1_500, 6_000) if args.quick else (1_500, 4_000, 12_000)
    picked = runs(args.quick)
    figures: dict[str, Any] = {"conversations": len(picked), "budgets": list(budgets)}
    totals = {"prompts": 0, "refused": 0, "openai_faults": 0, "anthropic_faults": 0}
    totals["latest_user_lost"] = 0
    began = time.perf_counter()
    for preset in preset_names():
        faults = 0
        for run_id, messages in picked:
            latest = next(m for m in reversed(messages) if m["role"] == "user")
            for budget in budgets:
                session = Memory().session(run_id)
                session.extend(messages)
                view = session.view("v", preset=preset, budget=budget)
                try:
                    view.compact()
                    prompt = view.render()
                except BudgetError:
                    totals["refused"] += 1
                    continue
                totals["prompts"] += 1
                openai = len(prompt_faults(prompt, "openai"))
                system, turns = to_anthropic(prompt)
                anthropic = len(prompt_faults(turns, "anthropic", system=system))
                totals["openai_faults"] += openai
                totals["anthropic_faults"] += anthropic
                faults += openai + anthropic
                plain = {k: v for k, v in latest.items() if k != "meta"}
                totals["latest_user_lost"] += plain not in prompt
        figures[f"faults_{preset.replace('-', '_')}"] = faults
    figures.update(totals)
    figures["seconds"] = round(time.perf_counter() - began, 1)
    report(figures, args.json)


if __name__ == "__main__":
    main()
