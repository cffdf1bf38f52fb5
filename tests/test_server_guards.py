"""What the service refuses and keeps to itself: ``Host`` in loopback-only modes,
tenant data in ``/metrics``, a revoked key's streams, malformed REST input."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from server_harness import add_key, bearer, make_service, running
from test_server_events import Stream

from contextfold.server.app import create_app
from contextfold.server.hosts import loopback_host
from contextfold.store.sqlite import SQLiteStore

API = "/api/v1/sessions"
LOCAL = "http://127.0.0.1"


@pytest.mark.parametrize(
    ("host", "allowed"),
    [("127.0.0.1", True), ("127.0.0.1:8765", True), ("localhost:1", True), ("LOCALHOST", True),
     ("[::1]:8765", True), ("[::1]", True), (None, False), ("", False),
     ("evil.example", False), ("evil.example:8765", False), ("127.0.0.1.evil.example", False),
     ("localhost.evil.example:80", False), ("127.0.0.2", False), ("[::2]", False),
     ("0.0.0.0", False), ("localhost.", False)],
)  # fmt: skip
def test_loopback_host(host: str | None, allowed: bool) -> None:
    assert loopback_host(host) is allowed


def test_without_auth_a_request_to_another_host_is_421_and_changes_nothing() -> None:
    service = make_service(auth=False, runner=False)
    with TestClient(create_app(service), base_url=LOCAL) as client:
        rebound = {"host": "attacker.example:8765"}
        for method, path, body in [
            ("GET", API, None),
            ("POST", API, {"id": "s1"}),
            ("GET", "/", None),
            ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]}),
        ]:
            answer = client.request(method, path, json=body, headers=rebound)
            assert answer.status_code == 421, (method, path)
            assert answer.json()["error"]["code"] == "host_not_allowed"
            assert answer.json()["error"]["field"] == "Host"
        assert service.memory.sessions() == []
        for host in ("127.0.0.1:8765", "localhost", "[::1]:1"):
            assert client.get(API, headers={"host": host}).status_code == 200
    # With keys, the key is the guard: any host name may reach the service.
    keyed = make_service(runner=False)
    key = add_key(keyed.memory, "t1")
    with TestClient(create_app(keyed), base_url="http://contextfold.example") as client:
        assert client.get(API, headers=bearer(key)).status_code == 200


def test_metrics_hold_no_tenant_data_and_a_bounded_set_of_series() -> None:
    service = make_service(runner=False)
    key = add_key(service.memory, "tenant-secret-name")
    with TestClient(create_app(service), base_url=LOCAL) as client:
        auth = bearer(key)

        def series() -> list[str]:
            text = client.get("/metrics").text
            return [line for line in text.splitlines() if line and not line.startswith("#")]

        def tenant_work(n: int) -> None:
            sid = f"secret-session-{n}"
            client.post(API, json={"id": sid}, headers=auth)
            view = f"secret-view-xyz-{n}"
            pipeline = {"strategies": [{"type": "rolling", "name": f"secret-strategy-{n}"}]}
            offline = {"preset": "offline", "budget": 600}
            put = client.put(f"{API}/{sid}/views/{view}", json=offline, headers=auth)
            assert put.status_code == 200, put.text
            client.put(f"{API}/{sid}/views/{view}-p", json={"pipeline": pipeline}, headers=auth)
            words = " ".join(f"w{i}" for i in range(100))
            rounds = [
                {"role": role, "content": f"{role} {r}: {words}"}
                for r in range(10)
                for role in ("user", "assistant")
            ]
            client.post(f"{API}/{sid}/messages", json={"messages": rounds}, headers=auth)
            compacted = client.post(f"{API}/{sid}/views/{view}/compact", headers=auth)
            assert compacted.json()["folds"], compacted.text  # events were counted
            client.get(f"{API}/{sid}/views/{view}/render", headers=auth)
            client.request(f"X{n}", f"{API}/{sid}", headers=auth)  # a method of its own
            client.get(f"/no/such/{sid}", headers=auth)

        series()  # /metrics's own series
        tenant_work(0)
        tenant_work(1)
        before = series()
        for n in range(2, 12):
            tenant_work(n)
        after = series()
    text = "\n".join(after)
    assert not re.search(r"secret|tenant", text), [s for s in after if "secret" in s]
    # Ten more sessions, views and methods added no series.
    names = {s.split(" ")[0] for s in after}
    assert names == {s.split(" ")[0] for s in before}
    assert any('method="other"' in s for s in after)


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[tuple[str, Any, str]]:
    store = SQLiteStore(str(tmp_path / "keys.db"))
    service = make_service(store)
    key = add_key(service.memory, "t1")
    with running(create_app(service)) as base:
        yield base, service, key


def test_revoking_a_key_closes_its_streams_within_a_second(keyed: tuple[str, Any, str]) -> None:
    base, service, key = keyed
    httpx.post(f"{base}{API}", json={"id": "s1"}, headers=bearer(key)).raise_for_status()
    by_header = Stream(f"{base}{API}/s1/events", headers=bearer(key))
    by_query = Stream(f"{base}{API}/s1/events?api_key={key}")
    other = add_key(service.memory, "t1")
    kept = Stream(f"{base}{API}/s1/events", headers=bearer(other))
    try:
        message = {"messages": [{"role": "user", "content": "before"}]}
        httpx.post(f"{base}{API}/s1/messages", json=message, headers=bearer(other))
        for stream in (by_header, by_query, kept):
            assert stream.next("appended")["last_seq"] == 1
        revoked_at = time.time()
        assert service.memory.api_keys.revoke(key.split("_")[1])
        # An append right after the revocation reaches only the stream of the other key.
        message = {"messages": [{"role": "user", "content": "after"}]}
        httpx.post(f"{base}{API}/s1/messages", json=message, headers=bearer(other))
        assert kept.next("appended")["last_seq"] == 2
        closed = []
        for stream in (by_header, by_query):
            stream.ended.wait(5)
            closed.append(stream.ended_at - revoked_at)
            assert all(data.get("last_seq") != 2 for _, data in stream.drained())
        assert max(closed) < 1.0, closed
        assert not kept.ended.is_set()
    finally:
        for stream in (by_header, by_query, kept):
            stream.close()


def test_malformed_rest_input_is_422_and_stores_nothing() -> None:
    service = make_service(auth=False, runner=False)
    surrogate = '"\\ud800"'
    json_type = {"content-type": "application/json"}
    with TestClient(create_app(service), base_url=LOCAL) as client:
        for sid in (".", ".."):
            answer = client.post(API, json={"id": sid})
            assert answer.status_code == 422, sid
            assert answer.json()["error"]["field"] == "id"
        meta_key = '{"id": "a", "meta": {@S: 1}}'
        answer = client.post(API, content=meta_key.replace("@S", surrogate), headers=json_type)
        assert answer.status_code == 422 and answer.json()["error"]["field"].startswith("meta")
        assert service.memory.sessions() == []
        assert client.post(API, json={"id": "b"}).status_code == 201
        bodies = {
            f"{API}/b/messages": '{"messages": [{"role": "user", "content": "x", '
            '"meta": {@S: 1}}]}',
            f"{API}/b/views/f": '{"filter": {@S: 1}}',
            f"{API}/b/views/o": '{"options": {@S: 1}}',
            f"{API}/b/views/t": '{"budget": true}',
            f"{API}/b/views/e": '{"budget": 100, "expected_version": false}',
            f"{API}/b/views/w": '{"high_water": true}',
        }
        for path, raw in bodies.items():
            method = "POST" if path.endswith("messages") else "PUT"
            raw = raw.replace("@S", surrogate)  # a lone surrogate as a JSON key
            answer = client.request(method, path, content=raw, headers=json_type)
            assert answer.status_code == 422, (path, answer.text)
            assert answer.json()["error"]["code"] == "invalid_input"
        assert service.memory.store.messages("local/b") == []
        assert client.get(f"{API}/b/views").json()["views"] == []
        for sid in (".", ".."):
            assert client.get(f"{API}/{sid}/messages").status_code in (404, 422)
