"""Stats always, Prometheus only with its extra, both fed by a runner's events."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
from crash_worker import chat, summarizing_view

from contextfold import Memory, ModelError
from contextfold.runtime import Cooldown, InlineRunner, PrometheusMetrics, Stats
from contextfold.testing import ScriptedModel


def _compact_twice_after_a_failure(*callbacks: Any) -> None:
    session = Memory().session("s", system="You help with tests.")
    model = ScriptedModel([ModelError("upstream 500", status=500)], default="short")
    runner = InlineRunner(on_event=list(callbacks), cooldown=Cooldown(base_s=0.0))
    runner.watch(summarizing_view(session, model))
    session.extend(chat(5))
    for message in chat(6, first=5):
        session.append(message)
    runner.stop()


def test_stats_count_events_durations_and_tokens_saved() -> None:
    stats = Stats()
    seen: list[Any] = []
    _compact_twice_after_a_failure(stats, seen.append)
    snap = stats.snapshot()
    assert snap["counts"] == {
        "planned": 3,
        "started": 3,
        "failed": 1,
        "degraded": 1,
        "committed": 2,
    }
    committed = [e for e in seen if e.kind == "committed"]
    assert snap["durations"]["committed"]["count"] == 2
    assert snap["durations"]["committed"]["total_s"] == pytest.approx(
        sum(e.duration_s for e in committed)
    )
    assert snap["durations"]["committed"]["max_s"] == max(e.duration_s for e in committed)
    assert snap["tokens_saved"] == sum(e.tokens_before - e.tokens_after for e in committed) > 0


def test_prometheus_without_its_extra_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(ImportError, match=r"contextfold\[metrics\]"):
        PrometheusMetrics()


class _Metric:
    """Just enough of a prometheus_client metric to read back what was recorded."""

    def __init__(self, name: str, doc: str, labels: list[str], registry: Any = None) -> None:
        self.name = name
        self.registry = registry
        self.values: dict[tuple[str, ...], list[float]] = {}
        self._key: tuple[str, ...] = ()

    def labels(self, *values: str) -> _Metric:
        self._key = values
        return self

    def inc(self, amount: float = 1.0) -> None:
        self.values.setdefault(self._key, []).append(amount)

    observe = inc


def test_prometheus_metrics_record_events(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("prometheus_client")
    fake.Counter = _Metric  # type: ignore[attr-defined]
    fake.Histogram = _Metric  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "prometheus_client", fake)
    registry = object()
    metrics = PrometheusMetrics(registry, namespace="cf")
    _compact_twice_after_a_failure(metrics)
    events: Any = metrics.events
    assert (events.name, events.registry) == ("cf_events_total", registry)
    counts = {key: len(v) for key, v in events.values.items()}
    assert counts[("committed", "default", "summarize")] == 2
    assert counts[("failed", "default", "summarize")] == 1
    jobs: Any = metrics.job_seconds
    assert sorted(key[2] for key in jobs.values) == ["committed", "failed"]
    assert len(jobs.values[("default", "summarize", "committed")]) == 2
    saved: Any = metrics.tokens_saved
    assert sum(saved.values[("default", "summarize")]) > 0
