"""Tool output on real agent runs: tokens saved by masking, and no split tool unit.

On ``taubench_airline_dev.jsonl`` and ``openhands_example.jsonl``, every
conversation is logged and compacted at 25%, 50% and 75% of its tokens and at
small fixed budgets (those below its system prompt + latest user message are
refused by design and counted apart), once with the ``offline`` preset and once
with masking alone. Every rendered prompt is checked for split tool units (a
result without its call just before, or a call whose logged results are not
all there) and for tokens over budget; both counts must be 0.
``masking_tokens_saved_pct_<file>`` is what masking every old tool output
saves on the whole file, no budget.
"""

from __future__ import annotations

import copy
from typing import Any

from _common import conversations, parse_args, report

from contextfold import BudgetError, Memory, View, get_preset
from contextfold.core.units import tool_unit_faults
from contextfold.strategies import ObservationMasking, Pipeline
from contextfold.strategies.triggers import Always

FILES = ("taubench_airline_dev", "openhands_example")
FRACTIONS = (0.25, 0.5, 0.75)
FIXED = (2_000, 4_000, 8_000)


def masking() -> Pipeline:
    return Pipeline([ObservationMasking(trigger=Always())], name="masking")


def check(view: View, budget: int, answered: set[str], totals: dict[str, int]) -> None:
    """Compact ``view`` to ``budget``, render, and count what is wrong with the prompt."""
    try:
        view.compact(budget)
        rendered = view.render_report(budget)
    except BudgetError:
        totals["budgets_refused"] += 1
        return
    totals["prompts_checked"] += 1
    totals["split_units"] += len(tool_unit_faults(rendered.messages, answered=answered))
    totals["over_budget"] += rendered.tokens > budget
    totals["cut_by_render"] += rendered.omitted > 0


def main() -> None:
    args = parse_args(__doc__.splitlines()[0] if __doc__ else "tools")
    limit = 30 if args.quick else None
    totals = {
        "prompts_checked": 0,
        "split_units": 0,
        "over_budget": 0,
        "budgets_refused": 0,
        "cut_by_render": 0,
        "log_changed": 0,
    }
    figures: dict[str, Any] = {}
    for name in FILES:
        before = after = 0
        rows = list(conversations(name, limit))
        for n, row in enumerate(rows):
            session = Memory().session(f"{name}-{n}")
            session.extend(row["messages"])
            logged = copy.deepcopy(session.history())
            answered = {m["tool_call_id"] for m in row["messages"] if m["role"] == "tool"}
            masked = session.view("masked", pipeline=masking())
            saved = masked.compact()
            before += saved.tokens_before
            after += saved.tokens_after
            full = saved.tokens_before
            budgets = sorted({int(full * f) for f in FRACTIONS} | set(FIXED))
            for budget in budgets:
                for label, pipeline in (("offline", get_preset("offline")), ("masking", masking())):
                    view = session.view(f"{label}-{budget}", pipeline=pipeline)
                    check(view, budget, answered, totals)
            totals["log_changed"] += session.history() != logged
        figures[f"conversations_{name}"] = len(rows)
        figures[f"masking_tokens_saved_pct_{name}"] = round(100 * (before - after) / before, 2)
    figures.update(totals)
    report(figures, args.json)
    if figures["split_units"] or figures["over_budget"] or figures["log_changed"]:
        raise SystemExit("split tool units, prompts over budget or a changed log: see above")


if __name__ == "__main__":
    main()
