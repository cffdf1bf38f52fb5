"""Scores read from the audit entries: probes per type and arm, failures, costs, agreement.

Every figure here is counted from the entries ``grading`` wrote, so a reader
can recount it from the ``audit`` list. A score is the share correct with
``n`` (entries with a verdict; failed calls are counted apart) and a 95% Wilson
interval, which stays inside 0..1 and is honest at the small ``n`` of a probe
type on a few conversations.

The judge's agreement is measured on the entries where exact match applies
(``exact`` is set: probes, and questions whose gold is a short span) and the
judge gave a verdict: the share where the two agree, ``n``, and the two kinds of
disagreement (judge CORRECT where the answer lacks the gold's key words; judge
WRONG where it has them). ``--hand-grades`` (JSONL of ``{"id", "correct"}``,
ids as in the audit) measures the judge, and exact match, against a reader.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.evaluation.probes import PROBE_TYPES

Z95 = 1.959964


def wilson(correct: int, n: int) -> tuple[float, float] | None:
    """The 95% Wilson score interval of ``correct`` out of ``n`` (None: n is 0)."""
    if n == 0:
        return None
    p = correct / n
    denominator = 1 + Z95**2 / n
    centre = (p + Z95**2 / (2 * n)) / denominator
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def score(verdicts: Sequence[bool]) -> dict[str, Any]:
    """``n``, ``correct``, ``score`` and its interval (``low``, ``high``)."""
    n, correct = len(verdicts), sum(verdicts)
    interval = wilson(correct, n)
    return {
        "n": n,
        "correct": correct,
        "score": correct / n if n else None,
        "low": None if interval is None else round(interval[0], 4),
        "high": None if interval is None else round(interval[1], 4),
    }


def arm_costs(audit: Iterable[Mapping[str, Any]], arm: str) -> dict[str, Any]:
    """What answering and grading cost on ``arm``, and its failed calls by reason."""
    entries = [e for e in audit if e["arm"] == arm]
    return {
        "answer_calls": sum(e["calls"] for e in entries),
        "answer_tokens": sum(e["tokens"] for e in entries),
        "grade_calls": sum(e.get("judge_calls", 0) for e in entries),
        "grade_tokens": sum(e.get("judge_tokens", 0) for e in entries),
        "failed": dict(sorted(Counter(e["reason"] for e in entries if e["error"]).items())),
    }


def probe_scores(audit: Sequence[Mapping[str, Any]], arms: Sequence[str]) -> list[dict[str, Any]]:
    """Per arm (in order, ``full`` first), the probe scores per type and over all types."""
    rows = []
    for arm in arms:
        probes = [e for e in audit if e["arm"] == arm and e.get("kind") == "probe"]
        graded = [e for e in probes if e["verdict"] is not None]
        rows.append(
            {
                "arm": arm,
                "by_type": {
                    kind: score([e["verdict"] for e in graded if e["type"] == kind])
                    for kind in PROBE_TYPES
                },
                "all": score([e["verdict"] for e in graded]),
                "failed": len(probes) - len(graded),
            }
        )
    return rows


def _agreement(pairs: Sequence[tuple[bool, bool]]) -> dict[str, Any]:
    """How often the first grade (the judge's) agrees with the second, and how not."""
    agree = sum(a == b for a, b in pairs)
    return {
        "n": len(pairs),
        "agreement": agree / len(pairs) if pairs else None,
        "judge_correct_other_wrong": sum(a and not b for a, b in pairs),
        "judge_wrong_other_correct": sum(b and not a for a, b in pairs),
    }


def agreement(
    audit: Sequence[Mapping[str, Any]], hand: Mapping[str, bool] | None = None
) -> dict[str, Any]:
    """The judge against exact match, and (given ``hand``) the judge and exact match against
    hand grades."""
    judged = [e for e in audit if e.get("judge_raw") is not None and e["verdict"] is not None]
    found: dict[str, Any] = {
        "exact": _agreement([(e["verdict"], e["exact"]) for e in judged if e["exact"] is not None])
    }
    if hand is not None:
        found["hand"] = _agreement(
            [(e["verdict"], hand[e["id"]]) for e in judged if e["id"] in hand]
        )
        answered = [e for e in audit if e["exact"] is not None and e["id"] in hand]
        found["exact_vs_hand"] = _agreement([(e["exact"], hand[e["id"]]) for e in answered])
    return found


def read_hand_grades(path: Path) -> dict[str, bool]:
    """``--hand-grades``: one ``{"id": ..., "correct": true|false}`` a line."""
    grades: dict[str, bool] = {}
    try:
        lines = path.read_text("utf-8").splitlines()
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc}", field="hand_grades") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            key, correct = row["id"], row["correct"]
        except (ValueError, KeyError, TypeError):
            raise InvalidInput(
                f'{path} line {number}: expected {{"id": ..., "correct": true|false}}',
                field="hand_grades",
            ) from None
        if not isinstance(key, str) or not isinstance(correct, bool):
            raise InvalidInput(
                f"{path} line {number}: id is a string and correct true or false",
                field="hand_grades",
            )
        grades[key] = correct
    return grades
