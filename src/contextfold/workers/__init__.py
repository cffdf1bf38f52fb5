"""Compaction on Celery workers with a Redis broker (``pip install 'contextfold[workers]'``).

::

    runner = CeleryRunner("redis://127.0.0.1:6379/0")   # plans here, sends jobs
    runner.watch(view)                                   # a stored (portable) view
    # elsewhere, on any number of machines:
    #   contextfold worker --database postgresql://... --broker redis://...

Workers take ``(session, view)`` jobs and run the one compaction cycle under
the view's lease; see ``docs/scaling.md``.
"""

from contextfold.workers.app import celery_app
from contextfold.workers.queue import JobState, WorkQueue
from contextfold.workers.runner import CeleryRunner

__all__ = ["CeleryRunner", "JobState", "WorkQueue", "celery_app"]
