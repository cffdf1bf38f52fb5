"""Tenant isolation, tried on every route: another tenant's key must learn nothing.

``cross_tenant(client, memory)`` seeds tenant ``a`` with a session whose system
prompt, metadata and messages carry a marker, then walks every route and method
the app serves with tenant ``b``'s key (and with no key, a forged key, and the
event stream's ``?api_key=``) on ``a``'s session. A route this table does not
cover is reported, so a route added later must say how it is tried. Needs the
``server`` extra (FastAPI's ``TestClient``); the service's tests and
``bench/isolation.py`` run it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import fastapi.routing
from fastapi.testclient import TestClient

from contextfold.core.errors import NotFound
from contextfold.memory.session import Memory
from contextfold.server.keys import create_key

API = "/api/v1/sessions"
A_SESSION = "a-private"
A_VIEW = "a-view"
A_SECRET = "A-SECRET-4711"
PUBLIC = frozenset(
    {
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
        # Swagger UI, served from files in the package: no session data.
        "/docs",
        "/docs/assets/{name}",
        # The web page's shell and files: no session data; the page reads it through the API.
        "/",
        "/sessions/{sid}",
        "/static/{name}",
    }
)


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
    ("GET", API + "/{sid}/branches"): Attempt(NOT_FOUND),
    ("GET", API + "/{sid}/events"): Attempt(NOT_FOUND),
    ("GET", API + "/{sid}/views"): Attempt(NOT_FOUND),
    ("PUT", API + "/{sid}/views/{name}"): Attempt(NOT_FOUND, body={"budget": 100}),
    ("GET", API + "/{sid}/views/{name}"): Attempt(NOT_FOUND),
    ("GET", API + "/{sid}/views/{name}/render"): Attempt(NOT_FOUND),
    ("GET", API + "/{sid}/views/{name}/folds"): Attempt(NOT_FOUND, params={"superseded": "true"}),
    ("POST", API + "/{sid}/views/{name}/compact"): Attempt(NOT_FOUND),
    # The proxy reads the session from a header: B naming A's id reaches B's own session
    # of that name, never A's. The app under test has no upstream, so the call fails.
    ("POST", "/v1/chat/completions"): Attempt(
        frozenset({502}),
        body={"model": "m", "messages": [{"role": "user", "content": "b asks"}]},
        headers={"X-Contextfold-Session": A_SESSION, "X-Contextfold-View": A_VIEW},
    ),
    ("POST", "/v1/responses"): Attempt(
        frozenset({502}),
        body={"model": "m", "input": "b asks"},
        headers={"X-Contextfold-Session": A_SESSION, "X-Contextfold-View": A_VIEW},
    ),
    ("POST", "/v1/messages"): Attempt(
        frozenset({502}),
        body={"model": "claude-m", "max_tokens": 9, "messages": [{"role": "user", "content": "b"}]},
        headers={"X-Contextfold-Session": A_SESSION, "X-Contextfold-View": A_VIEW},
    ),
    # With no upstream to ask, the count is the local estimate of B's own prompt.
    ("POST", "/v1/messages/count_tokens"): Attempt(
        frozenset({200}),
        body={"model": "claude-m", "messages": [{"role": "user", "content": "b"}]},
        headers={"X-Contextfold-Session": A_SESSION, "X-Contextfold-View": A_VIEW},
    ),
    ("GET", "/v1/models"): Attempt(frozenset({502})),
}
FORGED = {"Authorization": "Bearer cf_000000000000_" + "x" * 32}


@dataclass
class Isolation:
    """What the walk found: ``leaks`` and ``wrong`` (an unexpected status) must be empty."""

    attempts: int = 0
    leaks: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    uncovered: list[str] = field(default_factory=list)
    a_unchanged: bool = False
    b_lists_only_own: bool = False


def bearer_header(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def every_route(routes: list[Any]) -> Iterator[Any]:
    """The app's routes with included routers flattened (newer FastAPI nests them)."""
    flatten = getattr(fastapi.routing, "iter_route_contexts", None)
    yield from (flatten(routes) if flatten is not None else routes)


def routes(client: TestClient) -> list[tuple[str, str]]:
    """Every (method, path template) the app serves."""
    found = []
    for route in every_route(list(client.app.routes)):  # type: ignore[attr-defined]
        path = getattr(route, "path", None)
        methods = getattr(route, "methods", None) or ()
        if isinstance(path, str):
            found += [(m, path) for m in sorted(methods) if m != "HEAD"]
    return found


def seed_a(client: TestClient, key: str) -> None:
    """Tenant A's session: the marker in its system prompt, metadata and log, and a fold."""
    h = bearer_header(key)
    made = client.post(
        API, json={"id": A_SESSION, "system": A_SECRET, "meta": {"s": A_SECRET}}, headers=h
    )
    made.raise_for_status()
    for i in range(30):
        text = f"{A_SECRET} turn {i} " + "words " * 60
        turn = [{"role": "user", "content": text}, {"role": "assistant", "content": text}]
        client.post(
            f"{API}/{A_SESSION}/messages", json={"messages": turn}, headers=h
        ).raise_for_status()
    view = {"preset": "offline", "budget": 1500}
    client.put(f"{API}/{A_SESSION}/views/{A_VIEW}", json=view, headers=h).raise_for_status()
    compacted = client.post(f"{API}/{A_SESSION}/views/{A_VIEW}/compact", headers=h)
    compacted.raise_for_status()
    if not compacted.json()["folds"]:
        raise AssertionError("tenant A's view should have folded")


def a_state(memory: Memory) -> Any:
    """All that B's attempts must leave as it was."""
    try:
        session = memory.existing_session(f"a/{A_SESSION}")
    except NotFound:
        return memory.sessions("a/")
    return (
        [(m.seq, m.message) for m in session.messages()],
        [(v.name, v.version, v.config) for v in session.view_records()],
        [f.id for f in session.view(A_VIEW).folds(include_superseded=True)],
        memory.sessions("a/"),
    )


def cross_tenant(client: TestClient, memory: Memory) -> Isolation:
    """Seed tenant A, then try every route as B, keyless and forged; what leaked."""
    found = Isolation()
    key_a, key_b = create_key(memory, "a"), create_key(memory, "b")
    seed_a(client, key_a)
    before = a_state(memory)
    for method, path in routes(client):
        if path in PUBLIC:
            answer = client.request(method, path, headers=bearer_header(key_b))
            _check(found, method, path, answer, None)
            continue
        attempt = ATTEMPTS.get((method, path))
        if attempt is None:
            found.uncovered.append(f"{method} {path}")
            continue
        url = path.replace("{sid}", A_SESSION).replace("{name}", A_VIEW)
        tries: list[tuple[dict[str, str], dict[str, str], frozenset[int]]] = [
            (bearer_header(key_b), {}, attempt.expect),
            ({}, {}, frozenset({401})),
            (FORGED, {}, frozenset({401})),
        ]
        if path.endswith("/events"):
            tries.append(({}, {"api_key": key_b}, attempt.expect))
        for auth, query, expect in tries:
            answer = client.request(
                method,
                url,
                json=attempt.body,
                headers={**attempt.headers, **auth},
                params={**attempt.params, **query},
            )
            _check(found, method, path, answer, expect)
    found.a_unchanged = a_state(memory) == before
    listed = client.get(API, headers=bearer_header(key_b)).json()["sessions"]
    found.b_lists_only_own = {s["id"] for s in listed} <= {
        "b-own",
        A_SESSION,
    } and A_SECRET not in str(listed)
    return found


def _check(
    found: Isolation, method: str, path: str, answer: Any, expect: frozenset[int] | None
) -> None:
    found.attempts += 1
    if A_SECRET in answer.text:
        found.leaks.append(f"{method} {path} -> {answer.status_code}")
    if expect is not None and answer.status_code not in expect:
        found.wrong.append(f"{method} {path} -> {answer.status_code}, expected {sorted(expect)}")
