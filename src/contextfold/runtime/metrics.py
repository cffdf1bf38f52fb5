"""Counting what compaction does: ``Stats`` always, Prometheus when installed.

Both are event callbacks: pass them in a runner's ``on_event`` (or a view's).
``Stats`` keeps counts and durations in process, for tests, benchmarks and a
status page; beside jobs, they time provisional folds: what making one took
(``provisional``) and how long one stood before a committed fold replaced it
(``replaced``, ``contextfold.memory.bridge``). ``PrometheusMetrics`` exports the same through
``prometheus_client``, an optional dependency (``contextfold[metrics]``); its
labels are view and strategy names, never session ids, which are unbounded. A
process serving others' views (``contextfold serve``) counts without the view
label and with strategy names from a fixed set, so no label is another's data.
"""

from __future__ import annotations

import importlib
import threading
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from contextfold.core.events import Event
from contextfold.core.extras import needs_extra

_JOB_KINDS = ("committed", "failed")
_BRIDGE_KINDS = ("provisional", "replaced")
"""A provisional fold's ``duration_s``: what making it took, and how long it stood."""
OTHER = "other"
"""The label of a value outside a bounded set."""


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
        self.durations: dict[str, Durations] = {
            kind: Durations() for kind in (*_JOB_KINDS, *_BRIDGE_KINDS)
        }
        self.tokens_saved = 0

    def __call__(self, event: Event) -> None:
        with self._lock:
            self.counts[event.kind] += 1
            if event.kind in self.durations and event.duration_s:
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
    """Counters and a job-duration histogram in a ``prometheus_client`` registry.

    ``by_view=False`` drops the view label; with ``strategies`` a strategy named
    outside that set is counted as ``other``.
    """

    def __init__(
        self,
        registry: Any = None,
        *,
        namespace: str = "contextfold",
        by_view: bool = True,
        strategies: Collection[str] | None = None,
    ) -> None:
        prom = _prometheus_client()
        where = {} if registry is None else {"registry": registry}
        views = ["view"] if by_view else []
        self._by_view = by_view
        self._strategies = strategies
        self.events = prom.Counter(
            f"{namespace}_events_total",
            "Compaction events by kind.",
            ["kind", *views, "strategy"],
            **where,
        )
        self.job_seconds = prom.Histogram(
            f"{namespace}_job_seconds",
            "Time from a job's start to its commit or failure.",
            [*views, "strategy", "outcome"],
            **where,
        )
        self.provisional_seconds = prom.Histogram(
            f"{namespace}_provisional_seconds",
            "Provisional folds: the time to make one (made), and how long one stood "
            "until a committed fold replaced it (stood).",
            [*views, "phase"],
            **where,
        )
        self.tokens_saved = prom.Counter(
            f"{namespace}_tokens_saved_total",
            "Prompt tokens removed by committed folds.",
            [*views, "strategy"],
            **where,
        )

    def __call__(self, event: Event) -> None:
        view = (event.view,) if self._by_view else ()
        known = self._strategies is None or event.strategy in self._strategies
        strategy = event.strategy if known else OTHER
        self.events.labels(event.kind, *view, strategy).inc()
        if event.kind in _JOB_KINDS and event.duration_s:
            self.job_seconds.labels(*view, strategy, event.kind).observe(event.duration_s)
        if event.kind in _BRIDGE_KINDS:
            phase = "made" if event.kind == "provisional" else "stood"
            self.provisional_seconds.labels(*view, phase).observe(event.duration_s)
        if event.kind == "committed":
            saved = max(0, event.tokens_before - event.tokens_after)
            self.tokens_saved.labels(*view, strategy).inc(saved)


def _prometheus_client() -> ModuleType:
    with needs_extra("PrometheusMetrics", "metrics"):
        return importlib.import_module("prometheus_client")
