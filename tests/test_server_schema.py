"""Schemathesis against the app's own OpenAPI spec: a bounded run with no 5xx answer."""

from __future__ import annotations

import importlib
import sys
import warnings
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def api_schema() -> ModuleType:
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module("api_schema")
    finally:
        sys.path.remove(str(BENCH))


def test_fuzzed_requests_get_no_server_error() -> None:
    pytest.importorskip("schemathesis")
    bench = api_schema()
    upstream = bench.Upstream()
    app, service, key = bench.seeded_app(f"openai-compatible:{upstream.url}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found = bench.fuzz(app, key, examples=5)
    finally:
        service.close()
        upstream.close()
    assert found.server_errors == []
    assert found.count_5xx == 0
    assert found.cases >= 100
    # the run reached the handlers, not only the validation in front of them
    assert found.statuses[200] > 0 and found.statuses[201] > 0 and found.statuses[422] > 0
