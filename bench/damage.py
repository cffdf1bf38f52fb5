"""Damaged state: does a session heal from its log? (issue 9, point 2)

Runs the scripted damage cases of ``contextfold.testing.damage`` (fold rows
edited in the SQLite file, message rows broken, the RAM store's internals
changed, files that are not a contextfold database of this version) over a
compacted agent session, then uses it as a user would: history, render,
compact, append, render. Figures:

- ``cases``: damage cases run; ``fold_cases``: those a view must heal from;
- ``raw_errors``: cases where a non-contextfold exception escaped (goal 0);
- ``wrong_prompts``: cases with a prompt that is wrong by an independent
  check (a fresh token count over the budget, the latest user message
  missing, the system prompt not first, logged messages out of order or
  duplicated, a split tool unit) or a history that differs from the log (goal 0);
- ``recovered``: fold cases whose view is whole again after one compaction,
  without a hand edit (goal: all of ``fold_cases``);
- ``clear_errors_expected``: message and file cases answered by a StoreError
  naming the session and seq or the file (goal: all of ``error_cases``).
"""

from __future__ import annotations

import time

from _common import parse_args, report

from contextfold.testing.damage_cases import CASES, run_all


def main() -> None:
    args = parse_args(__doc__ or "")
    began = time.perf_counter()
    outcomes = run_all(120 if args.quick else 400)
    heal = [o for o in outcomes if o.expect == "heal"]
    errors = [o for o in outcomes if o.expect == "error"]
    for o in outcomes:
        if not o.ok:
            print(f"MISSED {o.case}: raw {o.raw_errors} wrong {o.wrong} errors {o.clear_errors}")
    figures = {
        "cases": len(outcomes),
        "fold_cases": len(heal),
        "error_cases": len(errors),
        "raw_errors": sum(bool(o.raw_errors) for o in outcomes),
        "wrong_prompts": sum(bool(o.wrong) for o in outcomes),
        "recovered": sum(o.recovered and o.ok for o in heal),
        "clear_errors_expected": sum(o.ok for o in errors),
        "quarantined_folds": sum(o.quarantined for o in outcomes),
        "seconds": round(time.perf_counter() - began, 1),
    }
    assert len(CASES) == len(outcomes)
    report(figures, args.json)


if __name__ == "__main__":
    main()
