"""The worker path's pieces: the Redis keys (``WorkQueue``, on a real Redis), the pauses
(``WorkerSettings``), what refuses to go to a worker, and the command's arguments."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from workers_harness import REDIS, fresh_queue, require_redis, turn, wait_for

from contextfold.cli import main
from contextfold.core.errors import InvalidInput
from contextfold.core.events import Event
from contextfold.llm.offline import OfflineModel
from contextfold.memory.session import Memory
from contextfold.strategies.extractive import ExtractiveSummary
from contextfold.strategies.pipeline import Pipeline
from contextfold.workers import CeleryRunner, WorkQueue, celery_app
from contextfold.workers import task as task_module
from contextfold.workers.app import restore_interval
from contextfold.workers.queue import JOBS_KEPT, JobRecord, JobState
from contextfold.workers.runner import check_portable
from contextfold.workers.task import Worker, WorkerSettings


@pytest.fixture
def queue() -> Iterator[WorkQueue]:
    require_redis()
    with fresh_queue() as name:
        work = WorkQueue(REDIS, name)
        yield work
        work.close()


def test_a_pending_mark_whose_job_was_never_sent_goes_stale() -> None:
    """A sender that died between marking and sending must not leave the view jobless."""
    require_redis()
    with fresh_queue() as name:
        work = WorkQueue(REDIS, name, stale_s=0.3)
        assert work.mark("s", "v", since=1.0)
        assert not work.mark("s", "v", since=2.0)
        time.sleep(0.4)
        assert work.mark("s", "v", since=3.0)
        assert work.state("s", "v") == JobState("pending", 3.0)
        assert not work.mark("s", "v", since=4.0)
        work.close()


def test_a_view_is_marked_pending_once_until_its_job_starts(queue: WorkQueue) -> None:
    assert queue.mark("s", "v", since=100.0)
    assert not queue.mark("s", "v", since=200.0)
    assert queue.state("s", "v") == JobState("pending", 100.0)
    queue.unmark("s", "v")
    assert queue.state("s", "v") is None
    assert queue.mark("s", "v", since=300.0)
    # The job starts: no longer pending (an append may send the next), and it covers the
    # first append of the mark or of its own message, whichever came first.
    assert queue.start("s", "v", "host:1:a", since=350.0) == 300.0
    assert queue.counts() == {"pending": 0, "running": 1, "failing": 0, "parked": 0}
    assert queue.mark("s", "v", since=400.0)
    assert queue.state("s", "v") == JobState("running", 300.0, worker="host:1:a")
    # A redelivered job that finds no mark keeps its own since.
    assert queue.start("s", "v", "host:2:b", since=250.0) == 250.0
    queue.finish("s", "v", "host:1:a")  # the job that took its place is left alone
    assert queue.state("s", "v").worker == "host:2:b"  # type: ignore[union-attr]
    queue.finish("s", "v", "host:2:b")
    assert queue.state("s", "v") is None


def test_failures_in_a_row_rest_the_view_and_park_it(queue: WorkQueue) -> None:
    assert [queue.failed("s", "v"), queue.failed("s", "v")] == [1, 2]
    state = queue.state("s", "v")
    assert state is not None and (state.state, state.failures) == ("failing", 2)
    assert queue.resting("s", "v") == 0.0
    queue.rest("s", "v", 30.0)
    assert 29.0 < queue.resting("s", "v") <= 30.0
    queue.succeeded("s", "v")
    assert queue.state("s", "v") is None and queue.resting("s", "v") == 0.0
    queue.failed("s", "v")
    queue.rest("s", "v", 30.0)
    queue.park("s", "v", version=4, failures=3, reason="the model failed")
    assert queue.parked_at("s", "v") == 4
    parked = queue.state("s", "v")
    assert parked is not None and parked.state == "parked"
    assert (parked.failures, parked.reason) == (3, "the model failed")
    assert queue.resting("s", "v") == 0.0 and queue.counts()["failing"] == 0
    assert queue.unpark("s", "v") and not queue.unpark("s", "v")
    assert queue.parked_at("s", "v") is None


def test_figures_are_pool_wide_counters_and_a_cumulative_histogram(queue: WorkQueue) -> None:
    queue.count("enqueued")
    queue.count("committed", 3)
    stats = queue.stats()
    assert (stats["enqueued"], stats["committed"], stats["parked"]) == (1, 3, 0)
    for seconds in (0.01, 0.3, 0.3, 1000.0):
        queue.observe(seconds)
    pairs, total = queue.latency()
    buckets = dict(pairs)
    assert (buckets["0.05"], buckets["0.25"], buckets["0.5"], buckets["300.0"]) == (1, 1, 3, 3)
    assert pairs[-1] == ("+Inf", 4) and total == pytest.approx(1000.61)


def test_the_jobs_that_held_a_lease_are_kept_oldest_first_up_to_a_limit(
    queue: WorkQueue,
) -> None:
    for i in range(JOBS_KEPT + 2):
        queue.record(JobRecord("s", "v", f"w{i}", float(i), i + 0.5, "done", 1))
    jobs = queue.jobs()
    assert len(jobs) == JOBS_KEPT
    assert (jobs[0].worker, jobs[-1].worker) == ("w2", f"w{JOBS_KEPT + 1}")
    assert jobs[-1] == JobRecord(
        "s", "v", f"w{JOBS_KEPT + 1}", JOBS_KEPT + 1.0, JOBS_KEPT + 1.5, "done", 1
    )
    queue.clear()
    assert queue.jobs() == [] and queue.stats()["enqueued"] == 0


def test_events_reach_a_subscriber_with_the_worker_and_the_wall_time(queue: WorkQueue) -> None:
    stop = threading.Event()
    subscribed: list[bool] = []
    heard: list[Event] = []

    def listen() -> None:
        for event in queue.events(stop, lambda: subscribed.append(True), timeout_s=0.05):
            heard.append(event)

    listener = threading.Thread(target=listen)
    listener.start()
    try:
        assert wait_for(lambda: subscribed, 10)
        sent = Event("committed", "s", "v", "rolling", 2, 9, usage={"calls": 1}, data={"x": 1})
        queue.publish(sent, worker="host:1:a")
        assert wait_for(lambda: heard, 10)
    finally:
        stop.set()
        listener.join(10)
    (got,) = heard
    assert (got.kind, got.session, got.view, got.start, got.end) == ("committed", "s", "v", 2, 9)
    assert got.usage == {"calls": 1}
    assert got.data["x"] == 1 and got.data["worker"] == "host:1:a" and got.data["at"] > 0
    assert subscribed == [True]


def test_pauses_double_and_stay_under_their_caps() -> None:
    settings = WorkerSettings("memory://", "q", backoff_s=0.2, backoff_max_s=1.0)
    assert [settings.backoff(n) for n in (1, 2, 3, 4, 5)] == [0.2, 0.4, 0.8, 1.0, 1.0]
    busy = WorkerSettings("memory://", "q", retry_s=1.0, lease_ttl_s=5.0)
    assert [busy.busy_pause(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 5.0]
    # A waiting job is held unacknowledged: no pause reaches half the visibility timeout.
    short = WorkerSettings("memory://", "q", backoff_s=2.0, lease_ttl_s=60, visibility_timeout_s=6)
    assert short.backoff(5) == 3.0 and short.busy_pause(9) == 3.0


def test_a_dead_workers_jobs_are_swept_back_well_within_the_visibility_timeout() -> None:
    assert [restore_interval(s) for s in (0.5, 5.0, 30.0, 600.0)] == [1, 1, 6, 10]
    options = celery_app(REDIS, "q", visibility_timeout_s=5.0).conf.broker_transport_options
    assert options["visibility_timeout"] == 5.0
    assert (options["unacked_restore_interval"], options["unacked_restore_throttle"]) == (1, 1)


@pytest.mark.parametrize(
    ("broker", "queue_name", "field"),
    [
        ("amqp://guest@localhost//", "contextfold", "broker"),
        ("127.0.0.1:6379", "contextfold", "broker"),
        (REDIS, "", "queue"),
        (REDIS, "jobs for me", "queue"),
        (REDIS, "a/b", "queue"),
    ],
)
def test_the_celery_app_refuses_what_is_not_a_redis_broker_or_a_queue_name(
    broker: str, queue_name: str, field: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        celery_app(broker, queue_name)
    assert caught.value.field == field


def test_only_views_a_worker_can_rebuild_from_the_store_are_sent() -> None:
    memory = Memory()
    session = memory.session("s", system="sys")
    stored = session.view("stored", preset="rolling", budget=500, model="slow:0.1")
    check_portable(stored)
    local = session.view("local", pipeline=Pipeline([ExtractiveSummary()]), local=True)
    with_llm = session.view("llm", preset="rolling", llm=OfflineModel())
    filtered = session.view("filtered", preset="rolling", filter=lambda message: True)
    for view, field in ((local, "local"), (with_llm, "llm"), (filtered, "filter")):
        with pytest.raises(InvalidInput) as caught:
            check_portable(view)
        assert caught.value.field == field
    require_redis()
    with fresh_queue() as name:
        runner = CeleryRunner(REDIS, queue=name)
        try:
            with pytest.raises(InvalidInput, match="model object"):
                runner.watch(with_llm)
            assert runner.watched() == []
        finally:
            runner.stop()


def test_appends_that_need_no_job_do_not_count_toward_a_jobs_latency() -> None:
    """A job's ``since`` (its append-to-commit latency) starts at the appends that made
    it needed, not at the first of the many before them that planned nothing."""
    require_redis()
    memory = Memory()
    session = memory.session("s", system="You are helpful.")
    view = session.view("default", preset="rolling", budget=2000)
    with fresh_queue() as name:
        runner = CeleryRunner(REDIS, queue=name, settle_s=0.0)
        try:
            runner.watch(view)
            for i in range(200):
                began = time.time()
                for message in turn(i):
                    session.append(message)
                assert runner.wait_idle(10)
                if runner.job(view) is not None:
                    break
            state = runner.job(view)
            assert i > 1 and state is not None and state.state == "pending"
            assert state.since >= began
        finally:
            runner.stop()


def sent(queue: WorkQueue) -> list[tuple[dict[str, Any], int]]:
    """The jobs in Celery's list for the queue, newest first: kwargs, seconds until due."""
    found: list[tuple[dict[str, Any], int]] = []
    for raw in queue.redis.lrange(queue.name, 0, -1):
        message = json.loads(raw)
        _, kwargs, _ = json.loads(base64.b64decode(message["body"]))
        due = datetime.fromisoformat(message["headers"]["eta"]).timestamp() - time.time()
        found.append((kwargs, round(due)))
    return found


def run_worker(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    argv = ["worker", "--database", "memory://", "--broker", REDIS, *extra]
    code = main(argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (("--concurrency", "0"), "concurrency"),
        (("--max-failures", "0"), "max_failures"),
        (("--lease-ttl", "0"), "lease_ttl"),
        (("--backoff", "-1"), "backoff"),
        (("--visibility-timeout", "0"), "visibility_timeout"),
        (("--broker", "amqp://guest@localhost//"), "broker"),
        (("--queue", "two words"), "queue"),
        (("--plugin", "contextfold.no_such_plugin"), "plugin"),
    ],
)
def test_worker_arguments_that_cannot_work_exit_2_naming_the_field(
    capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], field: str
) -> None:
    code, err = run_worker(capsys, *extra)
    assert code == 2
    assert f"field '{field}'" in " ".join(err.split())


def test_worker_arguments_of_the_wrong_type_are_refused_by_the_parser(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, err = run_worker(capsys, "--concurrency", "many")
    assert code == 2 and "--concurrency" in err
    code, err = run_worker(capsys, "--pool", "gevent")
    assert code == 2 and "--pool" in err


def test_a_workers_job_settles_as_failed_resting_parked_or_busy(
    tmp_path: Path, test_models: None
) -> None:
    """One pool process's job, run here on a SQLite file: a failure is counted and resent
    after a pause, a job that comes during the pause waits it out, a parked view's job is
    dropped, and a view whose lease is held is resent with a growing pause."""
    require_redis()
    database = f"sqlite:///{tmp_path / 'store.db'}"
    memory = Memory(database)
    session = memory.session("s", system="You are helpful.")
    view = session.view("v", preset="rolling", budget=500, model="failing")
    for i in range(30):
        session.extend(turn(i))
    with fresh_queue() as name:
        settings = WorkerSettings(database, name, backoff_s=20.0, max_failures=2)
        app = celery_app(REDIS, name)
        worker = Worker(settings, REDIS)
        queue = worker.queue

        def job(busy: int = 0) -> str:
            outcome, since = worker.run("s", "v", time.time())
            worker.settle(app, "s", "v", outcome, since, busy)
            return outcome.kind

        assert job() == "failed"
        assert (queue.state("s", "v").state, queue.depth()) == ("pending", 1)  # type: ignore[union-attr]
        # The 20 s pause less what has passed since: seconds on a machine busy with the suite.
        assert 10.0 < queue.resting("s", "v") <= 20.0
        # The resent job (or an append's) comes early: it waits, and sends itself again.
        assert job() == "resting" and queue.depth() == 2
        assert queue.stats()["failed"] >= 1 and queue.stats()["retried"] == 1
        queue.rest("s", "v", 0.0)
        assert job() == "idle"  # the rescue folded: nothing to do proves nothing either way
        for i in range(30, 60):
            session.extend(turn(i))
        assert job() == "failed" and queue.parked_at("s", "v") == view.version
        assert job() == "parked" and queue.depth() == 2  # dropped, nothing sent
        queue.unpark("s", "v")
        assert memory.store.acquire_lease("s", "v", "someone else", 30.0)
        assert job(busy=3) == "busy" and queue.stats()["busy"] == 1 and queue.depth() == 3
        # The messages sent: the retry and the resting job's resend wait out the 20 s pause,
        # the busy one waits longer than the last (1 s doubled at each busy try in a row).
        (busy, waits), (rested, waited), (retry, pause) = sent(queue)
        assert (busy["busy"], rested.get("busy"), retry.get("busy")) == (4, None, None)
        assert waits == settings.busy_pause(4) == 8.0
        assert pause == 20 and 0 < waited <= 20
        assert [j.outcome for j in queue.jobs()] == ["failed", "idle", "failed"]
        worker.queue.close()
        worker.memory.close()
    memory.close()


def test_a_worker_keeps_the_state_of_its_latest_views_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pool process serves views in turn: it forgets all but the last few, so its memory
    stays bounded, and a forgotten view's next job reads it from the store again."""
    require_redis()
    monkeypatch.setattr(task_module, "CACHED_VIEWS", 2)
    database = f"sqlite:///{tmp_path / 'store.db'}"
    memory = Memory(database)
    session = memory.session("s", system="You are helpful.")
    for name in ("a", "b", "c"):
        session.view(name, preset="offline", budget=400)
    for i in range(30):
        session.extend(turn(i))
    with fresh_queue() as name:
        worker = Worker(WorkerSettings(database, name), REDIS)
        kinds = [worker.run("s", view, time.time())[0].kind for view in ("a", "b")]
        first, second = worker.memory.binding("s", "a"), worker.memory.binding("s", "b")
        kinds.append(worker.run("s", "c", time.time())[0].kind)
        assert kinds == ["done", "done", "done"]
        assert worker.memory.binding("s", "b") is second
        assert worker.memory.binding("s", "a") is not first  # forgotten, opened afresh
        assert worker.run("s", "a", time.time())[0].kind == "idle"  # read again: nothing to do
        worker.queue.close()
        worker.memory.close()
    memory.close()
