"""Messages dropped by render's cut with no fold covering them, per preset.

The shared agent runs (30 tau-bench runs and the 3 OpenHands runs) are each
compacted at a 4,000-token budget with ``compact_messages``, the library call
behind ``contextfold compact --json``; its ``omitted`` field counts the
messages the last-resort cut left out behind a marker. Goal: 0 for every
folding preset (``disabled`` never folds, by definition, and is shown as the
baseline). Runs whose system prompt and latest user message alone exceed the
budget are refused by design and counted apart.
"""

from __future__ import annotations

import time
from typing import Any

from _common import conversations, parse_args, report

from contextfold import BudgetError, compact_messages, preset_names

BUDGET = 4000


def main() -> None:
    args = parse_args(__doc__ or "")
    rows = list(conversations("taubench_airline_dev", 10 if args.quick else 30))
    rows += list(conversations("openhands_example"))
    figures: dict[str, Any] = {"runs": len(rows), "budget": BUDGET}
    figures["messages"] = sum(len(r["messages"]) for r in rows)
    worst = 0
    for preset in preset_names():
        omitted = refused = 0
        began = time.perf_counter()
        for row in rows:
            try:
                result = compact_messages(row["messages"], budget=BUDGET, preset=preset)
            except BudgetError:
                refused += 1
                continue
            omitted += result.omitted
        key = preset.replace("-", "_")
        figures[f"omitted_{key}"] = omitted
        figures[f"refused_{key}"] = refused
        figures[f"seconds_{key}"] = round(time.perf_counter() - began, 2)
        if preset != "disabled":
            worst = max(worst, omitted)
    figures["max_omitted_folding_presets"] = worst
    report(figures, args.json)


if __name__ == "__main__":
    main()
