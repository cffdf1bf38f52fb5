"""Wake-ups by name: an append through any handle reaches whoever compacts the session.

A runner listens on a session id, not on a Python object, so appends made
through another ``Memory``, another handle or another process wake it alike.
The port is two calls, ``notify(session_id)`` and ``listen(session_id,
callback)``: PostgreSQL's ``LISTEN/NOTIFY`` or a queue has the same shape.

- ``LocalWake`` fans out inside one process. Every handle on the same store
  (the same SQLite file, the same store object) shares one, through
  ``shared_wake``.
- ``PollingWake`` adds what a file shared by processes cannot push: a daemon
  thread reads the last seqs of the listened sessions every ``interval_s``, a
  page of ``POLL_PAGE`` sessions a read, and wakes listeners when another
  process appended (``SQLiteStore.wake``).
- A store whose abilities declare ``wake_across_processes`` hands out its own
  wake from ``wake()`` (``WakingStore``), and ``wake_for`` takes that one:
  the SQLite file's poll, or PostgreSQL's ``LISTEN/NOTIFY``
  (``contextfold.store.postgres.wake``). Any other store gets a local fan-out.
"""

from __future__ import annotations

import threading
import uuid
import weakref
from collections.abc import Callable, Sequence
from typing import Protocol, cast

from contextfold.core.events import log
from contextfold.store.base import Store

WakeCallback = Callable[[str], None]
"""Called with the session id whose log grew."""
EventCallback = Callable[[str, str], None]
"""Called with a session id and an event another process announced for it (JSON text)."""

POLL_S = 0.05
POLL_PAGE = 500
"""Sessions read by one poll statement: one read per session would cost a thousand
reads a poll at a thousand sessions, and one read of them all would hold the store
for as long as it takes."""
LastSeqs = Callable[[Sequence[str]], dict[str, int]]
"""The last seq of each of these sessions that exists."""


class Wake(Protocol):
    def notify(self, session_id: str) -> None:
        """The session's log grew: tell its listeners."""
        ...

    def listen(self, session_id: str, callback: WakeCallback) -> Callable[[], None]:
        """Call ``callback`` after each append to the session; returns the way to stop."""
        ...


class LocalWake:
    """One process's fan-out of appends to listeners, by session id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: dict[str, list[WakeCallback]] = {}
        self._event_listeners: dict[str, list[EventCallback]] = {}
        self.origin = uuid.uuid4().hex
        """This wake's name on what it announces, so it skips its own events."""

    def announce(self, session_id: str, data: str) -> None:
        """Hand an event to the other processes on this store: none here."""

    def listen_events(self, session_id: str, callback: EventCallback) -> Callable[[], None]:
        """Call ``callback`` with each event another process announces for the session;
        returns the way to stop."""
        with self._lock:
            self._event_listeners.setdefault(session_id, []).append(callback)
        self._started()

        def stop() -> None:
            with self._lock:
                listeners = self._event_listeners.get(session_id, [])
                if callback in listeners:
                    listeners.remove(callback)
                if not listeners:
                    self._event_listeners.pop(session_id, None)

        return stop

    def _started(self) -> None:
        """A listener came: a subclass starts whatever hears other processes."""

    def _deliver(self, session_id: str, data: str) -> None:
        """An event another process announced: to this session's event listeners."""
        with self._lock:
            listeners = list(self._event_listeners.get(session_id, ()))
        for callback in listeners:
            try:
                callback(session_id, data)
            except Exception:
                log.exception("event listener failed for session %s", session_id)

    def _anyone(self) -> bool:
        """Whether anyone listens (appends or events); the caller holds the lock."""
        return bool(self._listeners or self._event_listeners)

    def notify(self, session_id: str) -> None:
        with self._lock:
            listeners = list(self._listeners.get(session_id, ()))
        for callback in listeners:
            try:
                callback(session_id)
            except Exception:
                log.exception("wake listener failed for session %s", session_id)

    def listen(self, session_id: str, callback: WakeCallback) -> Callable[[], None]:
        with self._lock:
            self._listeners.setdefault(session_id, []).append(callback)

        def stop() -> None:
            with self._lock:
                listeners = self._listeners.get(session_id, [])
                if callback in listeners:
                    listeners.remove(callback)
                if not listeners:
                    self._listeners.pop(session_id, None)

        return stop

    def sessions(self) -> list[str]:
        with self._lock:
            return list(self._listeners)


class EventTable(Protocol):
    """Where a store shared through files keeps recent events for other processes' polls."""

    def put_event(self, session_id: str, origin: str, data: str) -> None: ...

    def events_after(self, after: int) -> list[tuple[int, str, str, str]]:
        """``(id, session_id, origin, data)`` of the events after id ``after``, oldest first."""
        ...

    def last_event_id(self) -> int: ...


class PollingWake(LocalWake):
    """``LocalWake`` plus a poll of the store for appends (and, given an ``EventTable``,
    events) made by other processes."""

    def __init__(
        self,
        last_seqs: LastSeqs,
        interval_s: float = POLL_S,
        events: EventTable | None = None,
    ) -> None:
        super().__init__()
        self.interval_s = interval_s
        self._last_seqs = last_seqs
        self._events = events
        self._event_id: int | None = None
        self._seen: dict[str, int] = {}
        self._thread: threading.Thread | None = None
        self._wakeup = threading.Event()

    def listen(self, session_id: str, callback: WakeCallback) -> Callable[[], None]:
        """As ``LocalWake.listen``; appends from the moment it returns wake ``callback``
        (the session's last seq is read now, not at the first poll)."""
        try:
            last: int | None = self._last_seqs([session_id]).get(session_id)
        except Exception as exc:
            log.debug("reading session %s's last seq failed: %s", session_id, exc)
            last = None
        stop = super().listen(session_id, callback)
        with self._lock:
            if last is not None:
                self._seen.setdefault(session_id, last)
        self._started()
        return stop

    def announce(self, session_id: str, data: str) -> None:
        if self._events is not None:
            self._events.put_event(session_id, self.origin, data)

    def _started(self) -> None:
        last = None
        if self._events is not None and self._event_id is None:
            try:  # events from now on: none put before anyone here listened
                last = self._events.last_event_id()
            except Exception as exc:
                log.debug("reading the last event id failed: %s", exc)
        with self._lock:
            if self._event_id is None:
                self._event_id = last
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._poll, name="contextfold-wake-poll", daemon=True
                )
                self._thread.start()

    def notify(self, session_id: str) -> None:
        with self._lock:
            self._seen.pop(session_id, None)  # the poll re-reads it rather than firing twice
        super().notify(session_id)

    def _poll(self) -> None:
        """Runs while anyone listens; a later ``listen`` starts it again."""
        while True:
            self._wakeup.wait(self.interval_s)
            with self._lock:
                sessions = list(self._listeners)
                hearing = bool(self._event_listeners)
                if not self._anyone():
                    self._thread = None
                    self._event_id = None
                    return
            if hearing:
                self._poll_events()
            for start in range(0, len(sessions), POLL_PAGE):
                page = sessions[start : start + POLL_PAGE]
                try:
                    found = self._last_seqs(page)
                except Exception as exc:
                    log.debug("polling %d sessions for appends failed: %s", len(page), exc)
                    continue
                grown = []
                with self._lock:
                    for session_id, last in found.items():
                        if self._seen.get(session_id, last) < last:
                            grown.append(session_id)
                        self._seen[session_id] = last
                for session_id in grown:
                    LocalWake.notify(self, session_id)

    def _poll_events(self) -> None:
        """Deliver the events other processes put since the last poll."""
        if self._events is None:
            return
        try:
            if self._event_id is None:
                self._event_id = self._events.last_event_id()
                return
            found = self._events.events_after(self._event_id)
        except Exception as exc:
            log.debug("polling for events failed: %s", exc)
            return
        for event_id, session_id, origin, data in found:
            self._event_id = event_id
            if origin != self.origin:
                self._deliver(session_id, data)


_SHARED: weakref.WeakValueDictionary[str, LocalWake] = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


class WakingStore(Store, Protocol):
    """A store that hands out its own wake (its abilities declare ``wake_across_processes``)."""

    def wake(self) -> LocalWake:
        """The wake every handle on this store's data in this process shares."""
        ...


def shared_wake(key: str, make: Callable[[], LocalWake]) -> LocalWake:
    """The one wake this process keeps for ``key`` (while a handle holds it), made if none."""
    with _SHARED_LOCK:
        wake = _SHARED.get(key)
        if wake is None:
            wake = _SHARED[key] = make()
        return wake


def wake_for(store: Store) -> LocalWake:
    """The wake every handle on ``store`` in this process shares.

    A store declaring ``wake_across_processes`` gives its own; any other store
    only needs a fan-out within this process, one per store object.
    """
    if store.abilities.wake_across_processes:
        return cast(WakingStore, store).wake()
    return shared_wake(f"object:{id(store)}", LocalWake)
