"""Tenants and keys: 401 without a good key, and no route of the app leaks another tenant's session.

The isolation test walks ``app.routes``: every route and method is tried with
tenant B's key on tenant A's session, and a route it has no entry for fails it,
so a route added later must say here how it is tried.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from server_harness import add_key, bearer, make_service

from contextfold.cli import main
from contextfold.server.app import create_app
from contextfold.server.keys import create_key
from contextfold.server.service import Service
from contextfold.store.sqlite import SQLiteStore
from contextfold.testing.isolation import A_SESSION, ATTEMPTS, cross_tenant

API = "/api/v1/sessions"


@pytest.fixture
def service() -> Service:
    """Keys checked against the store on every request, so a revocation shows at once."""
    return make_service(runner=False, key_cache_s=0)


@pytest.fixture
def client(service: Service) -> Iterator[TestClient]:
    with TestClient(create_app(service), base_url="http://127.0.0.1") as c:
        yield c


def test_no_route_leaks_another_tenants_session(client: TestClient, service: Service) -> None:
    found = cross_tenant(client, service.memory)
    assert not found.uncovered, f"routes the isolation table does not cover: {found.uncovered}"
    assert found.leaks == []
    assert found.wrong == []
    assert found.a_unchanged and found.b_lists_only_own
    assert found.attempts >= 3 * len(ATTEMPTS)
    listed = client.get(API, headers=bearer(create_key(service.memory, "a"))).json()["sessions"]
    assert [s["id"] for s in listed] == [A_SESSION]


def test_the_walk_notices_a_route_that_leaks(service: Service) -> None:
    """The walk itself can fail: a route that answers A's data to anyone is caught."""
    app = create_app(service)

    @app.get(API + "/{sid}/peek")
    def peek(sid: str) -> dict[str, object]:
        return {"messages": [m.message for m in service.memory.store.messages(f"a/{sid}")]}

    with TestClient(app, base_url="http://127.0.0.1") as c:
        found = cross_tenant(c, service.memory)
    assert found.uncovered == [f"GET {API}/{{sid}}/peek"]
    ATTEMPTS[("GET", API + "/{sid}/peek")] = ATTEMPTS[("GET", API + "/{sid}")]
    try:
        fresh = make_service(runner=False, key_cache_s=0)
        app = create_app(fresh)
        app.get(API + "/{sid}/peek")(
            lambda sid: {"messages": [m.message for m in fresh.memory.store.messages(f"a/{sid}")]}
        )
        with TestClient(app, base_url="http://127.0.0.1") as c:
            found = cross_tenant(c, fresh.memory)
    finally:
        del ATTEMPTS[("GET", API + "/{sid}/peek")]
    assert found.leaks and found.wrong


def test_api_key_in_the_query_counts_for_the_event_stream_only(
    client: TestClient, service: Service
) -> None:
    key = add_key(service.memory, "a")
    client.post(API, json={"id": "s1"}, headers=bearer(key))
    assert client.get(f"{API}/s1", params={"api_key": key}).status_code == 401
    assert client.get(API, params={"api_key": key}).status_code == 401


def test_keys_are_checked_and_revocation_takes_effect(client: TestClient, service: Service) -> None:
    key = add_key(service.memory, "t1")
    assert client.get(API, headers=bearer(key)).status_code == 200
    key_id = key.split("_")[1]
    cases = {
        "missing": {},
        "not bearer": {"Authorization": f"Basic {key}"},
        "malformed": bearer("sk-123"),
        "unknown id": bearer(key.replace(key_id, "f" * 12)),
        "wrong secret": bearer(key[:-4] + ("AAAA" if not key.endswith("AAAA") else "BBBB")),
    }
    for name, headers in cases.items():
        answer = client.get(API, headers=headers)
        assert answer.status_code == 401, name
        assert answer.json()["error"]["code"] == "unauthorized"
        assert answer.headers["www-authenticate"].startswith("Bearer")
    assert service.memory.api_keys.revoke(key_id)
    revoked = client.get(API, headers=bearer(key))
    assert revoked.status_code == 401 and "revoked" in revoked.json()["error"]["message"]


def test_keys_commands_make_list_and_revoke_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "svc.db")
    assert main(["keys", "create", "--tenant", "acme", "--label", "ci", "--database", db]) == 0
    key = capsys.readouterr().out.strip()
    assert key.startswith("cf_")
    assert main(["keys", "list", "--json", "--database", db]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(k["tenant"], k["label"], k["revoked_at"]) for k in listed] == [("acme", "ci", None)]
    assert key.split("_", 2)[2] not in json.dumps(listed)  # the secret is never shown again
    store = SQLiteStore(db)
    stored = store.list_api_keys()[0]
    assert stored.secret_hash != key.split("_", 2)[2] and len(stored.secret_hash) == 64
    with TestClient(
        create_app(make_service(store, runner=False, key_cache_s=0)), base_url="http://127.0.0.1"
    ) as c:
        assert c.post(API, json={"id": "x"}, headers=bearer(key)).status_code == 201
        assert main(["keys", "revoke", stored.id, "--database", db]) == 0
        assert c.get(API, headers=bearer(key)).status_code == 401
    assert main(["keys", "revoke", "ffffffffffff", "--database", db]) == 2
    assert main(["keys", "create", "--tenant", "Bad Tenant", "--database", db]) == 2
    assert "tenant" in capsys.readouterr().err


def test_cors_is_off_unless_origins_are_given() -> None:
    preflight = {"Origin": "https://app.example", "Access-Control-Request-Method": "GET"}
    with TestClient(
        create_app(make_service(auth=False, runner=False)), base_url="http://127.0.0.1"
    ) as closed:
        answer = closed.get("/healthz", headers={"Origin": "https://app.example"})
        assert "access-control-allow-origin" not in answer.headers
        assert "access-control-allow-origin" not in closed.options(API, headers=preflight).headers
    service = make_service(auth=False, runner=False, cors_origins=("https://app.example",))
    with TestClient(create_app(service), base_url="http://127.0.0.1") as opened:
        answer = opened.options(API, headers=preflight)
        assert answer.headers["access-control-allow-origin"] == "https://app.example"
        other = opened.get("/healthz", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers


def test_a_cached_key_is_trusted_for_its_ttl_only() -> None:
    service = make_service(runner=False, key_cache_s=0.3)
    key = add_key(service.memory, "t1")
    with TestClient(create_app(service), base_url="http://127.0.0.1") as client:
        assert client.get(API, headers=bearer(key)).status_code == 200
        service.memory.api_keys.revoke(key.split("_")[1])
        assert client.get(API, headers=bearer(key)).status_code == 200  # within the ttl
        time.sleep(0.35)
        assert client.get(API, headers=bearer(key)).status_code == 401
        assert client.get(API, headers=bearer(key)).status_code == 401  # refusals not cached
