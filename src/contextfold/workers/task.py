"""The worker's side: the ``compact(session, view)`` task, which holds no logic of its own.

A job takes ids, opens the view from the store, takes the view's lease and
runs the one compaction cycle (``memory.cycle.compact``), as every runner
does. What may go wrong is settled here, once:

- the lease is held by another worker (it is compacting the view, or it died
  and its lease has not expired): the job is sent again ``retry_s`` later,
  unless another is pending already;
- the cycle failed (a model that let it down, a store that refused, a view
  that cannot be built here): the view's failures in a row are counted, the
  job sent again after a pause that doubles each time (``retried``), and after
  ``max_failures`` the view is parked (``parked``): other views go on;
- the worker is killed: nothing was committed unless the cycle's commit went
  through whole (one transaction, checked against the fold-set version), and
  the message, acknowledged late, is delivered again.

Each pool process opens its own store and lease keeper on its first job, after
the fork, so no connection or thread crosses a fork.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import redis

from contextfold.core.errors import NotFound
from contextfold.core.events import Event, log
from contextfold.core.tokens import get_counter
from contextfold.llm.budget import DEFAULT_LIMITS, JobLimits
from contextfold.memory.cycle import compact
from contextfold.memory.leases import LeaseKeeper
from contextfold.memory.session import Memory, Session
from contextfold.workers.app import TASK, send
from contextfold.workers.queue import WorkQueue

if TYPE_CHECKING:
    from celery import Celery, Task


@dataclass(frozen=True)
class WorkerSettings:
    """What ``contextfold worker`` is started with, beside the broker."""

    database: str
    queue: str
    lease_ttl_s: float = 60.0
    retry_s: float = 1.0
    """Pause before a job whose view's lease was held is tried again."""
    max_failures: int = 5
    """Failures in a row before a view is parked."""
    backoff_s: float = 1.0
    backoff_max_s: float = 60.0
    limits: JobLimits = field(default=DEFAULT_LIMITS)

    def backoff(self, failures: int) -> float:
        return float(min(self.backoff_s * 2 ** max(failures - 1, 0), self.backoff_max_s))


Kind = Literal["done", "failed", "busy", "gone", "idle"]


@dataclass(frozen=True)
class Outcome:
    kind: Kind
    folds: int = 0
    reason: str = ""
    version: int = 0


class Worker:
    """One pool process's store, queue keys and lease keeper."""

    def __init__(self, settings: WorkerSettings, broker: str) -> None:
        self.settings = settings
        self.memory = Memory(settings.database)
        self.queue = WorkQueue(broker, settings.queue)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.keeper = LeaseKeeper(self.owner, settings.lease_ttl_s)

    def run(self, session_id: str, view_name: str, since: float) -> tuple[Outcome, float]:
        """Run one job; its outcome and the time of the first append it covers."""
        since = self.queue.start(session_id, view_name, self.owner, since)
        self._quietly(lambda: self.queue.count("started"))
        try:
            return self._compact(session_id, view_name, since), since
        finally:
            self._quietly(lambda: self.queue.finish(session_id, view_name, self.owner))

    def _compact(self, session_id: str, view_name: str, since: float) -> Outcome:
        store = self.memory.store
        try:
            record = store.get_session(session_id)
            session = Session(self.memory, record.id, get_counter(record.encoding))
            view = session.view(view_name)
            if view.pipeline is None:
                return Outcome("idle")
            version = view.version
        except NotFound:
            return Outcome("gone")
        except Exception as exc:
            return Outcome("failed", reason=f"opening the view: {exc}")
        if not self.keeper.acquire(store, session_id, view_name):
            return Outcome("busy", version=version)
        first: list[bool] = []

        def publish(event: Event) -> None:
            if event.kind == "committed" and not first:
                first.append(True)
                self._quietly(lambda: self.queue.observe(time.time() - since))
            if event.kind in ("committed", "failed"):
                self._quietly(lambda: self.queue.count(event.kind))
            self._quietly(lambda: self.queue.publish(event, worker=self.owner, since=since))

        try:
            report = compact(view, listeners=[publish], limits=self.settings.limits)
        except Exception as exc:
            log.warning("compaction of %s/%s failed", session_id, view_name, exc_info=True)
            return Outcome("failed", reason=f"{type(exc).__name__}: {exc}", version=version)
        finally:
            self.keeper.release(store, session_id, view_name)
        if report.failed:
            return Outcome("failed", len(report.folds), "; ".join(report.reasons), version)
        return Outcome("done", len(report.folds), version=version)

    def settle(self, app: Celery, session: str, view: str, outcome: Outcome, since: float) -> None:
        """After the job: send it again, count the failure, or park the view."""
        queue, settings = self.queue, self.settings
        if outcome.kind == "busy":
            queue.count("busy")
            if queue.mark(session, view, since):
                send(app, session, view, since=since, countdown=settings.retry_s)
            return
        if outcome.kind != "failed":
            queue.succeeded(session, view)
            return
        failures = queue.failed(session, view)
        if failures >= settings.max_failures:
            queue.park(
                session, view, version=outcome.version, failures=failures, reason=outcome.reason
            )
            queue.count("parked")
            self._tell("parked", session, view, outcome.reason, failures=failures)
            return
        pause = settings.backoff(failures)
        queue.count("retried")
        self._tell("retried", session, view, outcome.reason, failures=failures, countdown=pause)
        if queue.mark(session, view, since):
            send(app, session, view, since=since, countdown=pause)

    def _tell(self, kind: Any, session: str, view: str, reason: str, **data: Any) -> None:
        event = Event(kind, session, view, "worker", 0, 0, detail=reason, data=data)
        log.warning(event.describe())
        self.queue.publish(event, worker=self.owner)

    @staticmethod
    def _quietly(call: Callable[[], object]) -> None:
        """Bookkeeping in Redis must not fail a job whose work is in the store."""
        try:
            call()
        except redis.RedisError:
            log.warning("could not record a job's progress in Redis", exc_info=True)


_WORKERS: dict[int, Worker] = {}


def worker_of(settings: WorkerSettings, broker: str) -> Worker:
    """This process's worker, opened on its first job (after the pool's fork)."""
    pid = os.getpid()
    if pid not in _WORKERS:
        _WORKERS.clear()
        _WORKERS[pid] = Worker(settings, broker)
    return _WORKERS[pid]


def register(app: Celery, settings: WorkerSettings) -> Task[Any, Any]:
    """Register the ``compact`` task on ``app``, running jobs with ``settings``."""
    broker = str(app.conf.broker_url)

    @app.task(  # type: ignore[untyped-decorator]
        name=TASK, bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True
    )
    def compact_task(
        task: Task[Any, Any], session: str, view: str, since: float | None = None
    ) -> str:
        worker = worker_of(settings, broker)
        outcome, since = worker.run(session, view, time.time() if since is None else since)
        worker.settle(app, session, view, outcome, since)
        return outcome.kind

    return compact_task
