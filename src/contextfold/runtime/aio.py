"""The asyncio runner: one task per compacting view, on the caller's event loop.

Each flight (plan, lease, the model calls, commits) runs in a daemon thread
and the task awaits it, so the loop serving the conversation never waits on a
store or a model. Not ``asyncio.to_thread``: the loop's default executor
joins its threads when the loop closes and when the interpreter exits, so one
stuck model call would keep ``asyncio.run`` and the whole process alive.
``concurrency`` bounds how many views compact at once.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.events import EventCallback, log
from contextfold.llm.budget import DEFAULT_LIMITS, JobLimits
from contextfold.memory.view import View
from contextfold.runtime.cooldown import DEFAULT_COOLDOWN, Cooldown
from contextfold.runtime.core import Key, Runner, key_of


class AsyncioRunner(Runner):
    def __init__(
        self,
        concurrency: int = 4,
        *,
        retry_s: float = 1.0,
        owner: str | None = None,
        lease_ttl_s: float = 60.0,
        on_event: Iterable[EventCallback] = (),
        limits: JobLimits = DEFAULT_LIMITS,
        cooldown: Cooldown = DEFAULT_COOLDOWN,
    ) -> None:
        if concurrency < 1:
            raise InvalidInput("concurrency must be at least 1", field="concurrency")
        super().__init__(
            owner=owner,
            lease_ttl_s=lease_ttl_s,
            on_event=on_event,
            limits=limits,
            cooldown=cooldown,
        )
        self.concurrency = concurrency
        self.retry_s = retry_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots: asyncio.Semaphore | None = None
        self._tasks: dict[Key, asyncio.Task[None]] = {}
        self._again: dict[Key, View] = {}
        self._timers: set[asyncio.TimerHandle] = set()

    def watch(self, view: View) -> None:
        """As ``Runner.watch``; call it on the event loop the runner is to use."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError as exc:
            raise RuntimeError(
                "AsyncioRunner.watch must be called inside a running event loop"
            ) from exc
        if self._loop is None:
            self._loop = loop
            self._slots = asyncio.Semaphore(self.concurrency)
        elif self._loop is not loop:
            raise RuntimeError("an AsyncioRunner serves the one event loop it was first used on")
        super().watch(view)

    def _schedule(self, view: View) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        if _running_loop() is loop:
            self._spawn(view)
            return
        try:
            loop.call_soon_threadsafe(self._spawn, view)
        except RuntimeError:
            return  # the loop closed meanwhile

    def _spawn(self, view: View) -> None:
        key = key_of(view)
        task = self._tasks.get(key)
        if self._closing:
            return
        if task is not None and not task.done():
            # The task may be past its last plan: run the view again once it is done.
            self._again[key] = view
            return
        assert self._loop is not None
        task = self._loop.create_task(self._drive_async(view), name=f"contextfold {view.name}")
        self._tasks[key] = task
        task.add_done_callback(lambda t: self._forget(key, t))

    def _forget(self, key: Key, task: asyncio.Task[None]) -> None:
        if self._tasks.get(key) is task:
            del self._tasks[key]
        again = self._again.pop(key, None)
        if again is not None:
            self.notify(again)

    def _retry_later(self, view: View) -> None:
        def arm() -> None:
            if not self._closing and self._loop is not None:
                self._timers.add(self._loop.call_later(self.retry_s, self.notify, view))

        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(arm)
            except RuntimeError:
                return

    async def _drive_async(self, view: View) -> None:
        """``Runner._drive`` in a daemon thread, awaited without blocking the loop."""
        assert self._slots is not None
        async with self._slots:
            try:
                await _off_loop(partial(self._drive, view))
            except Exception:
                log.exception("compaction of %s/%s stopped", view.session.id, view.name)

    async def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no task is left (retries not yet due do not count)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            tasks = [t for t in self._tasks.values() if not t.done()]
            if not tasks and not self.busy():
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            if tasks:
                await asyncio.wait(tasks, timeout=left)
            else:
                await asyncio.sleep(0.001)

    async def stop(self, timeout: float = 5.0, *, drain: bool = True) -> bool:
        """As ``ThreadRunner.stop``: drain running jobs for ``timeout`` seconds, then
        abandon the rest (they never commit; their leases are released)."""
        self._close(drain=drain)
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        tasks = [t for t in self._tasks.values() if not t.done()]
        if tasks and drain:
            await asyncio.wait(tasks, timeout=timeout)
        done = not self.busy()
        if not done:
            self._abandon()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._shut()
        return done

    async def __aenter__(self) -> AsyncioRunner:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


async def _off_loop(step: Callable[[], Any]) -> Any:
    """Run ``step`` in a daemon thread and wait for it without blocking the loop."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if done.done():
            return  # the waiting task was cancelled: the result is dropped
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(value)

    def work() -> None:
        value: Any = None
        error: BaseException | None = None
        try:
            value = step()
        except BaseException as exc:
            error = exc
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:
            return  # the loop is closed: nobody waits for this any more

    threading.Thread(target=work, name="contextfold-step", daemon=True).start()
    return await done
