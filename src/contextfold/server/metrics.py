"""``/metrics``: requests by route and status, their latency, appends, renders, compaction.

One ``CollectorRegistry`` per app, so apps built side by side (tests) count
apart. ``/metrics`` answers without a key, so no label carries a tenant's data
and every label takes values from a fixed set: routes by their template
(``/api/v1/sessions/{sid}``, else ``unmatched``), methods of HTTP's own list
(else ``other``), compaction events by kind and strategy type, never by view
(a tenant names its views) and never by a strategy's own ``name`` unless it
is a built-in's (``other``). The request counting is a plain ASGI middleware,
cheaper per request than Starlette's ``BaseHTTPMiddleware``.
"""

from __future__ import annotations

import dataclasses
import time

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from contextfold.memory.bridge import NAME as PROVISIONAL_NAME
from contextfold.runtime.metrics import OTHER, PrometheusMetrics
from contextfold.strategies.registry import registered_strategies

BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class ServiceMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "contextfold_http_requests_total",
            "HTTP requests by route template, method and status.",
            ["route", "method", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "contextfold_http_request_seconds",
            "HTTP request latency by route template.",
            ["route", "method"],
            buckets=BUCKETS,
            registry=r,
        )
        self.appended = Counter(
            "contextfold_messages_appended_total", "Messages stored by the API.", registry=r
        )
        self.renders = Counter("contextfold_renders_total", "Prompts rendered.", registry=r)
        self.streams = Gauge(
            "contextfold_event_streams", "Server-sent-event streams open.", registry=r
        )
        self.watched = Gauge(
            "contextfold_runner_watched_views", "Views the background runner compacts.", registry=r
        )
        self.compaction = PrometheusMetrics(r, by_view=False, strategies=strategy_names())

    def expose(self) -> bytes:
        return bytes(generate_latest(self.registry))


METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def strategy_names() -> frozenset[str]:
    """The names a strategy may be counted under: every registered type and the default
    ``name`` of its class, and the bridge's provisional folds; any other (a name set in a
    view's pipeline) is ``other``."""
    names = {PROVISIONAL_NAME}
    for type_name, cls in registered_strategies().items():
        names.add(type_name)
        for f in dataclasses.fields(cls):
            if f.name == "name" and isinstance(f.default, str):
                names.add(f.default)
    return frozenset(names)


def route_of(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"


class RequestMetrics:
    """ASGI middleware counting each HTTP request by its route template and status."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [500]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = route_of(scope)
            method = str(scope.get("method", ""))
            method = method if method in METHODS else OTHER
            self.metrics.requests.labels(route, method, str(status[0])).inc()
            self.metrics.latency.labels(route, method).observe(time.perf_counter() - start)
