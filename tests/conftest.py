from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The store contract ships in the package; rewritten asserts explain its failures.
pytest.register_assert_rewrite("contextfold.testing.store_contract")

DATA = Path(
    os.environ.get("CONTEXTFOLD_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")
)


# Words, not numbers: numbers are must-keep items that summaries would pin.
NATO = (
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
    "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo",
    "sierra", "tango", "uniform", "victor", "whiskey", "xray", "yankee", "zulu",
)  # fmt: skip


def load_rows(name: str, limit: int | None = None) -> list[dict[str, Any]]:
    """Rows of a shared data file; the suite needs them, so a missing file fails."""
    path = DATA / f"{name}.jsonl"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: the suite reads the shared data beside the repository; "
            "set CONTEXTFOLD_DATA to its folder"
        )
    rows: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            rows.append(json.loads(line))
            if limit is not None and len(rows) >= limit:
                break
    return rows


@pytest.fixture
def data_dir() -> Iterator[Path]:
    yield DATA
