"""The property tests' long run: tests/test_properties.py under the ``long`` profile.

Runs pytest in this process with ``CONTEXTFOLD_HYPOTHESIS=long`` (randomized,
``LONG_EXAMPLES`` examples a case, or ``$CONTEXTFOLD_HYPOTHESIS_EXAMPLES``;
``--quick``: the ``quick`` profile, a few a case) and reports the examples run, the cases that passed and failed, and each
failure's first line.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from _common import ROOT, parse_args, report

TESTS = ROOT / "tests"


class Tally:
    """A pytest plugin that keeps each case's outcome and its failure's gist."""

    def __init__(self) -> None:
        self.outcomes: dict[str, str] = {}
        self.failures: dict[str, str] = {}

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when != "call" and not (report.when == "setup" and report.failed):
            return
        case = report.nodeid.split("::")[-1]
        self.outcomes[case] = report.outcome
        if report.failed:
            text = str(report.longrepr)
            gist = [line for line in text.splitlines() if line.startswith("E ")][:2]
            self.failures[case] = " | ".join(gist) or text[-300:]


def main() -> None:
    args = parse_args(__doc__ or "")
    os.environ["CONTEXTFOLD_HYPOTHESIS"] = "quick" if args.quick else "long"
    # A shorter randomized run than the long profile's (examples a case), where time is short.
    a_case = os.environ.get("CONTEXTFOLD_HYPOTHESIS_EXAMPLES")
    sys.path.insert(0, str(TESTS))
    import pytest

    tally = Tally()
    t0 = time.perf_counter()
    code = pytest.main(
        ["-q", "-p", "no:cacheprovider", "-W", "ignore", str(TESTS / "test_properties.py")],
        plugins=[tally],
    )
    seconds = time.perf_counter() - t0
    module = sys.modules.get("test_properties")
    examples: dict[str, int] = dict(getattr(module, "EXAMPLES_RUN", {}))
    counts = {k: sum(1 for v in tally.outcomes.values() if v == k) for k in ("passed", "failed")}
    figures: dict[str, Any] = {
        "profile": os.environ["CONTEXTFOLD_HYPOTHESIS"],
        "examples_a_case": int(a_case) if a_case else None,
        "examples_run": sum(examples.values()),
        "cases": len(tally.outcomes),
        "cases_passed": counts["passed"],
        "cases_failed": counts["failed"],
        "failures": tally.failures,
        "pytest_exit_code": int(code),
        "seconds": round(seconds, 1),
    }
    report(figures, args.json)


if __name__ == "__main__":
    main()
