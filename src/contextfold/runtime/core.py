"""What every runner shares: watched views, flights, leases, and the call of the one cycle.

A runner watches views by ``(session, view)``. It listens on the store's wake
port (``contextfold.store.wake``) for each watched session, so an append
through any handle, in this process or another sharing the store, wakes it.
One compaction of a view at a time:

- in one process, the runner's *flight* for the key is the gate: an append
  while a flight is up only marks it dirty, so the flight looks once more
  before it ends (appends coalesce, nothing is queued twice);
- across runners and processes, the store's lease is the gate, taken only when
  there is a job to run and held until its cycle ends; a lease a dead process
  held expires after ``lease_ttl_s``.

Model work is bounded: each job within ``limits`` (``JobLimits``: model calls
and a deadline), a view whose job failed left alone for a ``cooldown`` that
doubles with each failure in a row, and a job the runner gives up on
(``stop``) cancelled: its model calls end and none starts after ``stop``.

A flight first plans on the view's cached state, which appends extend
cheaply: most appends plan nothing and cost the runner almost nothing. Only
when a job is planned does it take the lease and run ``memory.cycle.run_cycle``,
the cycle ``View.compact`` runs too. Commits carry the fold-set version the job
was planned at, so a commit that lost a race (or comes after ``stop`` gave up
on it) is refused.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from contextfold.core.events import Event, EventCallback, log
from contextfold.llm.budget import DEFAULT_LIMITS, JobBudget, JobLimits
from contextfold.memory.cycle import RunJob, plan, run_cycle, run_here
from contextfold.memory.leases import LeaseKeeper
from contextfold.memory.view import View
from contextfold.runtime.cooldown import DEFAULT_COOLDOWN, Cooldown, Cooldowns
from contextfold.strategies.base import Job

Key = tuple[str, str]


def key_of(view: View) -> Key:
    return (view.session.id, view.name)


@dataclass(eq=False)
class Flight:
    """One cycle of one view: the in-process half of single-flight."""

    view: View
    dirty: bool = False
    held: bool = False
    job: Job | None = None
    budget: JobBudget | None = None


class Runner(ABC):
    """The core of ``InlineRunner``, ``ThreadRunner`` and ``AsyncioRunner``.

    ``owner`` names this runner's leases (host, pid and a random part by
    default); ``on_event`` callbacks see the events of every watched view;
    ``limits`` bound each job, ``cooldown`` paces a view whose job failed.
    """

    def __init__(
        self,
        *,
        owner: str | None = None,
        lease_ttl_s: float = 60.0,
        on_event: Iterable[EventCallback] = (),
        limits: JobLimits = DEFAULT_LIMITS,
        cooldown: Cooldown = DEFAULT_COOLDOWN,
    ) -> None:
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.on_event: list[EventCallback] = list(on_event)
        self.limits = limits
        self.cooldowns = Cooldowns(cooldown)
        self.lease_refusals = 0
        self._keeper = LeaseKeeper(self.owner, lease_ttl_s)
        self._lock = threading.Lock()
        self._views: dict[Key, View] = {}
        self._unlisten: dict[str, Callable[[], None]] = {}
        self._flights: dict[Key, Flight] = {}
        self._closing = False
        self._abandoning = False

    # -- watching ---------------------------------------------------------

    def watch(self, view: View) -> None:
        """Compact ``view`` from now on, after each append to its session, and plan it now."""
        view.require_pipeline()
        if self._closing:
            raise RuntimeError("this runner is stopped; start a new one")
        sid = view.session.id
        with self._lock:
            self._views[key_of(view)] = view
            listening = sid in self._unlisten
        if not listening:
            stop = view.session.wake.listen(sid, self._on_wake)
            with self._lock:
                self._unlisten[sid] = stop
        self.notify(view)

    def unwatch(self, view: View) -> None:
        """Stop compacting ``view``; a cycle already running finishes."""
        sid = view.session.id
        with self._lock:
            self._views.pop(key_of(view), None)
            still = any(key[0] == sid for key in self._views)
            stop = None if still else self._unlisten.pop(sid, None)
        if stop is not None:
            stop()

    def watched(self) -> list[View]:
        with self._lock:
            return list(self._views.values())

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

    def _on_wake(self, session_id: str) -> None:
        with self._lock:
            views = [v for key, v in self._views.items() if key[0] == session_id]
        for view in views:
            self.notify(view)

    # -- hooks for the runners --------------------------------------------

    @abstractmethod
    def _schedule(self, view: View) -> None:
        """Start a flight for ``view`` (inline, on a worker, as a task)."""

    @abstractmethod
    def _retry_later(self, view: View) -> None:
        """Another owner holds the view's lease: try again later, or leave it to the next append."""

    def _run_job(self) -> RunJob:
        """Where jobs' expensive part runs; ``ProcessRunner`` moves it off this process."""
        return run_here

    def _dispatch(self, event: Event) -> None:
        for callback in list(self.on_event):
            try:
                callback(event)
            except Exception:
                log.exception("event callback failed on %s", event.kind)

    # -- one flight -------------------------------------------------------

    def _drive(self, view: View) -> None:
        """Run one flight in this thread: plan cheaply, and cycle while there is work."""
        key = key_of(view)
        with self._lock:
            if self._closing or key in self._flights:
                if key in self._flights:
                    self._flights[key].dirty = True
                return
            flight = self._flights[key] = Flight(view)
        try:
            while True:
                with self._lock:
                    flight.dirty = False
                if self._may_plan() and not self._cycle(flight):
                    return
                if self._finish(flight):
                    return
        except Exception:
            log.exception("compaction of %s/%s stopped", *key)
            self._end(flight)

    def _cycle(self, flight: Flight) -> bool:
        """Compact the flight's view if a job is planned; False when its lease is held elsewhere.

        A view cooling down after a failed job (its configuration unchanged) is left alone.
        """
        view = flight.view
        if self.cooldowns.cooling(key_of(view), lambda: view.version):
            return True
        pipeline = view.pipeline
        planned = plan(pipeline.strategies if pipeline else (), view.state())
        if planned is None:
            return True
        if not flight.held:
            flight.held = self._keeper.acquire(view)
            if not flight.held:
                with self._lock:
                    self.lease_refusals += 1
                self._end(flight)
                self._retry_later(view)
                return False
        flight.job = planned[1]
        try:
            report = run_cycle(
                view,
                run=self._run_job(),
                may_plan=self._may_plan,
                may_commit=self._may_commit,
                listeners=[self._dispatch],
                limits=self.limits,
                on_budget=lambda budget: self._track(flight, budget),
            )
        finally:
            flight.job = None
            flight.budget = None
        if report.failed:
            self.cooldowns.failed(key_of(view), view.version)
        else:
            self.cooldowns.succeeded(key_of(view))
        return True

    def _track(self, flight: Flight, budget: JobBudget) -> None:
        """The flight's job runs within ``budget``; one given up on is cancelled at once."""
        with self._lock:
            flight.budget = budget
            if self._abandoning:
                budget.cancel()

    def _finish(self, flight: Flight) -> bool:
        """End the flight and give its lease up; True when it is over.

        An append that comes while the lease is being released finds the flight
        still up and only marks it dirty, so it looks once more: if one came,
        the flight goes on (False) and takes the lease again when it has a job.
        """
        with self._lock:
            if flight.dirty and self._may_plan():
                return False
        if flight.held:
            self._keeper.release(flight.view)
            flight.held = False
        with self._lock:
            if flight.dirty and self._may_plan():
                return False
            if self._flights.get(key_of(flight.view)) is flight:
                del self._flights[key_of(flight.view)]
            return True

    def _may_plan(self) -> bool:
        return not self._closing

    def _may_commit(self) -> bool:
        return not self._abandoning

    def _end(self, flight: Flight) -> None:
        """Drop a flight that will not finish normally, and its lease."""
        key = key_of(flight.view)
        with self._lock:
            if self._flights.get(key) is flight:
                del self._flights[key]
        if flight.held:
            self._keeper.release(flight.view)
            flight.held = False

    # -- stopping ---------------------------------------------------------

    def _close(self, *, drain: bool) -> None:
        """No new cycles from now; without ``drain`` no running job may commit either."""
        with self._lock:
            self._closing = True
            if not drain:
                self._abandoning = True
                self._cancel_jobs()

    def _abandon(self) -> None:
        """Give up on the cycles still running: they will not commit, their leases go now."""
        with self._lock:
            self._abandoning = True
            self._cancel_jobs()
            flights = list(self._flights.values())
            self._flights.clear()
        for flight in flights:
            self._keeper.release(flight.view)

    def _cancel_jobs(self) -> None:
        """Cancel the jobs running now (the lock is held): no model call of theirs starts again."""
        for flight in self._flights.values():
            if flight.budget is not None:
                flight.budget.cancel()

    def _shut(self) -> None:
        self._keeper.stop()
        for view in self.watched():
            self.unwatch(view)
