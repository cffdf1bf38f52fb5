"""The process runner: the thread runner, with CPU-heavy jobs run in worker processes.

Model-free folding (masking, the offline extractive selection, the offline
stand-in's answers) is pure Python CPU work. On a worker thread it holds the
GIL for tens of milliseconds, and every turn that comes meanwhile waits for
it. Here such a job is sent to a pool of worker processes instead: the
strategy as stored data (``strategies.registry``), the job, and the session's
encoding; the worker rebuilds the strategy and the offline model, runs the job,
and sends the folds back. Planning and committing stay in this process, in the
one cycle every runner shares.

Jobs for a real model are I/O-bound (the SDKs release the GIL while they wait)
and run on the worker thread as in ``ThreadRunner``; so do jobs of strategies
that say they are ``light`` (masking, trimming: cheaper here than the trip),
jobs whose strategy is not registered, and jobs whose token counter has no
name a worker can rebuild. A job sent to a worker keeps its budget: this
process waits for it no longer than the job's deadline, and a cancel (``stop``)
ends the wait; the worker calls no model, so nothing goes out meanwhile.

The workers end with the runner. ``stop`` drains as ``ThreadRunner.stop`` does,
then lets idle workers exit, and kills a worker still busy with an abandoned
job: no one will commit its folds. A worker ignores SIGINT and SIGTERM (Ctrl-C
reaches the terminal's whole process group, systemd signals the whole control
group): the parent decides what stops, so its drain can still use the
worker. A worker exits by itself when its parent is gone, so even a parent
killed outright (SIGKILL) leaves no worker behind.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.events import EventCallback
from contextfold.core.folds import Fold
from contextfold.core.tokens import ENCODINGS, TokenCounter, get_counter
from contextfold.llm.base import LLM
from contextfold.llm.budget import DEFAULT_LIMITS, JobLimits, JobStopped, current_budget
from contextfold.llm.offline import OfflineModel
from contextfold.memory.cycle import RunJob, run_here
from contextfold.runtime.cooldown import DEFAULT_COOLDOWN, Cooldown
from contextfold.runtime.thread import SETTLE_S, ThreadRunner
from contextfold.strategies.base import Job, Strategy
from contextfold.strategies.registry import strategy_from_data, strategy_to_data

_POLL_S = 0.05
_EXIT_S = 2.0
"""How long idle workers get to exit once told to, before they are killed."""
PORTABLE_ENCODINGS = (*ENCODINGS, "approx")
"""Counters a worker process can rebuild by name."""


class ProcessRunner(ThreadRunner):
    """``ThreadRunner`` whose model-free jobs run in ``processes`` worker processes."""

    def __init__(
        self,
        workers: int = 2,
        *,
        processes: int = 1,
        settle_s: float = SETTLE_S,
        retry_s: float = 1.0,
        owner: str | None = None,
        lease_ttl_s: float = 60.0,
        on_event: Iterable[EventCallback] = (),
        limits: JobLimits = DEFAULT_LIMITS,
        cooldown: Cooldown = DEFAULT_COOLDOWN,
    ) -> None:
        if processes < 1:
            raise InvalidInput("a ProcessRunner needs at least one process", field="processes")
        # Spawned, not forked: a fork of a process with threads may inherit held locks.
        self._pool = ProcessPoolExecutor(
            processes, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_start
        )
        # Started and importing before this returns, so no job pays for a worker's start.
        for future in [self._pool.submit(_warm) for _ in range(processes)]:
            future.result()
        super().__init__(
            workers,
            settle_s=settle_s,
            retry_s=retry_s,
            owner=owner,
            lease_ttl_s=lease_ttl_s,
            on_event=on_event,
            limits=limits,
            cooldown=cooldown,
        )

    def _run_job(self) -> RunJob:
        return self._run

    def _run(self, strategy: Strategy, job: Job, llm: LLM, counter: TokenCounter) -> Sequence[Fold]:
        light = getattr(strategy, "light", False)
        if light or not isinstance(llm, OfflineModel) or counter.name not in PORTABLE_ENCODINGS:
            return run_here(strategy, job, llm, counter)
        try:
            data = strategy_to_data(strategy)
        except InvalidInput:
            return run_here(strategy, job, llm, counter)
        return _awaited(self._pool.submit(_run_in_worker, data, job, counter.name))

    def stop(self, timeout: float = 5.0, *, drain: bool = True) -> bool:
        """``ThreadRunner.stop``, then the workers end: none is left running on return."""
        done = super().stop(timeout, drain=drain)
        # The executor forgets its processes on shutdown (None after a first stop);
        # it has no public handle on them.
        workers = list((self._pool._processes or {}).values())
        self._pool.shutdown(wait=False, cancel_futures=True)
        # Idle workers exit on the executor's word; a busy one works on an abandoned job.
        deadline = time.monotonic() + (_EXIT_S if done and not self._hurried else 0.0)
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        for worker in workers:
            if worker.is_alive():
                worker.kill()  # it ignores SIGTERM
                worker.join()
        return done

    def __enter__(self) -> ProcessRunner:
        return self


def _awaited(future: Future[list[Fold]]) -> list[Fold]:
    """The worker's folds, waited for no longer than the job's deadline or its cancel."""
    budget = current_budget()
    while True:
        if budget is not None:
            try:
                budget.check("worker process")
            except JobStopped:
                future.cancel()
                raise
        try:
            return future.result(timeout=_POLL_S)
        except FutureTimeout:
            continue


def _worker_start() -> None:
    """In a new worker: leave SIGINT and SIGTERM to the parent, exit when the parent is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()


def _exit_with(parent: multiprocessing.process.BaseProcess) -> None:
    """Wait for the parent's end (its pipe to this worker closes), then end this worker.

    ``os._exit``: a job still running has no one to hand its folds to.
    """
    parent.join()
    os._exit(0)


def _warm() -> None:
    """Import the package in a worker (registering the built-ins) before a job needs it."""
    import contextfold.strategies  # noqa: F401


def _run_in_worker(data: dict[str, Any], job: Job, encoding: str) -> list[Fold]:
    """In the worker: rebuild the strategy from its data (``_warm`` registered the built-ins)."""
    _warm()
    counter = get_counter(encoding)
    strategy = strategy_from_data(data)
    return list(strategy.run(job, OfflineModel(counter=counter), counter))
