"""The service: one ``Memory`` over the store, the background runner, the event hub.

Handlers reach it through ``ServiceDep``. Tenancy lives here: API session ``S``
of tenant ``T`` is the store session ``T/S``, and every lookup goes through
``store_id``, so a handler cannot name another tenant's session.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from contextfold.core.errors import InvalidInput, NotFound
from contextfold.core.events import Event, log
from contextfold.memory.session import Memory, Session, StoreSpec
from contextfold.memory.view import View
from contextfold.runtime.process import ProcessRunner
from contextfold.runtime.thread import ThreadRunner
from contextfold.server.errors import ServiceError
from contextfold.server.events import EventHub
from contextfold.server.ids import store_id
from contextfold.server.keys import KeyCache
from contextfold.server.metrics import ServiceMetrics
from contextfold.server.models import JobOut
from contextfold.server.settings import Settings

if TYPE_CHECKING:
    from contextfold.server.jobs import QueueCollector
    from contextfold.workers.runner import CeleryRunner

STREAMED = frozenset(
    {
        "planned",
        "committed",
        "failed",
        "degraded",
        "quarantined",
        "retried",
        "parked",
        "provisional",
        "replaced",
    }
)
_HANDLES = 4096
RELAYED_DETAIL = 2000
T = TypeVar("T")


def event_data(event: Event) -> dict[str, Any]:
    """A library event as the stream sends it (the session as the tenant sees it)."""
    data = event.to_data()
    data["session"] = event.session.partition("/")[2]
    return data


class Service:
    """What every handler shares; ``start``/``stop`` run with the app's lifespan."""

    def __init__(self, settings: Settings, store: StoreSpec = None) -> None:
        self.settings = settings
        self.memory = Memory(store if store is not None else settings.database)
        self.memory.poll_appends_every(settings.wake_poll_s)
        self.hub = EventHub(feed=self._feed, relay=self._relay)
        self.metrics = ServiceMetrics()
        self.keys = KeyCache(settings.key_cache_s)
        self._watched: set[tuple[str, str]] = set()
        self.runner: ThreadRunner | None = None
        self._stopping: ThreadRunner | None = None
        """The runner a ``stop`` in progress drains, for ``hurry``."""
        self.workers: CeleryRunner | None = None
        """The runner again when it sends jobs to Celery workers (``settings.workers``)."""
        self._collector: QueueCollector | None = None
        self._lock = threading.Lock()
        self._handles: OrderedDict[str, Session] = OrderedDict()
        in_process = self.memory.in_process
        self.offload = settings.offload if settings.offload is not None else not in_process

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        """Run a handler's store and library work: here on the loop when the store answers
        from this process (SQLite, RAM: no wait worth a thread hop), on a worker thread
        when it waits on a network (PostgreSQL), so other requests go on meanwhile."""
        if self.offload:
            return await run_in_threadpool(work, *args)
        return work(*args)

    # -- lifecycle --------------------------------------------------------

    def start(self) -> None:
        settings = self.settings
        if self.runner is None and settings.workers is not None:
            from contextfold.server.jobs import QueueCollector, start_workers

            self.runner = self.workers = start_workers(settings)
            self._collector = QueueCollector(self.workers.queue)
            self.metrics.registry.register(self._collector)
        elif self.runner is None and settings.runner:
            self.runner = (
                ProcessRunner(
                    settings.runner_workers,
                    processes=settings.runner_processes,
                    settle_s=settings.settle_s,
                )
                if settings.runner_processes
                else ThreadRunner(settings.runner_workers, settle_s=settings.settle_s)
            )

    def stop(self, *, drain: bool = True) -> None:
        """Stop the runner: with ``drain``, running jobs get a few seconds to commit;
        the rest are abandoned (never committed) and its worker processes end."""
        runner, self.runner, self.workers = self.runner, None, None
        collector, self._collector = self._collector, None
        if collector is not None:
            self.metrics.registry.unregister(collector)
        with self._lock:
            self._watched.clear()
        if runner is not None:
            self._stopping = runner
            try:
                runner.stop(drain=drain)
            finally:
                self._stopping = None

    def hurry(self) -> None:
        """Cut a draining ``stop`` short (a second signal); only sets flags, so a signal
        handler may call it while ``stop`` runs in the same thread."""
        runner = self._stopping
        if runner is not None:
            runner.hurry()

    def close(self, *, drain: bool = True) -> None:
        self.stop(drain=drain)
        self.memory.close()

    # -- tenancy ----------------------------------------------------------

    @staticmethod
    def store_id(tenant: str, session_id: str) -> str:
        """The store's id of the tenant's API session ``session_id``."""
        return store_id(tenant, session_id)

    def session(self, tenant: str, session_id: str) -> Session:
        """The tenant's session, or ``NotFound`` (another tenant's session is not found either)."""
        try:
            return self._handle(self.store_id(tenant, session_id))
        except NotFound:
            raise NotFound(f"no session {session_id!r}") from None

    def _handle(self, sid: str) -> Session:
        """The session ``sid`` (a store id), from this process's recent handles when there."""
        with self._lock:
            handle = self._handles.get(sid)
            if handle is not None:
                self._handles.move_to_end(sid)
        if handle is not None:
            return handle
        handle = self.memory.existing_session(sid)
        with self._lock:
            handle = self._handles.setdefault(sid, handle)
            while len(self._handles) > _HANDLES:
                self._handles.popitem(last=False)
        return handle

    def create(
        self,
        tenant: str,
        session_id: str,
        *,
        system: str | None = None,
        meta: dict[str, Any] | None = None,
        encoding: str | None = None,
    ) -> Session:
        """A new session of the tenant; ``ServiceError`` 409 when the id is taken."""
        sid = self.store_id(tenant, session_id)
        try:
            self.memory.existing_session(sid)
        except NotFound:
            pass
        else:
            raise ServiceError(
                409, "conflict", f"session {session_id!r} exists already", field="id"
            )
        session = self.memory.session(sid, system=system, meta=meta, encoding=encoding)
        with self._lock:
            self._handles[sid] = session
        return session

    def delete(self, tenant: str, session_id: str) -> None:
        """Delete the tenant's session and all that this process keeps for it."""
        sid = self.store_id(tenant, session_id)
        if self.runner is not None:
            for view in self.runner.watched():
                if view.session.id == sid:
                    self.runner.unwatch(view)
        with self._lock:
            self._handles.pop(sid, None)
            self._watched = {k for k in self._watched if k[0] != sid}
        if not self.memory.delete_session(sid):
            raise NotFound(f"no session {session_id!r}")

    def in_batch(
        self, session: Session, exc: InvalidInput, parent: int | None = None
    ) -> InvalidInput:
        """The error with ``index`` counted in the request's batch, not in the log.

        The library counts from the start of the branch; nothing was stored, so
        the branch's length up to where the batch goes is where it would have started.
        """
        if exc.index is None:
            return exc
        offset = session.last_seq() if parent is None else len(session.messages(branch=parent))
        index = exc.index - offset if exc.index >= offset else exc.index
        return InvalidInput(exc.reason, index=index, field=exc.field)

    # -- views and events ---------------------------------------------------

    def view(self, session: Session, name: str) -> View:
        """A handle on the session's view whose events reach the session's streams."""
        view = session.view(name)
        with self._lock:
            if self._on_event not in view.on_event:
                view.on_event.append(self._on_event)
        return view

    def watch(self, session: Session, view_name: str) -> View:
        """The view, compacted in the background from now on (if it has a pipeline).

        A view is handed to the runner once; the runner re-reads its stored
        configuration on every cycle, so later updates need no new watch.
        """
        view = self.view(session, view_name)
        key = (session.id, view_name)
        runner = self.runner
        with self._lock:
            if runner is None or key in self._watched:
                return view
        if view.pipeline is not None:
            runner.watch(view)
            with self._lock:
                self._watched.add(key)
        return view

    async def jobs(self, session: Session, names: list[str]) -> list[JobOut | None]:
        """The background job of each of the session's views ``names`` (None: idle).

        With workers it is read from Redis, off the loop, and is None for every
        view when Redis does not answer: a read never fails for the broker.
        """
        views = [session.view(name) for name in names]
        workers = self.workers
        if workers is not None:
            from contextfold.server.jobs import jobs_of

            found = await run_in_threadpool(jobs_of, workers, views)
            return [JobOut.of(job) for job in found]
        runner = self.runner
        if runner is None:
            return [None] * len(views)
        return [None if runner.running(v) is None else JobOut(state="running") for v in views]

    def _on_event(self, event: Event) -> None:
        self.metrics.compaction(event)
        if event.kind in STREAMED:
            self.hub.publish(event.session, {"event": event.kind, "data": event_data(event)})

    def _feed(self, store_id: str) -> Callable[[], None]:
        """Stream ``store_id``'s appends (through any path the store's wake sees) and the
        events other server processes announce for it."""
        wake = self.memory.wake

        def appended(session_id: str) -> None:
            try:
                last_seq = self._handle(session_id).last_seq()
            except NotFound:  # deleted meanwhile: no log to announce
                return
            event = {"event": "appended", "data": {"last_seq": last_seq}}
            self.hub.publish(session_id, event, relay=False)

        def heard(session_id: str, data: str) -> None:
            try:
                event = json.loads(data)
            except ValueError:
                return
            self.hub.publish(session_id, event, relay=False)

        stops = [wake.listen(store_id, appended), wake.listen_events(store_id, heard)]

        def stop() -> None:
            for each in stops:
                each()

        return stop

    def _relay(self, store_id: str, event: dict[str, Any]) -> None:
        """Announce an event published here to the other processes on the store. A worker's
        events reach every process through Redis already; a long ``detail`` is cut to
        ``RELAYED_DETAIL`` characters (a notification's payload is bounded)."""
        data = event.get("data")
        if not isinstance(data, dict) or (self.workers is not None and "worker" in data):
            return
        detail = data.get("detail")
        if isinstance(detail, str) and len(detail) > RELAYED_DETAIL:
            event = {**event, "data": {**data, "detail": detail[:RELAYED_DETAIL] + "…"}}
        try:
            self.memory.wake.announce(store_id, json.dumps(event))
        except Exception as exc:  # a stream elsewhere misses it; nothing here fails for it
            log.warning("announcing a %s event to other processes failed: %s", event["event"], exc)


async def service(request: Request) -> Service:
    """The app's service (a FastAPI dependency; ``async``, so it runs on the loop)."""
    found: Service = request.app.state.service
    return found


ServiceDep = Annotated[Service, Depends(service)]
