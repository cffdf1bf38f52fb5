"""What every runner shares: watched views, flights, leases and the cycle.

A runner watches views. Each append to a watched view's session notifies it;
the runner then plans the view and runs the job it plans, off the hot path
except in ``InlineRunner``. One compaction of a (session, view) at a time:

- in one process, the runner's *flight* for the key is the gate: an append
  while a flight is up only marks it dirty, so the flight plans once more
  before it ends (appends coalesce, nothing is queued twice);
- across runners and processes, the store's lease is the gate: a flight holds
  the view's lease from its first plan to its last commit, and a lease a dead
  process held expires after ``lease_ttl_s``.

A cycle plans, runs and commits until the pipeline plans nothing and no append
came meanwhile. Commits carry the fold-set version the job was planned at, so
a commit that lost a race (or comes late, after ``stop`` gave up on it) is
refused and the cycle plans again from what is committed. The cycle is written
once, as a generator of steps, so the sync and async runners cannot drift apart.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.events import Event, EventCallback, log
from contextfold.core.folds import Fold
from contextfold.core.log import LoggedMessage
from contextfold.memory.session import Session
from contextfold.memory.view import MAX_COMPACTION_STEPS, View
from contextfold.runtime.leases import LeaseKeeper
from contextfold.strategies.base import Job

Key = tuple[str, str]
Step = Callable[[], Any]
Cycle = Generator[Step, Any, None]


def key_of(view: View) -> Key:
    return (view.session.id, view.name)


@dataclass(eq=False)
class Flight:
    """One cycle of one view: the in-process half of single-flight."""

    view: View
    dirty: bool = False
    job: Job | None = None
    steps: int = 0
    failed: list[str] = field(default_factory=list)


class Runner(ABC):
    """The core of ``InlineRunner``, ``ThreadRunner`` and ``AsyncioRunner``.

    ``owner`` names this runner's leases (host, pid and a random part by
    default); ``on_event`` callbacks see the events of every watched view.
    """

    def __init__(
        self,
        *,
        owner: str | None = None,
        lease_ttl_s: float = 60.0,
        on_event: Iterable[EventCallback] = (),
    ) -> None:
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.on_event: list[EventCallback] = list(on_event)
        self.lease_refusals = 0
        self._keeper = LeaseKeeper(self.owner, lease_ttl_s)
        self._lock = threading.Lock()
        self._views: dict[str, dict[str, View]] = {}  # session id -> view name -> view
        self._flights: dict[Key, Flight] = {}
        self._closing = False
        self._abandoning = False

    # -- watching ---------------------------------------------------------

    def watch(self, view: View) -> None:
        """Compact ``view`` from now on, after each append to its session, and plan it now."""
        if view.pipeline is None:
            raise InvalidInput(
                f"view {view.name!r} has no pipeline: pass preset= or pipeline=", field="pipeline"
            )
        if self._closing:
            raise RuntimeError("this runner is stopped; start a new one")
        with self._lock:
            self._views.setdefault(view.session.id, {})[view.name] = view
        if self._on_append not in view.session.on_append:
            view.session.on_append.append(self._on_append)
        if self._dispatch not in view.on_event:
            view.on_event.append(self._dispatch)
        self.notify(view)

    def unwatch(self, view: View) -> None:
        """Stop compacting ``view``; a cycle already running finishes."""
        with self._lock:
            views = self._views.get(view.session.id, {})
            if views.get(view.name) is view:
                del views[view.name]
            still = any(v.session is view.session for v in views.values())
            if not views:
                self._views.pop(view.session.id, None)
        if not still and self._on_append in view.session.on_append:
            view.session.on_append.remove(self._on_append)
        if self._dispatch in view.on_event:
            view.on_event.remove(self._dispatch)

    def watched(self) -> list[View]:
        with self._lock:
            return [v for views in self._views.values() for v in views.values()]

    def notify(self, view: View) -> None:
        """The view's log grew: plan it now, or once more when its running cycle ends."""
        with self._lock:
            if self._closing:
                return
            flight = self._flights.get(key_of(view))
            if flight is not None:
                flight.dirty = True
                return
        self._schedule(view)

    def running(self, view: View) -> Job | None:
        """The job running for ``view`` now; renders meanwhile serve the folds committed before."""
        with self._lock:
            flight = self._flights.get(key_of(view))
            return None if flight is None else flight.job

    def busy(self) -> bool:
        """True while any cycle is up."""
        with self._lock:
            return bool(self._flights)

    # -- hooks for the runners --------------------------------------------

    @abstractmethod
    def _schedule(self, view: View) -> None:
        """Start a cycle for ``view`` (inline, on a worker, as a task)."""

    @abstractmethod
    def _retry_later(self, view: View) -> None:
        """Another owner holds the view's lease: try again later, or leave it to the next append."""

    def _on_append(self, session: Session, logged: list[LoggedMessage]) -> None:
        with self._lock:
            views = list(self._views.get(session.id, {}).values())
        for view in views:
            if view.session is session:
                self.notify(view)

    def _dispatch(self, event: Event) -> None:
        for callback in list(self.on_event):
            try:
                callback(event)
            except Exception:
                log.exception("event callback failed on %s", event.kind)

    # -- the cycle --------------------------------------------------------

    def _cycle(self, view: View) -> Cycle:
        """One cycle as steps: each ``yield`` hands a blocking call to the driver."""
        flight: Flight | None = yield partial(self._begin, view)
        if flight is None:
            return
        try:
            while True:
                job: Job | None = yield partial(self._next_job, flight)
                if job is None:
                    over: bool = yield partial(self._finish, flight)
                    if over:
                        return
                    continue
                began = time.perf_counter()
                folds: list[Fold] | None = yield partial(self._run, flight, job)
                if folds is None:
                    flight.failed.append(job.strategy)
                elif not self._abandoning:
                    duration = time.perf_counter() - began
                    yield partial(self._commit, flight, job, folds, duration)
                flight.job = None
        except BaseException:
            self._end(flight)
            raise

    def _drive(self, view: View) -> None:
        """Run one cycle in this thread; a step's error goes back into the cycle to end it."""
        cycle = self._cycle(view)
        try:
            step = next(cycle)
            while True:
                try:
                    result = step()
                except Exception as exc:
                    step = cycle.throw(exc)
                    continue
                step = cycle.send(result)
        except StopIteration:
            pass
        except Exception:
            log.exception("compaction of %s/%s stopped", view.session.id, view.name)

    def _begin(self, view: View) -> Flight | None:
        key = key_of(view)
        with self._lock:
            if self._closing:
                return None
            if key in self._flights:
                self._flights[key].dirty = True
                return None
            flight = Flight(view)
            self._flights[key] = flight
        try:
            held = self._keeper.acquire(view.session.store, *key)
        except BaseException:
            self._drop(flight)
            raise
        if held:
            return flight
        self._drop(flight, refused=True)
        self._retry_later(view)
        return None

    def _next_job(self, flight: Flight) -> Job | None:
        """Plan until a job comes, or nothing is left and no append came meanwhile."""
        view = flight.view
        assert view.pipeline is not None
        while flight.steps < MAX_COMPACTION_STEPS:
            with self._lock:
                if self._closing:
                    return None
                flight.dirty = False
            job = view.pipeline.plan(view.state(), skip=flight.failed)
            if job is not None:
                flight.steps += 1
                flight.job = job
                view.emit("planned", job)
                return job
            with self._lock:
                if not flight.dirty:
                    return None
        log.warning(
            "%s/%s: %d jobs in one cycle; the rest waits for the next append",
            view.session.id,
            view.name,
            flight.steps,
        )
        return None

    def _run(self, flight: Flight, job: Job) -> list[Fold] | None:
        """The expensive step; any error drops the job and leaves the folds as they were."""
        try:
            return flight.view.run_job(job)
        except Exception as exc:
            flight.view.emit("failed", job, detail=f"{type(exc).__name__}: {exc}")
            flight.view.emit("degraded", job, detail="the view keeps its previous folds")
            return None

    def _commit(self, flight: Flight, job: Job, folds: list[Fold], duration: float) -> None:
        try:
            flight.view.commit(job, folds, duration_s=duration)
        except Exception as exc:
            flight.failed.append(job.strategy)
            flight.view.emit("failed", job, duration_s=duration, detail=f"commit: {exc}")
            flight.view.emit("degraded", job, detail="the view keeps its previous folds")

    def _finish(self, flight: Flight) -> bool:
        """End the flight and give its lease up; True when it is over.

        Appends that come while the lease is being released would find the
        flight still up and only mark it dirty, so it looks once more: if one
        came, the lease is taken again and the cycle goes on (False).
        """
        key = key_of(flight.view)
        with self._lock:
            if flight.dirty and self._may_go_on(flight):
                return False
        self._keeper.release(flight.view.session.store, *key)
        with self._lock:
            if not (flight.dirty and self._may_go_on(flight)):
                if self._flights.get(key) is flight:
                    del self._flights[key]
                return True
        if self._keeper.acquire(flight.view.session.store, *key):
            return False
        self._drop(flight, refused=True)
        self._retry_later(flight.view)
        return True

    def _may_go_on(self, flight: Flight) -> bool:
        return not self._closing and flight.steps < MAX_COMPACTION_STEPS

    def _drop(self, flight: Flight, *, refused: bool = False) -> None:
        with self._lock:
            key = key_of(flight.view)
            if self._flights.get(key) is flight:
                del self._flights[key]
            self.lease_refusals += refused

    def _end(self, flight: Flight) -> None:
        """Drop a flight that will not finish normally, and its lease."""
        self._drop(flight)
        self._keeper.release(flight.view.session.store, *key_of(flight.view))

    # -- stopping ---------------------------------------------------------

    def _close(self, *, drain: bool) -> None:
        """No new cycles from now; without ``drain`` no running job may commit either."""
        with self._lock:
            self._closing = True
            if not drain:
                self._abandoning = True

    def _abandon(self) -> None:
        """Give up on the cycles still running: they will not commit, their leases go now."""
        with self._lock:
            self._abandoning = True
            flights = list(self._flights.values())
        for flight in flights:
            self._end(flight)

    def _shut(self) -> None:
        self._keeper.stop()
        for view in self.watched():
            self.unwatch(view)
