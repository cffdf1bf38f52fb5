"""The worker's side: the ``compact(session, view)`` task, which holds no logic of its own.

A job takes ids, opens the view from the store, takes the view's lease and
runs the one compaction cycle (``memory.cycle.run_cycle``), as every runner
does. What may go wrong is settled here, once:

- the lease is held by another worker (it is compacting the view, or it died
  and its lease has not expired): the job is sent again later, unless another
  is pending already, after ``retry_s`` doubled at each busy try in a row and at
  most ``lease_ttl_s`` (a dead worker's lease expires by then), so a long job
  or a dead worker costs a few resends, not one a second;
- the cycle failed: the view's failures in a row are counted, the job sent
  again after a pause that doubles each time (``retried``; a job an append
  sends meanwhile waits for the pause to pass as well), and after
  ``max_failures`` the view is parked (``parked``): other views go on. A
  cycle *failed* when any of its jobs failed (a model that let it down, a store
  that refused, a view that cannot be built here), even when the rescue then
  folded extractively and the view fits its budget: the view's own strategies
  did not do their work, and asking the same model again and again spends
  calls for nothing. Only a cycle that committed folds and failed no job ends
  the run of failures; one that found nothing to do leaves it as it is (a
  retry after the rescue often has no work: it proves nothing about the model);
- the worker is killed: nothing was committed unless the cycle's commit went
  through whole (one transaction, checked against the fold-set version), and
  the message, acknowledged late, is delivered again.

Every pause before a resend stays below half the visibility timeout: a
worker holds a waiting job unacknowledged, and one held longer would go to a
second worker too. Redis being away costs a job its bookkeeping (the counts,
events, the resend), never its work: that is in the store, and the enqueuer
plans every view again when Redis is back.

Each pool process opens its own store and lease keeper after the fork, so no
connection or thread crosses a fork: as it starts (a prefork pool's process),
so its first job does not wait half a second for them, else on its first job.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import redis

from contextfold.core.errors import NotFound
from contextfold.core.events import Event, log
from contextfold.llm.budget import DEFAULT_LIMITS, JobLimits
from contextfold.memory.cycle import run_cycle
from contextfold.memory.leases import LeaseKeeper
from contextfold.memory.session import Memory
from contextfold.memory.view import View
from contextfold.workers.app import (
    BROKER_ERRORS,
    TASK,
    VISIBILITY_TIMEOUT_S,
    longest_countdown,
    send,
)
from contextfold.workers.queue import JobRecord, WorkQueue

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
    visibility_timeout_s: float = VISIBILITY_TIMEOUT_S
    limits: JobLimits = field(default=DEFAULT_LIMITS)

    def backoff(self, failures: int) -> float:
        """The pause before a job that failed ``failures`` times in a row is run again."""
        return self._capped(self.backoff_s * 2 ** max(failures - 1, 0), self.backoff_max_s)

    def busy_pause(self, tries: int) -> float:
        """The pause before a job that found the lease held ``tries`` times in a row."""
        return self._capped(self.retry_s * 2 ** max(tries - 1, 0), self.lease_ttl_s)

    def _capped(self, seconds: float, most: float) -> float:
        return float(min(seconds, most, longest_countdown(self.visibility_timeout_s)))


Kind = Literal["done", "failed", "busy", "resting", "parked", "gone", "idle"]


@dataclass(frozen=True)
class Outcome:
    kind: Kind
    folds: int = 0
    reason: str = ""
    version: int = 0
    pause: float = 0.0
    """How long a resting view still rests."""


CACHED_VIEWS = 256
"""Views whose cached state a pool process keeps between jobs; older ones are re-read."""


class Worker:
    """One pool process's store, queue keys and lease keeper.

    A worker serves any number of views in turn; it keeps the cached state of
    the ``CACHED_VIEWS`` it ran last (a view's next job mostly reads only what
    was appended since) and forgets the rest, so its memory stays bounded.
    """

    def __init__(self, settings: WorkerSettings, broker: str) -> None:
        self.settings = settings
        self.memory = Memory(settings.database)
        self._recent: OrderedDict[tuple[str, str], None] = OrderedDict()
        self.queue = WorkQueue(broker, settings.queue, stale_s=settings.visibility_timeout_s)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.keeper = LeaseKeeper(self.owner, settings.lease_ttl_s)

    def run(self, session_id: str, view_name: str, since: float) -> tuple[Outcome, float]:
        """Run one job; its outcome and the time of the first append it covers."""
        queue = self.queue
        started = self._quietly(lambda: queue.start(session_id, view_name, self.owner, since))
        since = started if isinstance(started, float) else since
        self._quietly(lambda: queue.count("started"))
        try:
            return self._compact(session_id, view_name, since), since
        finally:
            self._quietly(lambda: queue.finish(session_id, view_name, self.owner))

    def _compact(self, session_id: str, view_name: str, since: float) -> Outcome:
        try:
            view = self.memory.existing_session(session_id).view(view_name)
            self._remember(session_id, view_name)
            if view.pipeline is None:
                return Outcome("idle")
            version = view.version
        except NotFound:
            return Outcome("gone")
        except Exception as exc:
            return Outcome("failed", reason=f"opening the view: {exc}")
        if self._quietly(lambda: self.queue.parked_at(session_id, view_name)) is not None:
            return Outcome("parked", version=version)  # sent before it was parked
        resting = self._quietly(lambda: self.queue.resting(session_id, view_name))
        if isinstance(resting, float) and resting > 0:
            return Outcome("resting", version=version, pause=resting)
        if not self.keeper.acquire(view):
            return Outcome("busy", version=version)
        leased = time.time()
        outcome = Outcome("failed", reason="the job was interrupted", version=version)
        try:
            outcome = self._cycle(view, since, version)
        finally:
            ended = time.time()
            self.keeper.release(view)
            job = JobRecord(
                session_id, view_name, self.owner, leased, ended, outcome.kind, outcome.folds
            )
            self._quietly(lambda: self.queue.record(job))
        return outcome

    def _remember(self, session_id: str, view_name: str) -> None:
        self._recent[(session_id, view_name)] = None
        self._recent.move_to_end((session_id, view_name))
        while len(self._recent) > CACHED_VIEWS:
            old, _ = self._recent.popitem(last=False)
            self.memory.forget(*old)

    def _cycle(self, view: View, since: float, version: int) -> Outcome:
        first: list[bool] = []

        def publish(event: Event) -> None:
            if event.kind == "committed" and not first:
                first.append(True)
                self._quietly(lambda: self.queue.observe(time.time() - since))
            if event.kind in ("committed", "failed"):
                self._quietly(lambda: self.queue.count(event.kind))
            self._quietly(lambda: self.queue.publish(event, worker=self.owner, since=since))

        try:
            report = run_cycle(view, listeners=[publish], limits=self.settings.limits)
        except Exception as exc:
            log.warning("compaction of %s/%s failed", view.session.id, view.name, exc_info=True)
            return Outcome("failed", reason=f"{type(exc).__name__}: {exc}", version=version)
        if report.failed:
            return Outcome("failed", len(report.folds), "; ".join(report.reasons), version)
        return Outcome("done" if report.folds else "idle", len(report.folds), version=version)

    def settle(
        self, app: Celery, session: str, view: str, outcome: Outcome, since: float, busy: int
    ) -> None:
        """After the job: send it again, count the failure, or park the view.

        With Redis away this is given up (logged): the work is in the store, and
        the enqueuer plans the view again when Redis is back.
        """
        try:
            self._settle(app, session, view, outcome, since, busy)
        except BROKER_ERRORS:
            log.warning("could not settle the job of %s/%s", session, view, exc_info=True)

    def _settle(
        self, app: Celery, session: str, view: str, outcome: Outcome, since: float, busy: int
    ) -> None:
        queue, settings = self.queue, self.settings
        if outcome.kind == "resting":
            if queue.mark(session, view, since):
                send(app, session, view, since=since, countdown=outcome.pause)
            return
        if outcome.kind == "busy":
            queue.count("busy")
            if queue.mark(session, view, since):
                pause = settings.busy_pause(busy + 1)
                send(app, session, view, since=since, countdown=pause, busy=busy + 1)
            return
        if outcome.kind == "done":
            queue.succeeded(session, view)
        if outcome.kind != "failed":
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
        queue.rest(session, view, pause)
        queue.count("retried")
        self._tell("retried", session, view, outcome.reason, failures=failures, countdown=pause)
        if queue.mark(session, view, since):
            send(app, session, view, since=since, countdown=pause)

    def _tell(self, kind: Any, session: str, view: str, reason: str, **data: Any) -> None:
        event = Event(kind, session, view, "worker", 0, 0, detail=reason, data=data)
        log.warning(event.describe())
        self.queue.publish(event, worker=self.owner)

    @staticmethod
    def _quietly(call: Callable[[], object]) -> object:
        """Bookkeeping in Redis must not fail a job whose work is in the store: None when
        Redis is away (a job that could not ask whether it may run runs)."""
        try:
            return call()
        except redis.RedisError:
            log.warning("could not keep a job's books in Redis", exc_info=True)
            return None


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
    from celery.signals import worker_process_init

    broker = str(app.conf.broker_url)

    def open_worker(**_: Any) -> None:
        try:
            worker_of(settings, broker)
        except Exception:  # the first job opens it, or says why it cannot
            log.warning("could not open the store as a pool process started", exc_info=True)

    worker_process_init.connect(open_worker, weak=False)

    @app.task(  # type: ignore[untyped-decorator]
        name=TASK, bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True
    )
    def compact_task(
        task: Task[Any, Any], session: str, view: str, since: float | None = None, busy: int = 0
    ) -> str:
        worker = worker_of(settings, broker)
        outcome, since = worker.run(session, view, time.time() if since is None else since)
        worker.settle(app, session, view, outcome, since, busy)
        return outcome.kind

    return compact_task
