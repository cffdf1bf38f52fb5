from __future__ import annotations

import gzip
import itertools
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

# The store and adapter contracts ship in the package; rewritten asserts explain their failures.
pytest.register_assert_rewrite(
    "contextfold.testing.store_contract", "contextfold.testing.adapter_contract"
)

ROOT = Path(__file__).resolve().parent
DATA = Path(os.environ.get("CONTEXTFOLD_DATA", ROOT.parents[1] / "shared" / "data"))
FIXTURES = ROOT / "fixtures"


# Words, not numbers: numbers are must-keep items that summaries would pin.
NATO = (
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
    "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo",
    "sierra", "tango", "uniform", "victor", "whiskey", "xray", "yankee", "zulu",
)  # fmt: skip


def load_rows(name: str, limit: int | None = None) -> list[dict[str, Any]]:
    """The first ``limit`` rows (all without one) of a data set.

    Read from the shared data (``$CONTEXTFOLD_DATA``, else ``../shared/data``)
    when the file is there, else from the small copy in ``tests/fixtures`` when
    it has enough rows. A data set found in neither skips the test, or fails it
    under ``CI=true``, where a skip would hide that the suite ran without it.
    """
    shared = DATA / f"{name}.jsonl"
    if shared.exists():
        with shared.open(encoding="utf-8") as fh:
            return _rows(fh, limit)
    fixture = FIXTURES / f"{name}.jsonl.gz"
    if fixture.exists():
        with gzip.open(fixture, "rt", encoding="utf-8") as fh:
            rows = _rows(fh, limit)
        if limit is None or len(rows) == limit:
            return rows
        missing = f"tests/fixtures holds {len(rows)} rows of {name}, the test reads {limit}"
    else:
        missing = f"{name} is not in tests/fixtures"
    reason = f"{shared} is missing and {missing}; set CONTEXTFOLD_DATA to the shared data folder"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def _rows(lines: Iterable[str], limit: int | None) -> list[dict[str, Any]]:
    return [json.loads(line) for line in itertools.islice(lines, limit)]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium under Playwright, one a test module (``page_server``)."""
    from page_server import launched_browser

    yield from launched_browser()


@pytest.fixture
def database() -> Iterator[str]:
    """The worker tests' store: a fresh PostgreSQL schema's URL, with Redis up as the broker
    (each fails under ``CI=true`` when its service is down)."""
    from pg import fresh_schema, require_postgres, url
    from workers_harness import require_redis

    require_postgres()
    require_redis()
    with fresh_schema() as schema:
        yield url(schema)


@pytest.fixture
def test_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``slow:`` and ``failing`` models (``contextfold.testing.models``) registered in
    this process, for this test only, as a worker's ``--plugin`` registers them."""
    import importlib

    from contextfold.llm import registry

    monkeypatch.setattr(registry, "_PROVIDERS", dict(registry._PROVIDERS))
    importlib.reload(importlib.import_module("contextfold.testing.models"))
