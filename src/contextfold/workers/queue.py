"""What the workers and the enqueuers share in Redis, beside Celery's own queue.

Celery carries the jobs; these keys (all under the queue's name) carry what a
job needs around it, so any API process and any worker see the same:

- ``pending``: one field per view with a job queued and not yet started; an
  enqueuer sends a job only when it sets the field (``HSETNX``), so a burst of
  appends queues one job. A worker clears it as the job starts, so an append
  that comes while the job runs queues the next one.
- ``running``: the view's job is being run, by whom and since when.
- ``failing`` and ``parked``: failures in a row per view; a view that failed
  ``max_failures`` times in a row is parked (no job is queued for it until its
  configuration changes or someone asks to compact it).
- ``backoff``: until when a view that just failed rests: a job that comes
  sooner (an append's) waits until then, so appends do not undo the backoff.
- ``stats`` and ``latency``: counters and the append-to-commit histogram,
  kept here so every API process's ``/metrics`` reports the whole pool.
- ``jobs``: the last ``JOBS_KEPT`` jobs that held a view's lease, who ran them
  and from when to when (what shows that two never compacted one view at once).
- the ``events`` channel: the cycle's events, for the API processes' streams.

Fields are the JSON of ``[session, view]``; values are JSON. Wall-clock times
(``time.time()``) compare across machines only as well as their clocks agree.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, Literal

import redis

from contextfold.core.events import Event

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
"""Append-to-commit latency buckets, seconds."""
STATS = ("enqueued", "started", "committed", "failed", "retried", "parked", "busy")
JOBS_KEPT = 1000
_TIMEOUT_S = 2.0

JobStateName = Literal["pending", "running", "parked", "failing"]


@dataclass(frozen=True)
class JobState:
    """Where a view's background job stands, as the page and the API show it."""

    state: JobStateName
    since: float
    """Wall-clock time: of the first append it covers (pending, running), of parking."""
    failures: int = 0
    worker: str = ""
    reason: str = ""


@dataclass(frozen=True)
class JobRecord:
    """One job that held its view's lease: on which worker, when (wall clock), how it ended."""

    session: str
    view: str
    worker: str
    started: float
    """Just after the lease was taken."""
    ended: float
    """Just before the lease was given up."""
    outcome: str
    folds: int = 0


_MARK = """
local held = redis.call('HGET', KEYS[1], ARGV[1])
if held then
  local marked = cjson.decode(held)['marked']
  if marked and marked > tonumber(ARGV[3]) then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""
"""Set the pending mark unless a fresh one stands (one round trip, atomic in Redis)."""


def queue_field(session: str, view: str) -> str:
    return json.dumps([session, view])


def view_of(field: str | bytes) -> tuple[str, str]:
    session, view = json.loads(field)
    return str(session), str(view)


class WorkQueue:
    """The Redis keys of one queue (``name``), on the broker's Redis at ``url``."""

    def __init__(self, url: str, name: str = "contextfold", *, stale_s: float = 600.0) -> None:
        self.url = url
        self.name = name
        self.stale_s = stale_s
        """A pending mark older than this is taken for one whose job was never sent
        (its sender died between marking and sending) and is replaced."""
        self.redis: redis.Redis = redis.Redis.from_url(
            url, socket_timeout=_TIMEOUT_S, socket_connect_timeout=_TIMEOUT_S
        )
        self.channel = f"{name}:events"

    def _key(self, part: str) -> str:
        return f"{self.name}:{part}"

    # -- pending ----------------------------------------------------------

    def mark(self, session: str, view: str, since: float) -> bool:
        """Mark the view's job pending; False when one is pending already (send nothing).

        A mark older than ``stale_s`` does not count: without that, a process
        that died between marking and sending would leave the view without jobs
        for good. At worst its job is then sent twice, which the lease and the
        fold-set version make harmless.
        """
        now = time.time()
        value = json.dumps({"since": since, "marked": now})
        found = self.redis.eval(
            _MARK, 1, self._key("pending"), queue_field(session, view), value, now - self.stale_s
        )
        return bool(found)

    def unmark(self, session: str, view: str) -> None:
        """Undo ``mark`` when the job could not be sent."""
        self.redis.hdel(self._key("pending"), queue_field(session, view))

    def start(self, session: str, view: str, worker: str, since: float) -> float:
        """The job starts: not pending any more, running on ``worker``; the ``since`` it covers.

        A job redelivered after its worker died finds no pending mark and
        keeps the ``since`` it was sent with.
        """
        field = queue_field(session, view)
        with self.redis.pipeline() as pipe:
            pipe.hget(self._key("pending"), field)
            pipe.hdel(self._key("pending"), field)
            pending, _ = pipe.execute()
        if pending is not None:
            since = min(since, float(json.loads(pending)["since"]))
        running = json.dumps({"since": since, "worker": worker, "started": time.time()})
        self.redis.hset(self._key("running"), field, running)
        return since

    def finish(self, session: str, view: str, worker: str) -> None:
        """The job ended on ``worker`` (a job that took its place since is left alone)."""
        field = queue_field(session, view)
        raw = self.redis.hget(self._key("running"), field)
        if raw is not None and json.loads(raw).get("worker") == worker:
            self.redis.hdel(self._key("running"), field)

    # -- failures ---------------------------------------------------------

    def failed(self, session: str, view: str) -> int:
        """Count a failure in a row; the count so far."""
        return int(self.redis.hincrby(self._key("failing"), queue_field(session, view), 1))

    def rest(self, session: str, view: str, seconds: float) -> None:
        """No job of the view runs for ``seconds`` (it failed; the retry is sent)."""
        self.redis.hset(self._key("backoff"), queue_field(session, view), time.time() + seconds)

    def succeeded(self, session: str, view: str) -> None:
        field = queue_field(session, view)
        with self.redis.pipeline() as pipe:
            pipe.hdel(self._key("failing"), field)
            pipe.hdel(self._key("backoff"), field)
            pipe.execute()

    def resting(self, session: str, view: str) -> float:
        """Seconds the view still rests after its last failure (0 when it may run)."""
        until = self.redis.hget(self._key("backoff"), queue_field(session, view))
        return 0.0 if until is None else max(0.0, float(until) - time.time())

    def park(self, session: str, view: str, *, version: int, failures: int, reason: str) -> None:
        """Queue nothing more for the view until its configuration (``version``) changes."""
        field = queue_field(session, view)
        record = {"since": time.time(), "version": version, "failures": failures, "reason": reason}
        with self.redis.pipeline() as pipe:
            pipe.hset(self._key("parked"), field, json.dumps(record))
            pipe.hdel(self._key("failing"), field)
            pipe.hdel(self._key("backoff"), field)
            pipe.execute()

    def parked_at(self, session: str, view: str) -> int | None:
        """The configuration version the view was parked at, or None."""
        raw = self.redis.hget(self._key("parked"), queue_field(session, view))
        return None if raw is None else int(json.loads(raw)["version"])

    def unpark(self, session: str, view: str) -> bool:
        return bool(self.redis.hdel(self._key("parked"), queue_field(session, view)))

    # -- what the page shows ----------------------------------------------

    def state(self, session: str, view: str) -> JobState | None:
        """The view's job: running, pending, parked or failing (in that order), or None."""
        field = queue_field(session, view)
        with self.redis.pipeline() as pipe:
            for part in ("running", "pending", "parked", "failing"):
                pipe.hget(self._key(part), field)
            running, pending, parked, failing = pipe.execute()
        failures = int(failing) if failing is not None else 0
        if running is not None:
            record = json.loads(running)
            return JobState("running", record["since"], failures, worker=record["worker"])
        if pending is not None:
            return JobState("pending", json.loads(pending)["since"], failures)
        if parked is not None:
            record = json.loads(parked)
            return JobState("parked", record["since"], record["failures"], reason=record["reason"])
        if failures:
            return JobState("failing", time.time(), failures)
        return None

    def depth(self) -> int:
        """Jobs in Celery's list for this queue, waiting for a worker."""
        return int(self.redis.llen(self.name))

    def counts(self) -> dict[str, int]:
        """Views pending, running, failing and parked now."""
        with self.redis.pipeline() as pipe:
            for part in ("pending", "running", "failing", "parked"):
                pipe.hlen(self._key(part))
            found = pipe.execute()
        return dict(zip(("pending", "running", "failing", "parked"), map(int, found), strict=True))

    # -- pool-wide figures --------------------------------------------------

    def count(self, stat: str, by: int = 1) -> None:
        self.redis.hincrby(self._key("stats"), stat, by)

    def observe(self, seconds: float) -> None:
        """Record one append-to-commit latency."""
        bucket = next((str(b) for b in LATENCY_BUCKETS if seconds <= b), "+Inf")
        with self.redis.pipeline() as pipe:
            pipe.hincrby(self._key("latency"), bucket, 1)
            pipe.hincrbyfloat(self._key("latency"), "sum", seconds)
            pipe.execute()

    def stats(self) -> dict[str, int]:
        raw = self.redis.hgetall(self._key("stats"))
        found = {_text(k): int(v) for k, v in raw.items()}
        return {stat: found.get(stat, 0) for stat in STATS}

    def latency(self) -> tuple[list[tuple[str, int]], float]:
        """Cumulative ``(le, count)`` pairs ending with ``+Inf``, and the sum of seconds."""
        raw = {_text(k): v for k, v in self.redis.hgetall(self._key("latency")).items()}
        total = 0
        pairs = []
        for bucket in [*map(str, LATENCY_BUCKETS), "+Inf"]:
            total += int(raw.get(bucket, 0))
            pairs.append((bucket, total))
        return pairs, float(raw.get("sum", 0.0))

    def record(self, job: JobRecord) -> None:
        """Keep the job among the last ``JOBS_KEPT``."""
        with self.redis.pipeline() as pipe:
            pipe.lpush(self._key("jobs"), json.dumps(asdict(job)))
            pipe.ltrim(self._key("jobs"), 0, JOBS_KEPT - 1)
            pipe.execute()

    def jobs(self) -> list[JobRecord]:
        """The jobs kept, oldest first."""
        raw = self.redis.lrange(self._key("jobs"), 0, -1)
        return [JobRecord(**json.loads(item)) for item in reversed(raw)]

    # -- events -------------------------------------------------------------

    def publish(self, event: Event, **extra: Any) -> None:
        """Send the event to every listener; ``data`` gains ``extra`` and ``at`` (wall time)."""
        data = event.to_data()
        data["data"].update(extra, at=time.time())
        self.redis.publish(self.channel, json.dumps(data))

    def events(
        self,
        stop: Any,
        subscribed: Callable[[], None] = lambda: None,
        timeout_s: float = 1.0,
    ) -> Iterator[Event]:
        """The events published until ``stop.is_set()``; ``subscribed()`` is called each
        time the subscription is confirmed (once, then after each quiet reconnection).

        Raises ``redis.RedisError`` (while iterating) when Redis goes away.
        """
        pubsub = self.redis.pubsub()  # type: ignore[no-untyped-call]
        try:
            pubsub.subscribe(self.channel)
            while not stop.is_set():
                message = pubsub.get_message(timeout=timeout_s)
                if message is None:
                    continue
                if message["type"] == "subscribe":
                    subscribed()
                elif message["type"] == "message":
                    yield Event.from_data(json.loads(message["data"]))
        finally:
            pubsub.close()

    def clear(self) -> None:
        """Delete every key of this queue, Celery's list included (tests, benchmarks)."""
        parts = ("pending", "running", "failing", "backoff", "parked", "stats", "latency", "jobs")
        self.redis.delete(self.name, *(self._key(p) for p in parts))

    def close(self) -> None:
        self.redis.close()


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw
