"""The Celery app of one broker and queue, configured so that no job is lost.

Both sides build it the same way: an enqueuer (``CeleryRunner``) only sends
``compact`` messages by name; a worker (``contextfold worker``) also registers
the task (``contextfold.workers.task``). Settings that matter:

- ``task_acks_late`` and ``task_reject_on_worker_lost``: a job is acknowledged
  when it ends, so a worker killed mid-job leaves its message to be delivered
  again: within seconds when only the pool process died (Celery notices in its
  pool upkeep, every 5 s; measured 2-5 s), after the broker's
  ``visibility_timeout`` when the whole worker did (plus up to one sweep of
  the surviving workers: every ``restore_interval(visibility_timeout)``
  seconds, where kombu's own default sweeps every 100 s; measured 5.6-6.2 s
  with a 5 s timeout). The job then waits for the dead process's lease to
  expire (``--lease-ttl``);
- ``worker_cancel_long_running_tasks_on_connection_loss=False`` (Celery 6 turns
  it on): a job running when the broker goes away goes on, since its work lands
  in the store; it cannot be acknowledged, so it may run again, and finds
  nothing left to do;
- ``worker_prefetch_multiplier=1``: a worker holds one job per pool slot, so a
  slow job does not sit on jobs another worker could run;
- results are ignored: the store is where a job's work lands.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import redis
from kombu.exceptions import OperationalError

from contextfold.core.errors import InvalidInput
from contextfold.redact import redact

if TYPE_CHECKING:
    from celery import Celery

TASK = "contextfold.compact"
DEFAULT_QUEUE = "contextfold"
VISIBILITY_TIMEOUT_S = 600.0
"""A message not acknowledged this long after delivery goes to another worker: it must
outlast the longest job (``JobLimits.deadline_s`` per job, and a cycle runs several)."""
BROKER_ERRORS = (redis.RedisError, OperationalError, OSError)
"""What reaching the broker may raise: Redis away, or Celery giving up publishing to it."""
EXTRA = "pip install 'contextfold[workers]'"


def restore_interval(visibility_timeout_s: float) -> int:
    """Seconds between the sweeps that hand a dead worker's jobs to another: a fifth of
    the visibility timeout, 1 to 10 s (kombu's int)."""
    return int(min(10.0, max(1.0, visibility_timeout_s / 5)))


def longest_countdown(visibility_timeout_s: float) -> float:
    """The longest a resent job may wait: a worker holds a waiting job unacknowledged, and
    one held past the visibility timeout is handed to a second worker; half of it is left
    for the job to run."""
    return visibility_timeout_s / 2


def celery_app(
    broker: str, queue: str = DEFAULT_QUEUE, *, visibility_timeout_s: float = VISIBILITY_TIMEOUT_S
) -> Celery:
    """A Celery app sending ``compact`` jobs to ``queue`` on ``broker`` (``redis://...``)."""
    try:
        from celery import Celery
    except ImportError as exc:  # pragma: no cover - the extra is installed in the tests
        raise ImportError(f"Celery workers need the workers extra: {EXTRA}") from exc
    if not broker.startswith(("redis://", "rediss://", "unix://")):
        raise InvalidInput(
            f"the broker is a Redis URL (redis://host:6379/0), not {redact(broker)!r}",
            field="broker",
        )
    if not queue or not queue.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise InvalidInput(
            f"a queue name is letters, digits, '-', '_' and '.', not {queue!r}", field="queue"
        )
    if visibility_timeout_s <= 0:
        raise InvalidInput("the visibility timeout must be positive", field="visibility_timeout")
    app = Celery(f"contextfold-{queue}", broker=broker, set_as_current=False)
    app.conf.update(
        task_default_queue=queue,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_cancel_long_running_tasks_on_connection_loss=False,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        broker_transport_options={
            "visibility_timeout": visibility_timeout_s,
            "unacked_restore_interval": restore_interval(visibility_timeout_s),
            "unacked_restore_throttle": 1,
        },
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=2.0,
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        task_publish_retry_policy={
            "max_retries": 2,
            "interval_start": 0.0,
            "interval_step": 0.2,
            "interval_max": 0.5,
        },
    )
    return app


def send(
    app: Celery,
    session: str,
    view: str,
    *,
    since: float | None = None,
    countdown: float = 0.0,
    busy: int = 0,
) -> None:
    """Queue one ``compact`` job for the view; ``since`` is when its first append came,
    ``busy`` how many times in a row it found the view's lease held."""
    kwargs: dict[str, float | int] = {"since": time.time() if since is None else since}
    if busy:
        kwargs["busy"] = busy
    app.send_task(
        TASK,
        args=[session, view],
        kwargs=kwargs,
        queue=app.conf.task_default_queue,
        countdown=countdown or None,
    )
