"""``CeleryRunner``: a runner that plans here and sends the jobs to Celery workers.

It watches views as every runner does (``watch``, ``unwatch``, ``notify``,
``stop``), and like ``ThreadRunner`` plans a woken view on its thread after
``settle_s``, from the view's cached state: most appends plan nothing and send
nothing. When a job is planned it marks the view pending in Redis and sends one
``compact(session, view)`` message; while that mark stands (until a worker
starts the job) further appends send nothing. Workers re-plan from the store,
take the view's lease and run the one cycle.

What a worker does comes back on the queue's event channel and reaches this
runner's and the views' ``on_event`` callbacks, as a local cycle's events do.

When Redis cannot be reached, appends and renders go on: the view is tried
again every ``retry_s``, and when the event channel comes back every watched
view is planned again, so jobs lost with a restarted broker are sent again.
A parked view (too many failures in a row) is not sent again until its
configuration changes or ``enqueue(view, force=True)`` (compact now) asks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from contextfold.core.errors import InvalidInput
from contextfold.core.events import EventCallback, emit, log
from contextfold.memory.cycle import plan
from contextfold.memory.view import View
from contextfold.runtime.core import Flight, Key, key_of
from contextfold.runtime.thread import SETTLE_S, ThreadRunner
from contextfold.workers.app import (
    BROKER_ERRORS,
    DEFAULT_QUEUE,
    VISIBILITY_TIMEOUT_S,
    celery_app,
    send,
)
from contextfold.workers.queue import JobState, WorkQueue

_RECONNECT_S = 1.0


def check_portable(view: View) -> None:
    """A worker rebuilds the view from its stored record: refuse what only lives here."""
    if view.config.local:
        raise InvalidInput(
            "a local view's pipeline holds Python code no worker can rebuild", field="local"
        )
    if view.binding.configuration.llm is not None:
        raise InvalidInput(
            "a model object cannot reach a worker: store the model as a get_model string",
            field="llm",
        )
    if view.binding.configuration.filter is not None:
        raise InvalidInput(
            "a Python filter cannot reach a worker: store a declarative filter", field="filter"
        )


class CeleryRunner(ThreadRunner):
    """Compacts watched views on Celery workers reached through ``broker`` (``redis://``)."""

    def __init__(
        self,
        broker: str,
        *,
        queue: str = DEFAULT_QUEUE,
        settle_s: float = SETTLE_S,
        retry_s: float = 1.0,
        visibility_timeout_s: float = VISIBILITY_TIMEOUT_S,
        on_event: Iterable[EventCallback] = (),
    ) -> None:
        self.app = celery_app(broker, queue, visibility_timeout_s=visibility_timeout_s)
        self.queue = WorkQueue(broker, queue, stale_s=visibility_timeout_s)
        self.sent = 0
        self.send_errors = 0
        self._since: dict[Key, float] = {}
        self._listening = threading.Event()
        self._stop_listening = threading.Event()
        super().__init__(1, settle_s=settle_s, retry_s=retry_s, on_event=on_event)
        self._listener = threading.Thread(
            target=self._listen, name="contextfold-celery-events", daemon=True
        )
        self._listener.start()

    def watch(self, view: View) -> None:
        check_portable(view)
        super().watch(view)

    def notify(self, view: View) -> None:
        with self._lock:
            self._since.setdefault(key_of(view), time.time())
        super().notify(view)

    def _cycle(self, flight: Flight) -> bool:
        """Plan here; send the job to the workers when one is planned."""
        view = flight.view
        pipeline = view.pipeline
        if pipeline is not None and plan(pipeline.strategies, view.state()) is not None:
            self.enqueue(view)
        else:
            with self._lock:  # those appends needed no job: the latency starts later
                self._since.pop(key_of(view), None)
        return True

    def enqueue(self, view: View, *, force: bool = False) -> bool:
        """Send the view's job unless one is pending; True when sent.

        A parked view is sent only with ``force`` (which unparks it) or once
        its configuration changed. When Redis is away the view is tried again
        ``retry_s`` later.
        """
        session, name = key_of(view)
        with self._lock:
            since = self._since.pop((session, name), None) or time.time()
        try:
            parked = self.queue.parked_at(session, name)
            if parked is not None:
                if not force and parked == view.version:
                    return False
                self.queue.unpark(session, name)
            if not self.queue.mark(session, name, since):
                return False
            try:
                send(self.app, session, name, since=since)
            except BaseException:
                self.queue.unmark(session, name)
                raise
            self.queue.count("enqueued")
        except BROKER_ERRORS as exc:
            with self._lock:
                self.send_errors += 1
                self._since.setdefault((session, name), since)
            log.warning("could not queue a job for %s/%s: %s", session, name, exc)
            self._retry_later(view)
            return False
        with self._lock:
            self.sent += 1
        return True

    def job(self, view: View) -> JobState | None:
        """The view's background job (running, pending, parked, failing), or None when idle."""
        session, name = key_of(view)
        return self.queue.state(session, name)

    def listening(self, timeout: float | None = None) -> bool:
        """Wait until the runner hears the workers' events (tests, start-up)."""
        return self._listening.wait(timeout)

    def _listen(self) -> None:
        """Hand the workers' events to the callbacks; after an outage, plan every view again.

        Every subscription after the first (ours after an error, or redis-py's own
        quiet reconnection) means Redis was away, maybe restarted empty: jobs sent
        before may be lost, so every watched view is planned again.
        """
        subscriptions = 0

        def subscribed() -> None:
            nonlocal subscriptions
            subscriptions += 1
            self._listening.set()
            if subscriptions > 1:
                log.info("the workers' event channel is back: planning every view again")
                for view in self.watched():
                    self.notify(view)

        while not self._stop_listening.is_set():
            try:
                for event in self.queue.events(self._stop_listening, subscribed):
                    with self._lock:
                        watched = self._views.get((event.session, event.view))
                    emit(event, [*self.on_event, *(watched.on_event if watched else ())])
            except BROKER_ERRORS as exc:
                if self._listening.is_set():
                    log.warning("lost the workers' event channel: %s", exc)
                self._listening.clear()
                self._stop_listening.wait(_RECONNECT_S)

    def stop(self, timeout: float = 5.0, *, drain: bool = True) -> bool:
        """Stop planning and listening; jobs already sent stay with the workers."""
        done = super().stop(timeout, drain=drain)
        self._stop_listening.set()
        self._listener.join(timeout)
        self.queue.close()
        return done

    def __enter__(self) -> CeleryRunner:
        return self
