"""Compaction on Celery workers: folds/s and latency at 1, 2 and 4 workers, SIGKILLs, bursts.

Real ``contextfold worker`` processes (``tests/workers_harness.py``) over
PostgreSQL on 127.0.0.1 (a fresh schema a phase) and a private
``redis-server`` (a fresh queue a phase; private, so its CPU and commands are
this bench's alone); this process is the API side: it appends and plans with
a ``CeleryRunner`` watching every view. Each view is ``rolling`` (a fold every
8 rounds once the first is made) on ``slow:0.2``: the offline stand-in
answering after 0.2 s, as a hosted model would.

1. Capacity, then latency, per configuration: ``--sessions`` (100), prefilled with
   3..10 rounds in turn so their folds come due evenly from the start; rounds
   (a user and an assistant message, one append) go round-robin.
   *Capacity*: ``--rate`` rounds a second (20 folds a second due) for
   ``--seconds``: more than any configuration folds, so its slots never idle;
   folds committed per second in the window is what it sustains. With it:
   jobs waiting at the window's end; model calls per fold, slot seconds per
   fold and their share in model calls; CPU of the workers, the schema's
   PostgreSQL backends, Redis and this process, and Redis commands; and from
   these, what bound it (the machine's CPU, PostgreSQL, the model wait, or the
   jobs' own part). Its latencies are not reported: past capacity they are
   queueing, and grow with the window's length.
   *Latency*: once the backlog is done, ``--fraction`` (a half) of that
   capacity is offered for ``--latency-seconds`` to as many fresh sessions,
   prefilled the same way (the capacity window leaves the first ones in step,
   each just folded, so their folds would come due in a burst). Here each
   round goes to a session picked at random after a random (exponential) gap,
   as independent users append: folds come due at random moments, and a job
   may wait for a slot as in a real pool at that load. Append to commit
   p50/p99, exact per job from the events: ``data["at"] - data["since"]`` of
   a job's first ``committed``, ``since`` being the append that made the fold
   due (what the pool's latency histogram observes). Each configuration is
   so measured at the same share of what it can do.
   A worker is ``--pool prefork --concurrency 1`` (a process per job: no GIL
   shared between jobs, and a job can be killed alone); one more
   configuration runs 4 threads in one worker.
2. Kills: SIGKILL the pool process running a job right after its ``started``
   event (the job is inside its 0.2 s model call); every ``--whole-every``-th
   kill (from the second; never with ``--quick``) takes the whole worker, main
   process and pool, and starts another. Figures: log messages lost, partial
   folds (ranges outside the log, overlapping active folds, quarantined folds,
   a render over budget), kills that landed mid-job, and views that got a
   ``committed`` from another process afterwards, with the time it took.
3. Burst: ``--burst`` appends to one view as fast as this process makes them,
   after the 4 workers' latency window. Figures: jobs sent, delivered, turned
   away by the lease, run; job steps that ran at the same time on different
   workers (from the events' worker and times).

Without PostgreSQL or ``redis-server`` it prints ``skipped`` and why (with
``--json``, ``{"skipped": true, "reason": ...}``) and exits 0.

    python bench/workers.py [--quick] [--json] [--rate ROUNDS_PER_S] [--seconds S]
        [--latency-seconds S] [--fraction SHARE]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import ROOT, parse_args, report

sys.path.insert(0, str(ROOT / "tests"))

import redis
from pg import SERVER, fresh_schema, url
from workers_harness import (
    Events,
    PrivateRedis,
    WorkerProcess,
    free_port,
    fresh_queue,
    wait_for,
    worker,
)

from contextfold import Memory
from contextfold.core.events import Event
from contextfold.core.messages import Message
from contextfold.memory.cycle import plan
from contextfold.memory.session import Session
from contextfold.memory.view import View
from contextfold.workers import CeleryRunner

MODEL = "slow:0.2"
MODEL_S = 0.2
BUDGET = 6000
SESSIONS, QUICK_SESSIONS = 100, 50
"""A window's sessions; at most that many jobs wait, so fewer make --quick's backlogs short."""
ROUNDS_PER_FOLD = 8
"""``rolling`` folds every 8 rounds."""
RATE = 160.0
"""Rounds a second over all sessions in the capacity window: 20 folds a second come due, more
than any configuration folds (4 slots fold at most 4 / 0.25 s), so its slots are never idle."""
SECONDS, QUICK_SECONDS = 20.0, 4.0
FRACTION = 0.5
"""The latency window's offered load, as a share of the capacity just measured: every
configuration is measured equally loaded, with room left for the capacity's noise."""
SEED = 11
"""Of the latency window's random appends: every run offers the same sequence."""
LATENCY_SECONDS, QUICK_LATENCY_SECONDS = 25.0, 4.0
KILLS, QUICK_KILLS = 20, 3
DRAIN_S, QUICK_DRAIN_S = 60.0, 30.0
WHOLE_EVERY = 4
RECOVERY_S, QUICK_RECOVERY_S = 150.0, 30.0
"""How long the killed views may take to be compacted again. A whole worker's job waits for
the visibility timeout and a surviving worker's sweep for unacknowledged messages (kombu's
default: every 10 s, scanning on every 10th, so up to about 100 s more)."""
BURST = 1000
LEASE_TTL_S = 2.0
VISIBILITY_S = 5.0
CONFIGS = (("prefork", 1, 1), ("prefork", 1, 2), ("prefork", 1, 4), ("threads", 4, 1))
"""(pool, concurrency, workers) measured; --quick leaves the threads one out."""
PARTS = ("workers", "postgres", "redis", "bench")
"""Where the CPU of a phase is counted (``bench``: this process, the API side)."""
ENDS = ("committed", "rejected", "failed")
"""Events that end a job step."""
FILLER = "the quarterly figures for the northern depot, checked against the ledger and the scans"


def round_of(sid: str, r: int) -> list[Message]:
    return [
        {"role": "user", "content": f"Round {r} of {sid}: check item {r * 7} and {FILLER}."},
        {"role": "assistant", "content": f"Item {r * 7} in {sid} is {r * 13} units; {FILLER}."},
    ]


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (nearest rank), to the millisecond; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 3)


@contextmanager
def runner_on(broker: str, queue: str, events: Events) -> Iterator[CeleryRunner]:
    runner = CeleryRunner(broker, queue=queue, settle_s=0.02, on_event=[events])
    try:
        if not runner.listening(30):
            raise RuntimeError("the runner does not hear the workers' event channel")
        yield runner
    finally:
        runner.stop()


def one_worker(
    database: str, broker: str, queue: str, pool: str = "prefork", concurrency: int = 1
) -> AbstractContextManager[WorkerProcess]:
    """A worker for the bench: short lease and visibility timeout, so kills end soon."""
    started: AbstractContextManager[WorkerProcess] = worker(
        database, queue, broker=broker, pool=pool, concurrency=concurrency,
        lease_ttl=LEASE_TTL_S, visibility_timeout=VISIBILITY_S,
    )  # fmt: skip
    return started


def start_workers(stack: ExitStack, count: int, *args: Any, **kwargs: Any) -> list[WorkerProcess]:
    """``count`` workers started side by side (each spends seconds importing), left on ``stack``."""
    managers = [one_worker(*args, **kwargs) for _ in range(count)]
    with ThreadPoolExecutor(count) as threads:
        futures = [threads.submit(m.__enter__) for m in managers]
    for manager, future in zip(managers, futures, strict=True):
        if future.exception() is None:
            stack.push(manager)
    return [f.result() for f in futures]


# -- what a phase costs -----------------------------------------------------------

TICK = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> float | None:
    """CPU seconds (user + system) of one process; None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the machine since boot, all cores."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values) - idle) / TICK, sum(values) / TICK


@dataclass
class Meter:
    """What one phase cost: CPU of each part, and Redis commands.

    PostgreSQL and Redis are shared with other work on this machine, so only
    the schema's own backends (``application_name``) are timed, and the broker
    is a private Redis server whose every command is this bench's.
    """

    schema: str
    broker: PrivateRedis
    pool: list[WorkerProcess]
    start: dict[str, dict[Any, float]] = field(default_factory=dict)

    def _pids(self) -> dict[str, list[int]]:
        import psycopg

        with psycopg.connect(SERVER, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                (f"contextfold {self.schema}",),
            ).fetchall()
        assert self.broker.proc is not None
        return {
            "workers": [p for w in self.pool for p in (w.pid, *w.pool())],
            "postgres": [int(pid) for (pid,) in rows],
            "redis": [self.broker.proc.pid],
        }

    def sample(self) -> dict[str, dict[Any, float]]:
        busy, total = machine_busy()
        client = redis.Redis(port=self.broker.port)
        info = client.info("stats")
        client.close()
        found: dict[str, dict[Any, float]] = {
            part: {pid: cpu for pid in pids if (cpu := cpu_of(pid)) is not None}
            for part, pids in self._pids().items()
        }
        found["bench"] = {0: sum(os.times()[:2])}
        found["machine"] = {"busy": busy, "total": total}
        found["redis_commands"] = {0: float(info["total_commands_processed"])}
        return found

    def begin(self) -> None:
        self.start = self.sample()

    def spent(self) -> dict[str, float]:
        """Each part's growth since ``begin``; a process that came or went counts what was seen."""
        now = self.sample()
        out = {}
        for part, values in now.items():
            before = self.start.get(part, {})
            out[part] = sum(v - before.get(k, 0.0) for k, v in values.items())
        out["machine_total"] = now["machine"]["total"] - self.start["machine"]["total"]
        out["machine"] = now["machine"]["busy"] - self.start["machine"]["busy"]
        return out


# -- 1. throughput ---------------------------------------------------------------


def prepare(
    memory: Memory, count: int, prefix: str
) -> tuple[list[Session], dict[str, list[Message]]]:
    """Sessions with a rolling view each, prefilled with 3..10 rounds in turn: appended
    round-robin, one in 8 comes due each time round (a first fold at 11 rounds, then one
    every 8), so folds come due evenly from the start."""
    sessions, appended = [], {}
    for i in range(count):
        session = memory.session(f"{prefix}{i}", system="You keep the depot's books.")
        rounds = 3 + i % ROUNDS_PER_FOLD
        appended[session.id] = [m for r in range(rounds) for m in round_of(session.id, r)]
        session.extend(appended[session.id])
        session.view("default", preset="rolling", budget=BUDGET, model=MODEL)
        sessions.append(session)
    return sessions, appended


def job_latencies(events: Events, t0: float, t1: float) -> list[float]:
    """``at - since`` of the first ``committed`` of each job (worker, since) sent in the window."""
    seen: set[tuple[str, float]] = set()
    out = []
    committed = [e for e in events.of("committed") if t0 <= float(e.data["since"]) <= t1]
    for e in sorted(committed, key=lambda e: e.data["at"]):
        job = (str(e.data["worker"]), float(e.data["since"]))
        if job not in seen:
            seen.add(job)
            out.append(float(e.data["at"]) - float(e.data["since"]))
    return out


@dataclass(frozen=True)
class Window:
    """A stretch of rounds appended at a steady rate."""

    t0: float
    t1: float
    rounds: int
    seconds: float

    def folds(self, events: Events) -> list[Event]:
        """The folds committed while it ran."""
        return [e for e in events.of("committed") if self.t0 <= float(e.data["at"]) <= self.t1]


def drive(
    sessions: Sequence[Session],
    appended: dict[str, list[Message]],
    rate: float,
    seconds: float,
    rng: random.Random | None = None,
) -> Window:
    """Append ``rate`` rounds a second for ``seconds``: round-robin at even gaps; with ``rng``,
    each to a session picked at random after a random (exponential) gap, as independent
    users append, so folds come due at random moments too."""
    made = 0
    t0, began = time.time(), time.monotonic()
    due = began
    while due - began < seconds:
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        session = sessions[made % len(sessions)] if rng is None else rng.choice(sessions)
        messages = round_of(session.id, len(appended[session.id]) // 2)
        session.extend(messages)
        appended[session.id] += messages
        made += 1
        due += 1 / rate if rng is None else rng.expovariate(rate)
    return Window(t0, time.time(), made, time.monotonic() - began)


def bound_by(
    capacity: float, due: float, model_share: float, cpu: dict[str, float], seconds: float
) -> str:
    """What held folds/s at ``capacity`` while ``due`` a second came due, from where time went.

    Below 90% of what was due the slots were never idle, so a slot's time is
    model calls (``model_share``) or the job's own part (CPU, PostgreSQL and
    Redis round trips). The machine's CPU counts first: at 90% busy the
    jobs' CPU parts wait for a core. Then PostgreSQL, when the schema's
    backends take half the cores; then the model, when it has most of a slot.
    """
    if capacity >= 0.9 * due:
        return "nothing: the workers kept up with what came due"
    if cpu["machine"] >= 0.9 * cpu["machine_total"]:
        return "CPU: the machine was busy, the jobs' own parts waited for a core"
    if cpu["postgres"] >= 0.5 * (os.cpu_count() or 1) * seconds:
        return "PostgreSQL: the schema's backends took half the cores"
    if model_share >= 0.5:
        return "the model wait: the slots spent most of their time in model calls"
    return "the jobs' own part: CPU and round trips to PostgreSQL and Redis between model calls"


def throughput(
    pool: str, concurrency: int, count: int, broker: PrivateRedis, args: argparse.Namespace
) -> dict[str, Any]:
    """One configuration's capacity, then its latency within it: figures keyed ``<label>_...``.

    After the 4 workers' latency window, the burst.
    """
    label = f"w{count}" if pool == "prefork" else f"threads{concurrency}"
    slots = count * concurrency
    figures: dict[str, Any] = {}
    with fresh_schema() as schema, fresh_queue(broker.url) as queue, ExitStack() as stack:
        database = url(schema)
        memory = Memory(database)
        sessions, appended = prepare(memory, args.sessions, "bench/t")
        fresh, more = prepare(memory, args.sessions, "bench/l")
        appended |= more
        events = Events()
        procs = start_workers(stack, count, database, broker.url, queue, pool, concurrency)
        runner = stack.enter_context(runner_on(broker.url, queue, events))
        for session in sessions:
            runner.watch(session.view("default"))

        def drained() -> bool:
            return wait_for(lambda: sum(runner.queue.counts().values()) == 0, args.drain)

        meter = Meter(schema, broker, procs)
        meter.begin()
        full = drive(sessions, appended, args.rate, args.seconds)
        cpu = meter.spent()
        backlog = runner.queue.counts()["pending"]
        figures[f"{label}_saturated_drained"] = drained()
        capacity = len(full.folds(events)) / full.seconds
        offered = args.fraction * capacity
        for session in fresh:
            runner.watch(session.view("default"))
        rate = offered * ROUNDS_PER_FOLD
        calm = drive(fresh, appended, rate, args.latency_seconds, random.Random(SEED))
        waiting = runner.queue.counts()["pending"]
        figures[f"{label}_latency_drained"] = drained()
        figures |= {f"{label}_{k}": v for k, v in damage(memory, appended).items()}
        if pool == "prefork" and count == 4:
            figures |= burst(memory, runner, events, args.burst)
        memory.close()
    folds = full.folds(events)
    calls = sum(int((e.usage or {}).get("calls", 0)) for e in folds)
    model_share = calls * MODEL_S / (full.seconds * slots)
    due = full.rounds / full.seconds / ROUNDS_PER_FOLD
    latencies = job_latencies(events, calm.t0, calm.t1)
    offered_due = calm.rounds / calm.seconds / ROUNDS_PER_FOLD
    bound = bound_by(capacity, due, model_share, cpu, full.seconds)
    print(
        f"{label}: capacity {capacity:.2f} folds/s of {due:.1f} due ({backlog} jobs waiting at"
        f" the end), bound by {bound}; slots {model_share:.0%} in model calls, machine CPU"
        f" {cpu['machine'] / cpu['machine_total']:.0%} busy, cores: workers"
        f" {cpu['workers'] / full.seconds:.2f}, PostgreSQL {cpu['postgres'] / full.seconds:.2f},"
        f" Redis {cpu['redis'] / full.seconds:.2f}, API side {cpu['bench'] / full.seconds:.2f}"
        f"\n{label}: append to commit p50 {percentile(latencies, 0.5)} s,"
        f" p99 {percentile(latencies, 0.99)} s at {offered_due:.2f} folds/s offered"
        f" ({args.fraction:.0%} of capacity, drawn at random), {len(latencies)} jobs",
        flush=True,
    )
    return {
        f"{label}_rounds_per_s": round(full.rounds / full.seconds, 1),
        f"{label}_due_folds_per_s": round(due, 2),
        f"{label}_capacity_folds_per_s": round(capacity, 2),
        f"{label}_bound_by": bound.split(":")[0],
        f"{label}_saturated_jobs_waiting_at_end": backlog,
        f"{label}_model_calls_per_fold": round(calls / max(len(folds), 1), 2),
        f"{label}_slot_s_per_fold": round(slots * full.seconds / max(len(folds), 1), 3),
        f"{label}_model_share_of_slots": round(model_share, 2),
        f"{label}_machine_cpu_share": round(cpu["machine"] / cpu["machine_total"], 2),
        f"{label}_worker_cpu_ms_per_fold": round(cpu["workers"] * 1000 / max(len(folds), 1), 1),
        **{f"{label}_cores_{k}": round(cpu[k] / full.seconds, 2) for k in PARTS},
        f"{label}_redis_commands_per_s": round(cpu["redis_commands"] / full.seconds),
        f"{label}_offered_folds_per_s": round(offered_due, 2),
        f"{label}_served_folds_per_s": round(len(calm.folds(events)) / calm.seconds, 2),
        f"{label}_latency_p50_s": percentile(latencies, 0.5),
        f"{label}_latency_p99_s": percentile(latencies, 0.99),
        f"{label}_latency_jobs": len(latencies),
        f"{label}_latency_jobs_waiting_at_end": waiting,
        **figures,
    }


# -- what must hold after every phase --------------------------------------------


def damage(memory: Memory, appended: dict[str, list[Message]]) -> dict[str, int]:
    """Messages lost from the logs and partial folds, over the sessions of ``appended``."""
    lost = partial = 0
    for sid, messages in appended.items():
        logged = [m["content"] for m in memory.session(sid).history()]
        lost += sum(1 for m in messages if m["content"] not in logged)
        lost += abs(len(logged) - 1 - len(messages))  # duplicates, or a message of no one's
        store = memory.store
        last = store.last_seq(sid)
        folds = store.folds(sid, "default", include_superseded=True)
        partial += sum(1 for f in folds if not 1 <= f.start <= f.end <= last)
        active = sorted((f for f in folds if f.superseded_by is None), key=lambda f: f.start)
        partial += sum(1 for a, b in itertools.pairwise(active) if b.start <= a.end)
        partial += len(store.quarantined(sid, "default"))
        rendered = memory.session(sid).view("default").render_report()
        partial += int(rendered.tokens > BUDGET)
    return {"messages_lost": lost, "partial_folds": partial}


def idle(runner: CeleryRunner, views: Sequence[View]) -> bool:
    """No job pending or running, and none to plan, for any of ``views``."""
    if any(runner.job(v) is not None for v in views):
        return False
    return all(plan(v.require_pipeline().strategies, v.state()) is None for v in views)


# -- 2. kills --------------------------------------------------------------------


def committed_after(events: Events, sid: str, after: float, not_by: str) -> list[float]:
    """Times of the view's commits after ``after`` by any process but ``not_by``."""
    return [
        float(e.data["at"])
        for e in events.of("committed", session=sid)
        if float(e.data["at"]) > after and e.data["worker"] != not_by
    ]


@dataclass(frozen=True)
class Kill:
    session: str
    owner: str
    """The killed process's worker id (host:pid:rand)."""
    at: float
    whole: bool


def kill_running(
    sid: str,
    events: Events,
    pool: list[WorkerProcess],
    whole: bool,
    restart: Callable[[], WorkerProcess],
) -> Kill:
    """Wait for the view's job to start, then SIGKILL the process running it (or its worker)."""
    if not wait_for(lambda: events.of("started", session=sid), 60):
        raise RuntimeError(f"no job started for {sid}")
    owner = str(events.of("started", session=sid)[0].data["worker"])
    pid = int(owner.split(":")[1])
    killed = Kill(sid, owner, time.time(), whole)
    if whole:
        holder = next(w for w in pool if pid in w.pool())
        holder.kill()
        pool.remove(holder)
        pool.append(restart())
    else:
        os.kill(pid, signal.SIGKILL)
    return killed


def kills(broker: PrivateRedis, args: argparse.Namespace) -> dict[str, Any]:
    """SIGKILL the process running a job, ``args.kills`` times; then check what was kept.

    Each view starts with 10 rounds (one short of rolling's trigger); one more
    round sends its job, and the process running it is killed right after its
    ``started`` event, inside the 0.2 s model call. Every ``args.whole_every``-th
    kill takes the whole worker, replaced at once. The next kill does not wait
    for the last view's recovery: they are counted at the end.
    """
    done: list[Kill] = []
    with fresh_schema() as schema, fresh_queue(broker.url) as queue, ExitStack() as stack:
        database = url(schema)
        memory = Memory(database)
        events = Events()
        appended: dict[str, list[Message]] = {}
        sessions = [
            memory.session(f"bench/k{i}", system="You keep the depot's books.")
            for i in range(args.kills)
        ]
        views = []
        for session in sessions:
            appended[session.id] = [m for r in range(10) for m in round_of(session.id, r)]
            session.extend(appended[session.id])
            views.append(session.view("default", preset="rolling", budget=BUDGET, model=MODEL))
        pool = start_workers(stack, 2, database, broker.url, queue)
        runner = stack.enter_context(runner_on(broker.url, queue, events))
        for view in views:
            runner.watch(view)

        def restart() -> WorkerProcess:
            return stack.enter_context(one_worker(database, broker.url, queue))

        for i, session in enumerate(sessions):
            more = round_of(session.id, 10)
            appended[session.id] += more
            session.extend(more)
            whole = args.whole_every > 0 and i % args.whole_every == 1
            done.append(kill_running(session.id, events, pool, whole, restart))
        recovery_s = args.recovery
        if not wait_for(lambda: idle(runner, views), recovery_s):
            print(f"kills: views still busy after {recovery_s} s")
        found = damage(memory, appended)
        memory.close()
    waits = {}
    for kill in done:
        after = committed_after(events, kill.session, kill.at, kill.owner)
        if after:
            waits[kill] = min(after) - kill.at
    killed_commits = {
        k
        for k in done
        if any(e.data["worker"] == k.owner for e in events.of("committed", session=k.session))
    }
    return {
        "kill_lease_ttl_s": LEASE_TTL_S,
        "kill_visibility_s": VISIBILITY_S,
        "kills": len(done),
        "kills_whole_worker": sum(1 for k in done if k.whole),
        "kills_mid_job": len(done) - len(killed_commits),
        "kills_completed_after_redelivery": len(waits),
        "kill_messages_lost": found["messages_lost"],
        "kill_partial_folds": found["partial_folds"],
        "kill_to_commit_pool_p50_s": percentile([w for k, w in waits.items() if not k.whole], 0.5),
        "kill_to_commit_pool_max_s": percentile([w for k, w in waits.items() if not k.whole], 1),
        "kill_to_commit_whole_p50_s": percentile([w for k, w in waits.items() if k.whole], 0.5),
        "kill_to_commit_whole_max_s": percentile([w for k, w in waits.items() if k.whole], 1),
    }


# -- 3. burst --------------------------------------------------------------------


def overlapping_steps(events: Events, sid: str) -> int:
    """Pairs of job steps on one view that ran at the same time on different workers."""
    ends = [e for e in events.of(session=sid) if e.kind in ENDS]
    steps = []
    for start in events.of("started", session=sid):
        began, owner = float(start.data["at"]), start.data["worker"]
        finish = [float(e.data["at"]) for e in ends if e.data.get("worker") == owner]
        steps.append((began, min((t for t in finish if t >= began), default=began), owner))
    return sum(
        1
        for i, a in enumerate(steps)
        for b in steps[i + 1 :]
        if a[2] != b[2] and a[0] < b[1] and b[0] < a[1]
    )


def burst(memory: Memory, runner: CeleryRunner, events: Events, count: int) -> dict[str, Any]:
    """``count`` appends to one fresh view as fast as they go; the jobs they cause."""
    session = memory.session("bench/burst", system="You keep the depot's books.")
    view = session.view("default", preset="rolling", budget=BUDGET, model=MODEL)
    runner.watch(view)
    before, sent = runner.queue.stats(), runner.sent
    messages = [m for r in range(count // 2) for m in round_of(session.id, r)]
    began = time.monotonic()
    for message in messages:
        session.append(message)
    appended_s = time.monotonic() - began
    settled = wait_for(lambda: idle(runner, [view]), 120)
    settled_s = time.monotonic() - began - appended_s
    after = runner.queue.stats()
    started = events.of("started", session=session.id)
    found = damage(memory, {session.id: messages})
    return {
        "burst_appends": len(messages),
        "burst_appends_s": round(appended_s, 2),
        "burst_settled": settled,
        "burst_settle_s_after_last_append": round(settled_s, 2),
        "burst_jobs_sent": runner.sent - sent,
        "burst_jobs_delivered": after["started"] - before["started"],
        "burst_jobs_lease_busy": after["busy"] - before["busy"],
        "burst_jobs_ran_cycle": after["started"]
        - before["started"]
        - after["busy"]
        + before["busy"],
        "burst_job_steps": len(started),
        "burst_folds_committed": len(events.of("committed", session=session.id)),
        "burst_concurrent_steps": overlapping_steps(events, session.id),
        "burst_messages_lost": found["messages_lost"],
        "burst_partial_folds": found["partial_folds"],
    }


def main() -> None:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--rate", type=float, default=RATE, help="rounds/s over all sessions")
        parser.add_argument("--seconds", type=float, help="length of a capacity window")
        parser.add_argument("--latency-seconds", type=float, help="length of a latency window")
        parser.add_argument(
            "--fraction",
            type=float,
            default=FRACTION,
            help="the latency window's load, as a share of the capacity measured",
        )
        parser.add_argument(
            "--sessions", type=int, help=f"sessions a window ({SESSIONS}; quick {QUICK_SESSIONS})"
        )
        parser.add_argument(
            "--drain", type=float, help="seconds to wait for the jobs left after a window"
        )
        parser.add_argument("--burst", type=int, default=BURST, help="appends in the burst")
        parser.add_argument("--kills", type=int, help=f"SIGKILLs ({KILLS}; quick {QUICK_KILLS})")
        parser.add_argument(
            "--whole-every",
            type=int,
            help=f"kill a whole worker every N kills ({WHOLE_EVERY}; quick 0: never)",
        )

    args = parse_args(__doc__.splitlines()[0], options)
    quick = args.quick
    args.seconds = args.seconds or (QUICK_SECONDS if quick else SECONDS)
    args.sessions = args.sessions or (QUICK_SESSIONS if quick else SESSIONS)
    args.latency_seconds = args.latency_seconds or (
        QUICK_LATENCY_SECONDS if quick else LATENCY_SECONDS
    )
    args.kills = args.kills or (QUICK_KILLS if quick else KILLS)
    args.drain = args.drain if args.drain is not None else (QUICK_DRAIN_S if quick else DRAIN_S)
    args.whole_every = (
        args.whole_every if args.whole_every is not None else (0 if quick else WHOLE_EVERY)
    )
    args.recovery = RECOVERY_S if args.whole_every else QUICK_RECOVERY_S
    missing = missing_service()
    if missing:
        print(f"skipped: {missing}")
        if args.json:
            print(json.dumps({"skipped": True, "reason": missing}))
        return
    figures: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "load_1m_before": os.getloadavg()[0],
        "model": MODEL,
        "sessions": args.sessions,
        "capacity_window_s": args.seconds,
        "latency_window_s": args.latency_seconds,
        "latency_load_share_of_capacity": args.fraction,
    }
    broker = PrivateRedis(free_port())
    broker.start()
    try:
        for pool, concurrency, count in CONFIGS:
            if quick and pool == "threads":
                continue
            began = time.monotonic()
            figures |= throughput(pool, concurrency, count, broker, args)
            print(f"{pool} x{concurrency} on {count}: {time.monotonic() - began:.1f} s", flush=True)
        began = time.monotonic()
        figures |= kills(broker, args)
        print(f"kills: {time.monotonic() - began:.1f} s", flush=True)
    finally:
        broker.stop()
    figures["load_1m_after"] = os.getloadavg()[0]
    report(figures, args.json)


def missing_service() -> str | None:
    """Why the bench cannot run here (PostgreSQL down, no ``redis-server``), or None."""
    import psycopg

    try:
        psycopg.connect(SERVER, connect_timeout=3).close()
    except psycopg.Error as exc:
        return f"PostgreSQL at {SERVER} does not answer: {exc}"
    if shutil.which("redis-server") is None:
        return "redis-server is not installed (apt-get install redis-server)"
    return None


if __name__ == "__main__":
    main()
