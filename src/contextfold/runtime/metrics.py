"""Counting what compaction does: ``Stats`` always, Prometheus when installed.

Both are event callbacks: pass them in a runner's ``on_event`` (or a view's).
``Stats`` keeps counts and durations in process, for tests, benchmarks and a
status page. ``PrometheusMetrics`` exports the same through
``prometheus_client``, an optional dependency (``contextfold[metrics]``); its
labels are view and strategy names, never session ids, which are unbounded.
"""

from __future__ import annotations

import importlib
import threading
from collections import Counter
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from contextfold.core.events import Event
from contextfold.core.extras import needs_extra

_JOB_KINDS = ("committed", "failed")


@dataclass
class Durations:
    count: int = 0
    total_s: float = 0.0
    max_s: float = 0.0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.total_s += seconds
        self.max_s = max(self.max_s, seconds)


class Stats:
    """Events counted by kind, job durations, and tokens saved by committed folds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.durations: dict[str, Durations] = {kind: Durations() for kind in _JOB_KINDS}
        self.tokens_saved = 0

    def __call__(self, event: Event) -> None:
        with self._lock:
            self.counts[event.kind] += 1
            if event.kind in _JOB_KINDS and event.duration_s:
                self.durations[event.kind].add(event.duration_s)
            if event.kind == "committed":
                self.tokens_saved += event.tokens_before - event.tokens_after

    def snapshot(self) -> dict[str, Any]:
        """A JSON-ready copy."""
        with self._lock:
            return {
                "counts": dict(self.counts),
                "durations": {
                    kind: {"count": d.count, "total_s": d.total_s, "max_s": d.max_s}
                    for kind, d in self.durations.items()
                },
                "tokens_saved": self.tokens_saved,
            }


class PrometheusMetrics:
    """Counters and a job-duration histogram in a ``prometheus_client`` registry."""

    def __init__(self, registry: Any = None, *, namespace: str = "contextfold") -> None:
        prom = _prometheus_client()
        where = {} if registry is None else {"registry": registry}
        self.events = prom.Counter(
            f"{namespace}_events_total",
            "Compaction events by kind.",
            ["kind", "view", "strategy"],
            **where,
        )
        self.job_seconds = prom.Histogram(
            f"{namespace}_job_seconds",
            "Time from a job's start to its commit or failure.",
            ["view", "strategy", "outcome"],
            **where,
        )
        self.tokens_saved = prom.Counter(
            f"{namespace}_tokens_saved_total",
            "Prompt tokens removed by committed folds.",
            ["view", "strategy"],
            **where,
        )

    def __call__(self, event: Event) -> None:
        self.events.labels(event.kind, event.view, event.strategy).inc()
        if event.kind in _JOB_KINDS and event.duration_s:
            self.job_seconds.labels(event.view, event.strategy, event.kind).observe(
                event.duration_s
            )
        if event.kind == "committed":
            saved = max(0, event.tokens_before - event.tokens_after)
            self.tokens_saved.labels(event.view, event.strategy).inc(saved)


def _prometheus_client() -> ModuleType:
    with needs_extra("PrometheusMetrics", "metrics"):
        return importlib.import_module("prometheus_client")
