"""Runners: compaction off the hot path, one job per view at a time.

::

    runner = ThreadRunner(workers=2, on_event=[stats])
    runner.watch(view)                 # plans now and after every append
    session.append({"role": "user", "content": "..."})
    prompt = view.render()             # from the folds committed so far
    runner.stop(timeout=5)

``InlineRunner`` runs each job inside the append (scripts, tests);
``ThreadRunner`` on daemon worker threads; ``ProcessRunner`` like it, with
model-free (CPU-heavy) jobs in worker processes; ``AsyncioRunner`` as tasks on
the running event loop (``await runner.stop()``). All run the same cycle.
``CeleryRunner`` (``contextfold.workers``, the ``workers`` extra) plans the same
way and sends the jobs to Celery workers on other processes or machines.
"""

from contextfold.runtime.aio import AsyncioRunner
from contextfold.runtime.cooldown import Cooldown
from contextfold.runtime.core import Runner
from contextfold.runtime.inline import InlineRunner
from contextfold.runtime.metrics import PrometheusMetrics, Stats
from contextfold.runtime.process import ProcessRunner
from contextfold.runtime.thread import ThreadRunner

__all__ = [
    "AsyncioRunner",
    "Cooldown",
    "InlineRunner",
    "ProcessRunner",
    "PrometheusMetrics",
    "Runner",
    "Stats",
    "ThreadRunner",
]
