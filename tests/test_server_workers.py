"""The service with Celery workers (``serve --workers``): real uvicorn, worker processes,
PostgreSQL and Redis. Appends through the API are folded by a worker, the view's job
shows while it waits, ``/metrics`` reads the pool's figures, compact now queues a job
(202), a poison view is parked, and a broker outage stops nothing but compact now."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from conftest import NATO
from prometheus_client.parser import text_string_to_metric_families
from server_harness import bearer, create_key, free_port, make_service, running
from test_server_events import Stream
from workers_harness import REDIS, fresh_queue, private_redis, wait_for, worker

from contextfold.cli import main
from contextfold.core.errors import InvalidInput
from contextfold.server.app import create_app
from contextfold.server.service import Service
from contextfold.server.settings import Settings
from contextfold.store.registry import open_store
from contextfold.workers.queue import WorkQueue

API = "/api/v1/sessions"
WAIT_S = 60.0


@dataclass
class Api:
    """A running service's API, through a client (with a key, when it needs one)."""

    base: str
    client: httpx.Client

    def view(self, sid: str = "s1", name: str = "default") -> Any:
        answer = self.client.get(f"{API}/{sid}/views/{name}")
        assert answer.status_code == 200, answer.text
        return answer.json()

    def job(self, sid: str = "s1", name: str = "default") -> Any:
        return self.view(sid, name)["job"]

    def folds(self, sid: str = "s1", name: str = "default") -> list[Any]:
        answer = self.client.get(f"{API}/{sid}/views/{name}/folds")
        assert answer.status_code == 200, answer.text
        folds: list[Any] = answer.json()["folds"]
        return folds

    def metrics(self) -> str:
        answer = self.client.get("/metrics")
        assert answer.status_code == 200, answer.text
        return answer.text

    def chat(self, turns: int, sid: str = "s1", start: int = 0) -> None:
        words = " ".join(NATO)
        for turn in range(start, start + turns):
            body = {
                "messages": [
                    {"role": "user", "content": f"question {turn} " + words * 4},
                    {"role": "assistant", "content": f"answer {turn} " + words * 6},
                ]
            }
            answer = self.client.post(f"{API}/{sid}/messages", json=body)
            assert answer.status_code == 201, answer.text

    def setup(self, sid: str = "s1", **view: Any) -> None:
        answer = self.client.post(API, json={"id": sid, "system": "You are helpful."})
        assert answer.status_code == 201, answer.text
        answer = self.client.put(f"{API}/{sid}/views/default", json=view)
        assert answer.status_code == 200, answer.text


@dataclass
class Served(Api):
    """A service with workers running in this process, and its tenant's key."""

    service: Service
    key: str


@contextmanager
def serving(database: str, queue: str, broker: str = REDIS) -> Iterator[Served]:
    store = open_store(database)
    service = make_service(store, workers=broker, queue=queue, settle_s=0.05)
    key = create_key(service.memory, "t1")
    try:
        with (
            running(create_app(service)) as base,
            httpx.Client(base_url=base, headers=bearer(key), timeout=WAIT_S) as client,
        ):
            assert service.workers is not None and service.workers.listening(WAIT_S)
            yield Served(base, client, service, key)
    finally:
        service.close()


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one series in Prometheus text, or None when it is not there."""
    for family in text_string_to_metric_families(text):
        for found in family.samples:
            if found.name == name and found.labels == labels:
                return float(found.value)
    return None


def test_appends_wait_as_a_pending_job_until_a_worker_folds_them(database: str) -> None:
    with fresh_queue() as queue, serving(database, queue) as srv:
        srv.setup(preset="offline", budget=1500)
        assert srv.job() is None
        stream = Stream(f"{srv.base}{API}/s1/events", headers=bearer(srv.key))
        try:
            srv.chat(20)
            assert wait_for(lambda: (srv.job() or {}).get("state") == "pending", WAIT_S)
            job = srv.job()
            assert job["since"] > 0 and job["failures"] == 0 and job["worker"] is None
            assert srv.view()["job"] == job
            listed = srv.client.get(f"{API}/s1/views").json()["views"]
            assert [v["job"]["state"] for v in listed] == ["pending"]
            # The pending record is written before its message reaches the broker (a worker
            # that takes the message must find the record), so the depth follows a moment later.
            assert wait_for(
                lambda: (sample(srv.metrics(), "contextfold_queue_depth") or 0) >= 1, WAIT_S
            )
            text = srv.metrics()
            assert sample(text, "contextfold_broker_up") == 1
            assert sample(text, "contextfold_queue_views", state="pending") == 1
            assert sample(text, "contextfold_queue_views", state="running") == 0
            assert (sample(text, "contextfold_worker_jobs_total", outcome="enqueued") or 0) >= 1
            assert sample(text, "contextfold_worker_jobs_total", outcome="committed") == 0
            assert srv.folds() == []

            with worker(database, queue):
                committed = stream.next("committed")
                assert committed["session"] == "s1" and committed["view"] == "default"
                assert committed["data"]["worker"]
                assert wait_for(lambda: srv.job() is None, WAIT_S)
            assert srv.folds()
            rendered = srv.client.get(f"{API}/s1/views/default/render").json()
            assert rendered["report"]["folds"] and rendered["report"]["tokens"] <= 1500
            text = srv.metrics()
            assert sample(text, "contextfold_queue_depth") == 0
            assert sample(text, "contextfold_queue_views", state="pending") == 0
            assert (sample(text, "contextfold_worker_jobs_total", outcome="started") or 0) >= 1
            assert (sample(text, "contextfold_worker_jobs_total", outcome="committed") or 0) >= 1
            assert (sample(text, "contextfold_worker_append_to_commit_seconds_count") or 0) >= 1
            assert (sample(text, "contextfold_worker_append_to_commit_seconds_sum") or 0) > 0
            # The workers' events reached this process's own figures, as a local cycle's do.
            events = sample(
                text,
                "contextfold_events_total",
                kind="committed",
                strategy=committed["strategy"],
            )
            assert (events or 0) >= 1
        finally:
            stream.close()


def test_compact_now_queues_a_job_for_the_workers(database: str) -> None:
    with fresh_queue() as queue, serving(database, queue) as srv:
        srv.setup(preset="offline", budget=50_000)  # appends alone plan nothing
        srv.chat(3)
        path = f"{API}/s1/views/default/compact"
        first = srv.client.post(path)
        assert first.status_code == 202, first.text
        body = first.json()
        assert body["queued"] is True and body["job"]["state"] == "pending"
        again = srv.client.post(path).json()
        assert again["queued"] is False and again["job"]["state"] == "pending"
        refused = srv.client.post(path, params={"budget": 500})
        assert refused.status_code == 422 and refused.json()["error"]["field"] == "budget"
        assert srv.job()["state"] == "pending"
        with worker(database, queue):
            assert wait_for(lambda: srv.job() is None, WAIT_S)
        assert srv.service.workers is not None
        stats = srv.service.workers.queue.stats()
        assert stats["enqueued"] == 1 and stats["started"] == 1


def test_a_poison_view_is_parked_and_compact_now_unparks_it(database: str) -> None:
    """The view's model is one the workers cannot build (started without its plugin):
    every job fails, and after ``max_failures`` the view is parked."""
    with fresh_queue() as queue, serving(database, queue) as srv:
        srv.setup(preset="rolling", budget=4000, model="slow:0.01")
        stream = Stream(f"{srv.base}{API}/s1/events", headers=bearer(srv.key))
        try:
            with worker(database, queue, max_failures=2, backoff=0.1, plugins=()):
                srv.chat(12)
                retried = stream.next("retried")
                assert retried["data"]["failures"] == 1
                parked = stream.next("parked")
                assert parked["view"] == "default" and parked["detail"]
                assert wait_for(lambda: (srv.job() or {}).get("state") == "parked", WAIT_S)
                job = srv.job()
                assert job["failures"] == 2 and job["reason"] and job["since"] > 0
                text = srv.metrics()
                assert sample(text, "contextfold_queue_views", state="parked") == 1
                assert sample(text, "contextfold_worker_jobs_total", outcome="parked") == 1
                assert (sample(text, "contextfold_worker_jobs_total", outcome="retried") or 0) >= 1
                runner = srv.service.workers
                assert runner is not None
                enqueued = runner.queue.stats()["enqueued"]
                srv.chat(2, start=12)  # appends alone do not unpark it
                assert runner.wait_idle(WAIT_S)
                assert runner.queue.stats()["enqueued"] == enqueued
                assert (srv.job() or {}).get("state") == "parked"
                answer = srv.client.post(f"{API}/s1/views/default/compact")
                assert answer.status_code == 202 and answer.json()["queued"] is True
                assert stream.next("retried")["data"]["failures"] == 1  # tried once more
        finally:
            stream.close()


def test_a_broker_outage_stops_only_compact_now_and_the_job_resumes(database: str) -> None:
    with (
        private_redis() as redis_server,
        fresh_queue(redis_server.url) as queue,
        serving(database, queue, broker=redis_server.url) as srv,
    ):
        srv.setup(preset="offline", budget=1500)
        srv.chat(20)
        assert wait_for(lambda: (srv.job() or {}).get("state") == "pending", WAIT_S)

        redis_server.stop()
        srv.chat(2, start=20)
        render = srv.client.get(f"{API}/s1/views/default/render")
        assert render.status_code == 200
        # Nothing folded by a job: what render would cut stands as provisional folds only.
        report = render.json()["report"]
        assert set(report["folds"]) == {p["id"] for p in report["provisional"]}
        assert srv.job() is None
        assert srv.client.get(f"{API}/s1/views").json()["views"][0]["job"] is None
        text = srv.metrics()
        assert sample(text, "contextfold_broker_up") == 0
        assert sample(text, "contextfold_queue_depth") is None
        answer = srv.client.post(f"{API}/s1/views/default/compact")
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"]["code"] == "broker_unavailable"

        # The restarted Redis kept nothing; the runner plans every view again.
        redis_server.start()
        with worker(database, queue, broker=redis_server.url):
            assert wait_for(lambda: srv.folds(), WAIT_S)
            assert wait_for(lambda: srv.job() is None, WAIT_S)
        assert sample(srv.metrics(), "contextfold_broker_up") == 1
        assert len(srv.client.get(f"{API}/s1/messages?limit=1000").json()["messages"]) == 45


def test_the_job_of_a_view_the_runner_compacts_here_shows_while_it_runs(test_models: None) -> None:
    service = make_service(auth=False, runner_processes=0, settle_s=0.05)
    with (
        running(create_app(service)) as base,
        httpx.Client(base_url=base, timeout=WAIT_S) as client,
    ):
        srv = Api(base, client)
        srv.setup(preset="rolling", budget=4000, model="slow:1.0")  # each summary takes 1 s
        assert srv.job() is None
        srv.chat(12)
        running_job = {"state": "running", "since": None, "failures": 0, "worker": None}
        assert wait_for(lambda: srv.job() == {**running_job, "reason": None}, WAIT_S)
        assert service.runner is not None and service.runner.wait_idle(WAIT_S)
        assert srv.job() is None
        answer = srv.client.post(f"{API}/s1/views/default/compact")
        assert answer.status_code == 200 and "folds" in answer.json()


def test_serve_with_workers_sends_the_jobs_to_the_named_queue(database: str) -> None:
    """``contextfold serve --workers URL --queue NAME`` as a user starts it."""
    port = free_port()
    argv = [
        sys.executable, "-m", "contextfold.cli", "serve", "--no-auth", "--port", str(port),
        "--database", database, "--workers", REDIS,
    ]  # fmt: skip
    with fresh_queue() as queue, tempfile.TemporaryFile() as output:
        proc = subprocess.Popen([*argv, "--queue", queue], stdout=output, stderr=output)
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT_S) as client:
                assert wait_for(lambda: _answers(client), WAIT_S), _printed(output)
                srv = Api(str(client.base_url), client)
                srv.setup(preset="offline", budget=1500)
                srv.chat(20)
                assert wait_for(lambda: (srv.job() or {}).get("state") == "pending", WAIT_S)
                assert WorkQueue(REDIS, queue).counts()["pending"] == 1
                with worker(database, queue):
                    assert wait_for(lambda: srv.folds(), WAIT_S)
        finally:
            proc.terminate()
            proc.wait(30)
        assert f"compaction jobs go to the workers of queue '{queue}'" in _printed(output)


def _answers(client: httpx.Client) -> bool:
    try:
        return client.get("/healthz").status_code == 200
    except httpx.HTTPError:
        return False


def _printed(output: Any) -> str:
    output.seek(0)
    return str(output.read().decode(errors="replace"))


def test_serve_refuses_a_broker_that_is_not_redis(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--workers", "amqp://127.0.0.1", "--database", "memory://"]) == 2
    assert "Redis URL" in capsys.readouterr().err


def test_settings_refuse_a_broker_that_is_not_redis_and_workers_without_the_runner() -> None:
    with pytest.raises(InvalidInput) as error:
        Settings(workers="amqp://127.0.0.1:5672")
    assert error.value.field == "workers"
    with pytest.raises(InvalidInput) as error:
        Settings(workers=REDIS, runner=False)
    assert error.value.field == "workers"


def test_the_openapi_spec_describes_compact_now_both_ways() -> None:
    spec = create_app(make_service(auth=False, runner=False)).openapi()
    answers = spec["paths"]["/api/v1/sessions/{sid}/views/{name}/compact"]["post"]["responses"]
    assert answers["200"]["content"]["application/json"]["schema"]["$ref"].endswith("CompactOut")
    assert answers["202"]["content"]["application/json"]["schema"]["$ref"].endswith("CompactQueued")
    assert "broker_unavailable" in answers["503"]["description"]
    job = spec["components"]["schemas"]["JobOut"]
    assert job["properties"]["state"]["enum"] == ["pending", "running", "parked", "failing"]
    assert "job" in spec["components"]["schemas"]["ViewOut"]["properties"]
