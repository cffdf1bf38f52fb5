"""Keeping compaction leases alive while their jobs run.

A lease expires ``ttl_s`` after it was last taken, so a process killed in the
middle of a job blocks its view for at most that long. A job may outlive the
ttl (a slow model), so a keeper thread renews every lease its runner holds a
few times per ttl. It is a daemon thread: it never keeps a process alive.

``held_lease`` is the same gate for an inline ``View.compact``: it waits for
the view's lease under an owner of its own, so two inline compactions of one
view (two threads, two handles, two processes on one file) take turns, and a
runner's cycle and an inline one never overlap either.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from contextfold.core.errors import ContextfoldError
from contextfold.core.events import log
from contextfold.store.base import Store


class LeasedSession(Protocol):
    @property
    def store(self) -> Store: ...

    @property
    def id(self) -> str: ...


class Leased(Protocol):
    """What a lease is taken on: a view's name and its session (a ``View`` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def session(self) -> LeasedSession: ...


LeaseKey = tuple[int, str, str]
LEASE_TTL_S = 60.0
_POLL_S = (0.002, 0.05)


class LeaseKeeper:
    """Renews the leases one owner holds, every ``ttl_s / 3`` seconds."""

    def __init__(self, owner: str, ttl_s: float) -> None:
        self.owner = owner
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._held: dict[LeaseKey, tuple[Store, str, str]] = {}
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def acquire(self, view: Leased) -> bool:
        """Take the view's lease and keep renewing it until ``release``; False while
        another owner holds it."""
        return self._take(view.session.store, view.session.id, view.name)

    def release(self, view: Leased) -> None:
        """Stop renewing the view's lease and give it up (a no-op if it was taken over)."""
        self._give_up(view.session.store, view.session.id, view.name)

    def _take(self, store: Store, session_id: str, view: str) -> bool:
        if not store.acquire_lease(session_id, view, self.owner, self.ttl_s):
            return False
        key = (id(store), session_id, view)
        with self._lock:
            self._held[key] = (store, session_id, view)
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(
                    target=self._renew_forever, name="contextfold-lease-keeper", daemon=True
                )
                self._thread.start()
        return True

    def _give_up(self, store: Store, session_id: str, view: str) -> None:
        key = (id(store), session_id, view)
        with self._lock:
            self._held.pop(key, None)
        try:
            store.release_lease(session_id, view, self.owner)
        except ContextfoldError:
            # The lease expires on its own; a closed store must not break shutdown.
            log.warning("could not release lease on %s/%s", session_id, view, exc_info=True)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
        self._wake.set()

    def _renew_forever(self) -> None:
        while not self._wake.wait(self.ttl_s / 3):
            with self._lock:
                keys = list(self._held)
            for key in keys:
                self._renew(key)

    def _renew(self, key: LeaseKey) -> None:
        # Under the lock, so a lease released meanwhile is not taken again.
        with self._lock:
            if key not in self._held:
                return
            store, session_id, view = self._held[key]
            try:
                kept = store.acquire_lease(session_id, view, self.owner, self.ttl_s)
            except ContextfoldError:
                log.warning("could not renew lease on %s/%s", session_id, view, exc_info=True)
                return
        if not kept:
            # Only after this process stalled past the ttl; the version check
            # still refuses whichever of the two commits comes second.
            log.warning("lease on %s/%s was taken over by another owner", session_id, view)


@contextmanager
def held_lease(
    store: Store, session_id: str, view: str, ttl_s: float = LEASE_TTL_S
) -> Iterator[None]:
    """Wait for the view's compaction lease, hold it (renewed) inside, give it up after."""
    keeper = LeaseKeeper(f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}", ttl_s)
    pause = _POLL_S[0]
    while not keeper._take(store, session_id, view):
        time.sleep(pause)
        pause = min(pause * 2, _POLL_S[1])
    try:
        yield
    finally:
        keeper._give_up(store, session_id, view)
        keeper.stop()
