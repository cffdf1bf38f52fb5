"""Compaction on Celery workers with a Redis broker (``pip install 'contextfold[workers]'``).

::

    runner = CeleryRunner("redis://127.0.0.1:6379/0")   # plans here, sends jobs
    runner.watch(view)                                   # a stored (portable) view
    # elsewhere, on any number of machines:
    #   contextfold worker --database postgresql://... --broker redis://...

Workers take ``(session, view)`` jobs and run the one compaction cycle under
the view's lease; see ``docs/scaling.md``.

The names below are imported on first use: importing ``contextfold.workers``
(the CLI does, for ``contextfold worker``) needs neither Celery nor Redis.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from contextfold.core.extras import needs_extra

if TYPE_CHECKING:
    from contextfold.workers.app import celery_app
    from contextfold.workers.queue import JobState, WorkQueue
    from contextfold.workers.runner import CeleryRunner

__all__ = ["CeleryRunner", "JobState", "WorkQueue", "celery_app"]

_HOMES = {
    "CeleryRunner": "runner",
    "JobState": "queue",
    "WorkQueue": "queue",
    "celery_app": "app",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with needs_extra(f"contextfold.workers.{name}", "workers"):
        module = importlib.import_module(f"contextfold.workers.{home}")
    return getattr(module, name)
