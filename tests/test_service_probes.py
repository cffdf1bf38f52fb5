"""The black-box probes of ``bench/service_probes.py``, quick, against a real ``contextfold serve``:
no 5xx, no secret seen by a client, no broken promise, in every probe class."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def service_probes() -> ModuleType:
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module("service_probes")
    finally:
        sys.path.remove(str(BENCH))


def test_the_service_gives_nothing_away() -> None:
    probes = service_probes()
    figures = probes.run(quick=True)
    for name in probes.PROBES:
        assert figures[f"{name}_tried"] > 0, name
        assert figures[f"{name}_server_errors"] == 0, (name, figures)
        assert figures[f"{name}_secrets"] == 0, (name, figures)
        assert figures[f"{name}_faults"] == 0, (name, figures)
    assert figures["server_log_secrets"] == 0
    assert figures["metrics_series_growth"] == 0
    assert figures["revocation_closed_within_s"] is not None
    assert figures["message_cap_healthz_max_s"] < 0.5
