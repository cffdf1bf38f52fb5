"""The thread runner: cycles run on a few daemon worker threads.

``notify`` (called by every append) only queues the view, so the next prompt
renders at once from what is committed. A woken view is planned ``settle_s``
later, so a burst of appends costs one plan instead of one each, and the
worker does not compete with the turns of the burst for the GIL. Workers are
daemon threads, as is the lease keeper: a process whose main thread ends exits
even while a model call is still out. A view whose lease another process holds
is tried again after ``retry_s``.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Iterable

from contextfold.core.errors import InvalidInput
from contextfold.core.events import EventCallback
from contextfold.llm.budget import DEFAULT_LIMITS, JobLimits
from contextfold.memory.view import View
from contextfold.runtime.cooldown import DEFAULT_COOLDOWN, Cooldown
from contextfold.runtime.core import Key, Runner, key_of

SETTLE_S = 0.005
_HURRY_POLL_S = 0.05
"""How often a draining ``stop`` looks whether ``hurry`` cut it short."""


class ThreadRunner(Runner):
    def __init__(
        self,
        workers: int = 2,
        *,
        settle_s: float = SETTLE_S,
        retry_s: float = 1.0,
        owner: str | None = None,
        lease_ttl_s: float = 60.0,
        on_event: Iterable[EventCallback] = (),
        limits: JobLimits = DEFAULT_LIMITS,
        cooldown: Cooldown = DEFAULT_COOLDOWN,
    ) -> None:
        if workers < 1:
            raise InvalidInput("a ThreadRunner needs at least one worker", field="workers")
        super().__init__(
            owner=owner,
            lease_ttl_s=lease_ttl_s,
            on_event=on_event,
            limits=limits,
            cooldown=cooldown,
        )
        self.retry_s = retry_s
        self.settle_s = settle_s
        self._settling: set[Key] = set()
        self._retrying: set[Key] = set()
        self._cond = threading.Condition()
        self._queue: deque[View] = deque()
        self._queued: set[Key] = set()
        self._later: list[tuple[float, int, View]] = []
        self._ticket = itertools.count()
        self._active = 0
        self._stopping = False
        self._hurried = False
        self._threads = [
            threading.Thread(target=self._work, name=f"contextfold-runner-{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def _schedule(self, view: View) -> None:
        key = key_of(view)
        with self._cond:
            if self._stopping or key in self._queued or key in self._settling:
                return
            if self.settle_s <= 0:
                self._queued.add(key)
                self._queue.append(view)
            else:
                self._settling.add(key)
                due = time.monotonic() + self.settle_s
                heapq.heappush(self._later, (due, next(self._ticket), view))
            self._cond.notify()

    def _retry_later(self, view: View) -> None:
        """Plan the view again ``retry_s`` from now, unless a retry of it is waiting already."""
        with self._cond:
            if not self._stopping and key_of(view) not in self._retrying:
                self._retrying.add(key_of(view))
                due = time.monotonic() + self.retry_s
                heapq.heappush(self._later, (due, next(self._ticket), view))
                self._cond.notify()

    def _work(self) -> None:
        while True:
            with self._cond:
                view = self._take()
                if view is None:
                    return
                self._active += 1
            try:
                self._drive(view)
            finally:
                with self._cond:
                    self._active -= 1
                    self._cond.notify_all()

    def _take(self) -> View | None:
        """The next view to compact, waiting for one (or for a retry to fall due)."""
        while not self._stopping:
            now = time.monotonic()
            while self._later and self._later[0][0] <= now:
                _, _, due = heapq.heappop(self._later)
                self._settling.discard(key_of(due))
                self._retrying.discard(key_of(due))
                if key_of(due) not in self._queued:
                    self._queued.add(key_of(due))
                    self._queue.append(due)
            if self._queue:
                view = self._queue.popleft()
                self._queued.discard(key_of(view))
                return view
            self._cond.wait(self._later[0][0] - now if self._later else None)
        return None

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until nothing is queued, settling or running (retries not yet due do not count)."""
        with self._cond:
            return self._cond.wait_for(
                lambda: (
                    not self._queue and not self._settling and self._active == 0 and not self.busy()
                ),
                timeout,
            )

    def stop(self, timeout: float = 5.0, *, drain: bool = True) -> bool:
        """Stop the workers. With ``drain``, running jobs get ``timeout`` seconds to finish
        and commit; jobs still running then (or at once, without ``drain``) are abandoned:
        they never commit and their leases are released. True when none was abandoned."""
        self._close(drain=drain)
        with self._cond:
            self._stopping = True
            self._queue.clear()
            self._queued.clear()
            self._settling.clear()
            self._retrying.clear()
            self._later.clear()
            self._cond.notify_all()
        deadline = time.monotonic() + (timeout if drain else 0.0)
        for thread in self._threads:
            while thread.is_alive() and not self._hurried:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                thread.join(min(left, _HURRY_POLL_S))
        done = not self.busy()
        if not done:
            self._abandon()
        self._shut()
        return done

    def hurry(self) -> None:
        """Cut a draining ``stop`` short: the jobs still running are abandoned now.

        It only sets a flag that ``stop`` reads, so a signal handler may call it
        while ``stop`` runs in the same thread (a second Ctrl-C).
        """
        self._hurried = True

    def __enter__(self) -> ThreadRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
