"""The service's side of the Celery workers (``--workers``): a view's job, compact now, figures.

Imported only when the service runs with workers, so the service needs the
``workers`` extra only then. Renders and appends never touch Redis, and no read
fails because of it: a job that cannot be read is shown as none (``job: null``),
and a scrape that cannot reach Redis reports ``contextfold_broker_up 0``. Only
compact now fails, 503 ``broker_unavailable``, when nothing could be queued.
Every call here may wait for Redis (up to its 2 s timeout), so handlers make
them on a thread, never on the event loop.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import redis
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from contextfold.memory.view import View
from contextfold.server.errors import ServiceError
from contextfold.server.settings import Settings
from contextfold.workers.queue import JobState, WorkQueue
from contextfold.workers.runner import CeleryRunner

REDIS_ERRORS = (redis.RedisError, OSError)
"""What a read of ``WorkQueue`` (redis-py alone) raises when Redis does not answer."""


def start_workers(settings: Settings) -> CeleryRunner:
    """The runner that plans here and sends jobs to the workers on ``settings.workers``."""
    assert settings.workers is not None
    return CeleryRunner(settings.workers, queue=settings.queue, settle_s=settings.settle_s)


def jobs_of(runner: CeleryRunner, views: Iterable[View]) -> list[JobState | None]:
    """Each view's job from Redis; all None when Redis does not answer."""
    views = list(views)
    try:
        return [runner.job(view) for view in views]
    except REDIS_ERRORS:
        return [None] * len(views)


def compact_later(runner: CeleryRunner, view: View) -> tuple[bool, JobState | None]:
    """Queue the view's job now, unparking it; whether this call sent it, and the job then.

    ``ServiceError`` 503 ``broker_unavailable`` when nothing was queued because
    Redis does not answer. Redis is asked first, so a refused request leaves
    the runner nothing more to try again; the job the runner planned after
    appends it goes on trying to queue meanwhile.
    """
    try:
        runner.queue.redis.ping()
    except REDIS_ERRORS as exc:
        raise broker_unavailable(exc) from exc
    queued = runner.enqueue(view, force=True)
    try:
        return queued, runner.job(view)
    except REDIS_ERRORS as exc:
        if queued:
            return queued, None
        raise broker_unavailable(exc) from exc


def broker_unavailable(exc: Exception) -> ServiceError:
    return ServiceError(503, "broker_unavailable", f"the workers' Redis does not answer: {exc}")


class QueueCollector(Collector):
    """The whole pool's figures, read from Redis at each scrape (every API process shows them)."""

    def __init__(self, queue: WorkQueue) -> None:
        self.queue = queue

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "contextfold_broker_up", "1 when the workers' Redis answered this scrape, else 0."
        )
        queue = self.queue
        try:
            depth = queue.depth()
            counts = queue.counts()
            stats = queue.stats()
            buckets, seconds = queue.latency()
        except REDIS_ERRORS:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield GaugeMetricFamily(
            "contextfold_queue_depth", "Jobs in the queue waiting for a worker.", value=depth
        )
        views = GaugeMetricFamily(
            "contextfold_queue_views", "Views whose job is in each state.", labels=["state"]
        )
        for state, n in counts.items():
            views.add_metric([state], n)
        yield views
        jobs = CounterMetricFamily(
            "contextfold_worker_jobs",
            "Jobs of the whole worker pool by outcome.",
            labels=["outcome"],
        )
        for outcome, n in stats.items():
            jobs.add_metric([outcome], n)
        yield jobs
        yield HistogramMetricFamily(
            "contextfold_worker_append_to_commit_seconds",
            "From the first append a job covers to its first committed fold.",
            buckets=[(le, float(n)) for le, n in buckets],
            sum_value=seconds,
        )
