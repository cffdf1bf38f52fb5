"""The event hub: what happens to a session, fanned out to its server-sent-event streams.

``publish`` may be called from any thread (the runner's workers, a wake-up
thread); each subscriber gets the event on its own event loop's queue. A
subscriber too slow to keep up loses events past ``queue_size`` rather than
holding the publisher up: a page re-reads the history on the next event.
``feed(session)`` starts whatever produces a session's events (a wake-up
listener) when its first subscriber comes, and the stop it returns is called
when its last one leaves. ``relay(session, event)`` hands each event published
here to the other server processes (through the store's wake), whose feeds
publish it again with ``relay=False``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

EventData = dict[str, Any]
Feed = Callable[[str], Callable[[], None]]
Relay = Callable[[str, EventData], None]

QUEUE_SIZE = 1000


class Subscription:
    """One stream's queue; registered when made, until ``close``."""

    def __init__(self, hub: EventHub, session: str, queue_size: int) -> None:
        self.hub = hub
        self.session = session
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[EventData] = asyncio.Queue(queue_size)
        self.dropped = 0
        self.closed = False

    def offer(self, event: EventData) -> None:
        """Runs on the subscriber's loop."""
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> EventData:
        if self.closed:
            raise StopAsyncIteration
        return await self.queue.get()

    async def get(self, timeout: float | None = None) -> EventData | None:
        """The next event, or None after ``timeout`` seconds without one."""
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            return None

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.hub.leave(self)

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class EventHub:
    def __init__(
        self, feed: Feed | None = None, queue_size: int = QUEUE_SIZE, relay: Relay | None = None
    ) -> None:
        self._feed = feed
        self._relay = relay
        self._queue_size = queue_size
        self._lock = threading.Lock()
        self._subscribers: dict[str, list[Subscription]] = {}
        self._stops: dict[str, Callable[[], None]] = {}
        self.published = 0

    def publish(self, session: str, event: EventData, *, relay: bool = True) -> None:
        """Hand ``event`` (``{"event": name, "data": {...}}``) to the session's subscribers,
        and with ``relay`` to the other processes' (an event heard from them is not)."""
        if relay and self._relay is not None:
            self._relay(session, event)
        with self._lock:
            subscribers = list(self._subscribers.get(session, ()))
            self.published += 1
        for sub in subscribers:
            try:
                sub.loop.call_soon_threadsafe(sub.offer, event)
            except RuntimeError:  # its loop has closed; the stream is gone
                sub.close()

    def subscribe(self, session: str) -> Subscription:
        """A subscription to the session's events from now on (call on the event loop)."""
        sub = Subscription(self, session, self._queue_size)
        with self._lock:
            subscribers = self._subscribers.setdefault(session, [])
            subscribers.append(sub)
            first = len(subscribers) == 1
        if first and self._feed is not None:
            stop: Callable[[], None] | None = self._feed(session)
            with self._lock:
                if self._subscribers.get(session) and stop is not None:
                    self._stops[session] = stop
                    stop = None
            if stop is not None:
                stop()
        return sub

    def leave(self, sub: Subscription) -> None:
        with self._lock:
            subscribers = self._subscribers.get(sub.session, [])
            if sub in subscribers:
                subscribers.remove(sub)
            stop = None
            if not subscribers:
                self._subscribers.pop(sub.session, None)
                stop = self._stops.pop(sub.session, None)
        if stop is not None:
            stop()

    def subscribers(self, session: str | None = None) -> int:
        with self._lock:
            if session is not None:
                return len(self._subscribers.get(session, ()))
            return sum(len(s) for s in self._subscribers.values())
