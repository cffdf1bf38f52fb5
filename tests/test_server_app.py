"""The app's frame: health, readiness, metrics, the error shape, the body limit."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient

from contextfold.cli import main
from contextfold.core.errors import InvalidInput, StoreError
from contextfold.server.app import create_app
from contextfold.server.commands import seed_demo
from contextfold.server.responses import FastJSON
from contextfold.server.service import Service
from contextfold.server.settings import Settings
from contextfold.store.ram import RAMStore


@pytest.fixture
def client() -> Iterator[TestClient]:
    service = Service(Settings(auth=False, max_body_bytes=2048), store=RAMStore())
    with TestClient(create_app(service), base_url="http://127.0.0.1") as c:
        yield c


def test_health_and_readiness(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready"}


def test_unknown_route_has_the_error_shape(client: TestClient) -> None:
    answer = client.get("/api/v1/nothing-here")
    assert answer.status_code == 404
    assert answer.json() == {
        "error": {"code": "not_found", "message": "Not Found", "field": None, "index": None}
    }


def test_body_over_the_limit_is_413(client: TestClient) -> None:
    declared = client.post("/api/v1/sessions", content=b"x" * 4096)
    assert declared.status_code == 413
    assert declared.json()["error"]["code"] == "payload_too_large"

    def chunks() -> Iterator[bytes]:
        for _ in range(8):
            yield b"y" * 512

    streamed = client.post("/api/v1/sessions", content=chunks())
    assert streamed.status_code == 413
    assert streamed.json()["error"]["code"] == "payload_too_large"


def test_metrics_count_requests_by_route_template(client: TestClient) -> None:
    client.get("/healthz")
    text = client.get("/metrics").text
    assert 'contextfold_http_requests_total{method="GET",route="/healthz",status="200"}' in text
    assert "contextfold_http_request_seconds_bucket" in text


def test_no_auth_is_refused_off_loopback() -> None:
    with pytest.raises(InvalidInput) as caught:
        Settings(auth=False, host="0.0.0.0")
    assert caught.value.field == "no_auth"
    assert Settings(auth=False, host="::1").auth is False


def test_serve_refuses_no_auth_off_loopback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--no-auth", "--host", "0.0.0.0", "--database", "memory://"]) == 2
    assert "loopback" in capsys.readouterr().err


def test_demo_seeds_the_demo_session_once_with_folds() -> None:
    service = Service(Settings(auth=False, runner=False), store=RAMStore())
    seed_demo(service)
    session = service.session("local", "demo")
    last = service.memory.store.last_seq(session.id)
    assert last > 100
    assert session.view("default").folds()
    seed_demo(service)
    assert service.memory.store.last_seq(session.id) == last
    with TestClient(create_app(service), base_url="http://127.0.0.1") as client:
        listed = client.get("/api/v1/sessions").json()["sessions"]
        assert [s["id"] for s in listed] == ["demo"]
        report = client.get("/api/v1/sessions/demo/views/default/render").json()["report"]
        assert report["folds"] and report["tokens"] <= 12_000


class FailingStore(RAMStore):
    """A store whose reads fail, as a database that went away does."""

    def session_info(self, session_id: str) -> Any:
        raise StoreError("connection refused")

    def list_sessions(self, *args: Any, **kwargs: Any) -> list[str]:
        raise StoreError("connection refused")


def test_a_failing_store_is_503_and_not_ready() -> None:
    service = Service(Settings(auth=False, runner=False), store=FailingStore())
    with TestClient(create_app(service), base_url="http://127.0.0.1") as client:
        assert client.post("/api/v1/sessions", json={"id": "s1"}).status_code == 503
        answer = client.get("/api/v1/sessions")
        assert answer.status_code == 503
        assert answer.json()["error"]["code"] == "store_unavailable"
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["error"]["code"] == "store_unavailable"
        assert client.get("/healthz").status_code == 200


def test_another_method_on_a_known_route_is_405(client: TestClient) -> None:
    answer = client.patch("/api/v1/sessions")
    assert answer.status_code == 405
    assert answer.json()["error"]["code"] == "method_not_allowed"


def test_fast_json_encodes_what_the_standard_encoder_does() -> None:
    body = {
        "messages": [{"role": "user", "content": 'naïve café ☕ \u2028 "q" \\ <b>'}],
        "report": {"tokens": 3, "budget": None, "whole": True, "clipped": [1, 2], "x": 0.5},
    }
    fast = FastJSON(body).body
    plain = JSONResponse(body).body
    assert json.loads(fast) == json.loads(plain) == body
    huge = {"report": {"tokens": 2**70}}  # past orjson's 64 bits: the stdlib encoder writes it
    assert json.loads(FastJSON(huge).body) == huge


def test_model_free_folding_runs_in_worker_processes_unless_told_otherwise(tmp_path: Any) -> None:
    from contextfold.runtime.process import ProcessRunner
    from contextfold.runtime.thread import ThreadRunner

    for processes, kind in ((1, ProcessRunner), (0, ThreadRunner)):
        service = Service(
            Settings(database=str(tmp_path / f"p{processes}.db"), runner_processes=processes)
        )
        service.start()
        try:
            assert type(service.runner) is kind
            session = service.create("t", "s", system="sys")
            session.extend(
                {"role": "user", "content": f"turn {i} " + "words " * 80} for i in range(40)
            )
            session.view("default", preset="offline", budget=600)
            view = service.watch(session, "default")
            assert service.runner is not None and service.runner.wait_idle(timeout=60)
            assert view.folds(), kind
        finally:
            service.close()
    with pytest.raises(InvalidInput) as caught:
        Settings(runner_processes=-1)
    assert caught.value.field == "runner_processes"
