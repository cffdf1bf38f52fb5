"""What one compaction job may spend on its model: calls, time, and a stop signal.

The cycle opens a ``JobBudget`` for every job (``job_budget``) and every model
call of the job consults it: ``Model.complete`` before each HTTP attempt
(retries included), ``llm.guard.Guarded`` before each call of any other ``LLM``
(a user's own, a scripted one). So however a strategy loops over checked
attempts and however an adapter retries, a job makes at most ``max_calls``
model calls, none after its ``deadline`` and none after ``cancel()`` (a runner
that stops or gives the job up). The budget lives in a context variable, so it
follows the job into the thread or task that runs it.

A spent budget raises ``JobStopped``. It is not a ``ModelError``: a strategy
that asks again after a failed call does not catch it, so the job ends at once
and the cycle reports it ``failed``.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar

from contextfold.core.errors import ContextfoldError, InvalidInput

MAX_CALLS = 4
"""Model calls (HTTP requests, retries included) one job may make by default."""
DEADLINE_S = 300.0
"""Seconds one job may take by default, its model calls and their backoff included."""


class JobStopped(ContextfoldError):
    """The job may make no more model calls: budget spent, deadline passed, or cancelled."""


@dataclass(frozen=True)
class JobLimits:
    """How much one job may spend: ``max_calls`` model calls within ``deadline_s`` seconds.

    ``deadline_s=None`` sets no deadline (each call still has its own timeout).
    """

    max_calls: int = MAX_CALLS
    deadline_s: float | None = DEADLINE_S

    def __post_init__(self) -> None:
        if isinstance(self.max_calls, bool) or not isinstance(self.max_calls, int):
            raise InvalidInput("max_calls must be a whole number", field="max_calls")
        if self.max_calls < 1:
            raise InvalidInput(
                f"max_calls must be 1 or more, got {self.max_calls}", field="max_calls"
            )
        if self.deadline_s is not None and not self.deadline_s > 0:
            raise InvalidInput(
                f"deadline_s must be more than 0 seconds, got {self.deadline_s}", field="deadline_s"
            )


DEFAULT_LIMITS = JobLimits()
"""The default limits: ``MAX_CALLS`` calls within ``DEADLINE_S`` seconds."""


class JobBudget:
    """The calls and time one running job has left, and its cancel flag (thread-safe)."""

    def __init__(self, limits: JobLimits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self.calls = 0
        self.last_failure: str | None = None
        self.deadline = None if limits.deadline_s is None else time.monotonic() + limits.deadline_s
        self._cancelled = threading.Event()
        self._lock = threading.Lock()

    def charge(self, who: str) -> None:
        """Count one model call about to go out, or raise ``JobStopped`` if none may."""
        with self._lock:
            self.check(who)
            if self.calls >= self.limits.max_calls:
                raise self.stopped(
                    f"{who}: the job's budget of {self.limits.max_calls} model calls is spent"
                )
            self.calls += 1

    def check(self, who: str) -> None:
        """Raise ``JobStopped`` when the job was cancelled or its deadline has passed."""
        if self._cancelled.is_set():
            raise self.stopped(f"{who}: the job was cancelled")
        left = self.left()
        if left is not None and left <= 0:
            raise self.stopped(f"{who}: the job's deadline of {self.limits.deadline_s} s passed")

    def note(self, failure: BaseException) -> None:
        """Remember a failed call, so the error that stops the job says what went wrong."""
        self.last_failure = str(failure) or type(failure).__name__

    def stopped(self, why: str) -> JobStopped:
        """``JobStopped`` saying ``why``, and the last failure when there was one."""
        last = self.last_failure
        return JobStopped(why if last is None else f"{why} (last failure: {last})")

    def can_call(self) -> bool:
        """True while another call may go out (a retry is worth waiting for)."""
        left = self.left()
        return (
            not self._cancelled.is_set()
            and self.calls < self.limits.max_calls
            and (left is None or left > 0)
        )

    def left(self) -> float | None:
        """Seconds until the deadline (None: no deadline)."""
        return None if self.deadline is None else self.deadline - time.monotonic()

    def timeout(self, own: float) -> float:
        """The timeout of the next call: its own, never past the job's deadline."""
        left = self.left()
        return own if left is None else max(min(own, left), 0.001)

    def cancel(self) -> None:
        """Stop the job: no call goes out from now, and its waits (``pause``, ``wait``) end."""
        self._cancelled.set()

    def pause_for(self, seconds: float, failure: Exception) -> float:
        """The backoff before a retry; raises ``failure`` when no retry may follow it."""
        left = self.left()
        if not self.can_call() or (left is not None and seconds >= left):
            raise failure
        return seconds

    def pause(self, seconds: float, failure: Exception) -> None:
        """Wait the backoff before a retry; raises ``failure`` when a cancel cuts it short."""
        if self._cancelled.wait(self.pause_for(seconds, failure)):
            raise failure

    def wait(self, done: threading.Event, seconds: float | None = None) -> bool:
        """Wait for ``done`` until ``seconds`` pass, the deadline or a cancel; True when set."""
        until = None if seconds is None else time.monotonic() + seconds
        while not done.is_set():
            left = self.left()
            if until is not None:
                left = (
                    until - time.monotonic()
                    if left is None
                    else min(left, until - time.monotonic())
                )
            if self._cancelled.is_set() or (left is not None and left <= 0):
                return done.is_set()
            done.wait(_POLL_S if left is None else min(_POLL_S, left))
        return True


_POLL_S = 0.05
T = TypeVar("T")


class NoAnswer(Exception):
    """``call_within`` stopped waiting: the call did not end in time (or the job was cancelled)."""


def call_within(call: Callable[[], T], seconds: float | None, budget: JobBudget | None) -> T:
    """``call()`` on a daemon thread (in this context), waited for at most ``seconds``
    and never past the budget's deadline or cancel; ``NoAnswer`` when it did not end.

    A call that hangs (a server that trickles its answer byte by byte defeats
    every read timeout) is left behind on its thread: it can no longer hold
    the job up, and it makes no further call.
    """
    done = threading.Event()
    outcome: list[tuple[T | None, BaseException | None]] = []

    def work() -> None:
        try:
            outcome.append((call(), None))
        except BaseException as exc:
            outcome.append((None, exc))
        done.set()

    context = contextvars.copy_context()
    threading.Thread(target=context.run, args=(work,), name="contextfold-call", daemon=True).start()
    ended = done.wait(seconds) if budget is None else budget.wait(done, seconds)
    if not ended:
        raise NoAnswer(f"no answer within {seconds} s" if seconds else "no answer in time")
    value, error = outcome[0]
    if error is not None:
        raise error
    return value  # type: ignore[return-value]


_current: ContextVar[JobBudget | None] = ContextVar("contextfold_job_budget", default=None)


def current_budget() -> JobBudget | None:
    """The budget of the job running in this context, if any."""
    return _current.get()


@contextmanager
def job_budget(budget: JobBudget | None) -> Iterator[JobBudget | None]:
    """Make ``budget`` the one every model call in this context consults (None: unbounded)."""
    token = _current.set(budget)
    try:
        yield budget
    finally:
        _current.reset(token)
