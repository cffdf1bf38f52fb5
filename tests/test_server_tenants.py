"""Tenants and keys: 401 without a good key, and no route of the app leaks another tenant's session.

The isolation test walks ``app.routes``: every route and method is tried with
tenant B's key on tenant A's session, and a route it has no entry for fails it,
so a route added later must say here how it is tried.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from server_harness import add_key, bearer, every_route, make_service

from contextfold.cli import main
from contextfold.server.app import create_app
from contextfold.server.service import Service
from contextfold.store.sqlite import SQLiteStore

API = "/api/v1/sessions"
A_SESSION = "a-private"
A_VIEW = "a-view"
A_SECRET = "A-SECRET-4711"  # in A's messages, meta and view; never in an answer to B
PUBLIC = {
    "/healthz",
    "/readyz",
    "/metrics",
    "/openapi.json",
    "/docs",
    "/docs/oauth2-redirect",
    "/redoc",
    # The web page's shell and files: no session data; the page reads it through the API.
    "/",
    "/sessions/{sid}",
    "/static/{name}",
}


@dataclass(frozen=True)
class Attempt:
    """How one route is tried with B's key, and the statuses that are no leak."""

    expect: frozenset[int]
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)


NOT_FOUND = frozenset({404})
ATTEMPTS: dict[tuple[str, str], Attempt] = {
    ("POST", API): Attempt(frozenset({201}), body={"id": "b-own"}),
    ("GET", API): Attempt(frozenset({200})),
    ("GET", API + "/{sid}"): Attempt(NOT_FOUND),
    ("DELETE", API + "/{sid}"): Attempt(NOT_FOUND),
    ("POST", API + "/{sid}/messages"): Attempt(
        NOT_FOUND, body={"messages": [{"role": "user", "content": "b writes"}]}
    ),
    ("GET", API + "/{sid}/messages"): Attempt(NOT_FOUND),
    ("GET", API + "/{sid}/events"): Attempt(NOT_FOUND),
    ("GET", API + "/{sid}/views"): Attempt(NOT_FOUND),
    ("PUT", API + "/{sid}/views/{name}"): Attempt(NOT_FOUND, body={"budget": 100}),
    ("GET", API + "/{sid}/views/{name}"): Attempt(NOT_FOUND),
    ("GET", API + "/{sid}/views/{name}/render"): Attempt(NOT_FOUND),
    ("GET", API + "/{sid}/views/{name}/folds"): Attempt(NOT_FOUND, params={"superseded": "true"}),
    ("POST", API + "/{sid}/views/{name}/compact"): Attempt(NOT_FOUND),
    # The proxy reads the session from a header: B naming A's id reaches B's own session
    # of that name, never A's. This server has no upstream, so the call itself fails.
    ("POST", "/v1/chat/completions"): Attempt(
        frozenset({502}),
        body={"model": "m", "messages": [{"role": "user", "content": "b asks"}]},
        headers={"X-Contextfold-Session": A_SESSION, "X-Contextfold-View": A_VIEW},
    ),
    ("GET", "/v1/models"): Attempt(frozenset({502})),
}


@pytest.fixture
def service() -> Service:
    """Keys checked against the store on every request, so a revocation shows at once."""
    return make_service(runner=False, key_cache_s=0)


@pytest.fixture
def client(service: Service) -> Iterator[TestClient]:
    with TestClient(create_app(service)) as c:
        yield c


def a_state(service: Service) -> Any:
    sid = f"a/{A_SESSION}"
    store = service.store
    return (
        [(m.seq, m.message) for m in store.messages(sid)],
        [(v.name, v.version, v.config) for v in store.list_views(sid)],
        [f.id for f in store.folds(sid, A_VIEW, include_superseded=True)],
        store.list_sessions("a/"),
    )


def seed_a(client: TestClient, key: str) -> None:
    h = bearer(key)
    assert (
        client.post(
            API, json={"id": A_SESSION, "system": A_SECRET, "meta": {"s": A_SECRET}}, headers=h
        ).status_code
        == 201
    )
    for i in range(30):
        text = f"{A_SECRET} turn {i} " + "words " * 60
        body = {
            "messages": [{"role": "user", "content": text}, {"role": "assistant", "content": text}]
        }
        assert client.post(f"{API}/{A_SESSION}/messages", json=body, headers=h).status_code == 201
    view = {"preset": "offline", "budget": 1500, "filter": {"meta": {"s": A_SECRET}}}
    assert (
        client.put(
            f"{API}/{A_SESSION}/views/{A_VIEW}", json={**view, "filter": None}, headers=h
        ).status_code
        == 200
    )
    assert client.post(f"{API}/{A_SESSION}/views/{A_VIEW}/compact", headers=h).json()["folds"]


def concrete(path: str) -> str:
    return path.replace("{sid}", A_SESSION).replace("{name}", A_VIEW)


def routes(client: TestClient) -> list[tuple[str, str]]:
    """Every (method, path template) the app serves, included routers flattened."""
    found = []
    for route in every_route(client.app.routes):  # type: ignore[attr-defined]
        path = getattr(route, "path", None)
        methods = getattr(route, "methods", None) or ()
        assert isinstance(path, str), f"a route without a path: {route!r}"
        found += [(m, path) for m in sorted(methods) if m != "HEAD"]
    assert len(found) > len(ATTEMPTS)
    return found


def test_no_route_leaks_another_tenants_session(client: TestClient, service: Service) -> None:
    key_a = add_key(service.store, "a")
    key_b = add_key(service.store, "b")
    seed_a(client, key_a)
    before = a_state(service)
    attempts = leaks = 0
    uncovered = []
    for method, path in routes(client):
        if path in PUBLIC:
            answer = client.request(method, path, headers=bearer(key_b))
            attempts += 1
            leaks += A_SECRET in answer.text or A_SESSION in answer.text
            continue
        attempt = ATTEMPTS.get((method, path))
        if attempt is None:
            uncovered.append(f"{method} {path}")
            continue
        url = concrete(path)
        tries = [bearer(key_b), {}, {"Authorization": "Bearer cf_000000000000_" + "x" * 32}]
        if path.endswith("/events"):
            tries.append({})  # with ?api_key=B below
        for i, auth in enumerate(tries):
            params = dict(attempt.params)
            if i == 3:
                params["api_key"] = key_b
            answer = client.request(
                method, url, json=attempt.body, headers={**attempt.headers, **auth}, params=params
            )
            attempts += 1
            expected = attempt.expect if auth or i == 3 else frozenset({401})
            if i == 2:
                expected = frozenset({401})
            assert answer.status_code in expected, (
                method,
                path,
                i,
                answer.status_code,
                answer.text,
            )
            leaks += A_SECRET in answer.text
    assert not uncovered, f"routes the isolation table does not cover: {uncovered}"
    assert leaks == 0
    assert a_state(service) == before
    # B's listing holds B's sessions only (a proxy call may have made B's own one of A's
    # name, empty of A's data); A still sees all of A
    listed = client.get(API, headers=bearer(key_b))
    assert {s["id"] for s in listed.json()["sessions"]} <= {"b-own", A_SESSION}
    assert A_SECRET not in listed.text
    assert [s["id"] for s in client.get(API, headers=bearer(key_a)).json()["sessions"]] == [
        A_SESSION
    ]
    assert attempts >= 3 * len(ATTEMPTS)
    print(f"tenant isolation: {attempts} cross-tenant attempts, {leaks} leaks")


def test_api_key_in_the_query_counts_for_the_event_stream_only(
    client: TestClient, service: Service
) -> None:
    key = add_key(service.store, "a")
    client.post(API, json={"id": "s1"}, headers=bearer(key))
    assert client.get(f"{API}/s1", params={"api_key": key}).status_code == 401
    assert client.get(API, params={"api_key": key}).status_code == 401


def test_keys_are_checked_and_revocation_takes_effect(client: TestClient, service: Service) -> None:
    key = add_key(service.store, "t1")
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
    assert service.store.revoke_api_key(key_id)
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
    assert key.split("_")[2] not in json.dumps(listed)  # the secret is never shown again
    store = SQLiteStore(db)
    stored = store.list_api_keys()[0]
    assert stored.secret_hash != key.split("_", 2)[2] and len(stored.secret_hash) == 64
    with TestClient(create_app(make_service(store, runner=False, key_cache_s=0))) as c:
        assert c.post(API, json={"id": "x"}, headers=bearer(key)).status_code == 201
        assert main(["keys", "revoke", stored.id, "--database", db]) == 0
        assert c.get(API, headers=bearer(key)).status_code == 401
    assert main(["keys", "revoke", "ffffffffffff", "--database", db]) == 2
    assert main(["keys", "create", "--tenant", "Bad Tenant", "--database", db]) == 2
    assert "tenant" in capsys.readouterr().err


def test_cors_is_off_unless_origins_are_given() -> None:
    preflight = {"Origin": "https://app.example", "Access-Control-Request-Method": "GET"}
    with TestClient(create_app(make_service(auth=False, runner=False))) as closed:
        answer = closed.get("/healthz", headers={"Origin": "https://app.example"})
        assert "access-control-allow-origin" not in answer.headers
        assert "access-control-allow-origin" not in closed.options(API, headers=preflight).headers
    service = make_service(auth=False, runner=False, cors_origins=("https://app.example",))
    with TestClient(create_app(service)) as opened:
        answer = opened.options(API, headers=preflight)
        assert answer.headers["access-control-allow-origin"] == "https://app.example"
        other = opened.get("/healthz", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers


def test_a_cached_key_is_trusted_for_its_ttl_only() -> None:
    service = make_service(runner=False, key_cache_s=0.3)
    key = add_key(service.store, "t1")
    with TestClient(create_app(service)) as client:
        assert client.get(API, headers=bearer(key)).status_code == 200
        service.store.revoke_api_key(key.split("_")[1])
        assert client.get(API, headers=bearer(key)).status_code == 200  # within the ttl
        time.sleep(0.35)
        assert client.get(API, headers=bearer(key)).status_code == 401
        assert client.get(API, headers=bearer(key)).status_code == 401  # refusals not cached
