"""The hot routes (``server.hot``): a plain append or render answered off FastAPI's routing
is answered as the app answers it, refusals included, and counted under its route."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from server_harness import bearer, make_service

from contextfold.server import hot
from contextfold.server.app import create_app
from contextfold.server.keys import create_key
from contextfold.server.service import Service

API = "/api/v1/sessions"
VIA_APP = {"x-trace": "1"}
"""A header the hot routes do not read: the request goes through the app."""


@pytest.fixture
def service() -> Service:
    return make_service(runner=False, key_cache_s=0)


@pytest.fixture
def client(service: Service) -> Iterator[TestClient]:
    with TestClient(create_app(service), base_url="http://127.0.0.1") as c:
        yield c


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The requests the hot routes served (their work, counted)."""
    served: list[str] = []
    append, render = hot.append_records, hot.render_body

    async def appended(*args: Any) -> Any:
        served.append("append")
        return await append(*args)

    async def rendered(*args: Any) -> Any:
        served.append("render")
        return await render(*args)

    monkeypatch.setattr(hot, "append_records", appended)
    monkeypatch.setattr(hot, "render_body", rendered)
    return served


def answer(response: Any) -> tuple[int, Any]:
    """Status and body, without the times a record is stamped with or the session's id."""
    body = response.json()
    for record in body.get("messages", []) if isinstance(body, dict) else []:
        if isinstance(record, dict):
            record.pop("created_at", None)
    text = json.dumps(body).replace("s-hot", "SID").replace("s-app", "SID")
    return response.status_code, json.loads(text)


def test_hot_and_app_answer_alike(client: TestClient, service: Service, taken: list[str]) -> None:
    key = bearer(create_key(service.memory, "t"))
    other = bearer(create_key(service.memory, "u"))
    for sid in ("s-hot", "s-app"):
        assert client.post(API, json={"id": sid, "system": "s"}, headers=key).status_code == 201
        view = {"preset": "offline", "budget": 500}
        assert client.put(f"{API}/{sid}/views/v", json=view, headers=key).status_code == 200
    requests: list[tuple[str, str, dict[str, Any] | None, dict[str, str]]] = [
        ("POST", "messages", {"messages": [{"role": "user", "content": "hi"}]}, key),
        ("POST", "messages", {"messages": [{"role": "assistant", "content": "yo"}] * 2}, key),
        ("POST", "messages", {"messages": [{"role": "wizard", "content": "x"}]}, key),
        ("POST", "messages", {"messages": [{"role": "tool", "content": "x"}]}, key),
        ("POST", "messages", {"messages": []}, key),
        ("POST", "messages", {"parent": 99, "messages": [{"role": "user", "content": "x"}]}, key),
        ("POST", "messages", {"messages": [{"role": "user", "content": "hi"}]}, other),
        ("POST", "messages", {"messages": [{"role": "user", "content": "hi"}]}, {}),
        ("GET", "views/v/render", None, key),
        ("GET", "views/nope/render", None, key),
        ("GET", "views/v/render", None, other),
        ("GET", "views/v/render", None, bearer("cf_000000000000_" + "x" * 32)),
    ]
    for method, path, body, headers in requests:
        hot_answer = client.request(method, f"{API}/s-hot/{path}", json=body, headers=headers)
        app_answer = client.request(
            method, f"{API}/s-app/{path}", json=body, headers={**headers, **VIA_APP}
        )
        assert answer(hot_answer) == answer(app_answer), (method, path, body)
    assert client.post(API + "/s-hot/messages", content=b"{", headers=key).status_code == 422
    missing = client.post(API + "/gone/messages", json=requests[0][2], headers=key)
    assert missing.status_code == 404 and "gone" in missing.json()["error"]["message"]
    assert taken.count("append") == 6  # the bodies the model takes, with a key the store knows
    assert taken.count("render") == 3


def test_hot_requests_are_counted_under_their_routes(
    client: TestClient, service: Service, taken: list[str]
) -> None:
    key = bearer(create_key(service.memory, "t"))
    client.post(API, json={"id": "s"}, headers=key)
    client.put(f"{API}/s/views/v", json={"preset": "offline"}, headers=key)
    for i in range(3):
        message = {"messages": [{"role": "user", "content": f"m{i}"}]}
        assert client.post(f"{API}/s/messages", json=message, headers=key).status_code == 201
    assert client.get(f"{API}/s/views/v/render", headers=key).status_code == 200
    assert taken == ["append"] * 3 + ["render"]
    text = client.get("/metrics").text
    appends = 'route="/api/v1/sessions/{sid}/messages",status="201"'
    renders = 'route="/api/v1/sessions/{sid}/views/{name}/render",status="200"'
    assert f'contextfold_http_requests_total{{method="POST",{appends}}} 3.0' in text
    assert f'contextfold_http_requests_total{{method="GET",{renders}}} 1.0' in text
    assert "contextfold_messages_appended_total 3.0" in text
    assert "contextfold_renders_total 1.0" in text


def test_what_the_hot_routes_do_not_read_goes_to_the_app(
    client: TestClient, service: Service, taken: list[str]
) -> None:
    key = bearer(create_key(service.memory, "t"))
    client.post(API, json={"id": "s", "system": "s"}, headers=key)
    client.put(f"{API}/s/views/v", json={"preset": "offline"}, headers=key)
    message = {"messages": [{"role": "user", "content": "once"}]}
    once = {**key, "Idempotency-Key": "k1"}
    first = client.post(f"{API}/s/messages", json=message, headers=once)
    again = client.post(f"{API}/s/messages", json=message, headers=once)
    assert first.status_code == again.status_code == 201
    assert first.json()["messages"][0]["seq"] == again.json()["messages"][0]["seq"] == 2
    budget = client.get(f"{API}/s/views/v/render?budget=0", headers=key)
    assert budget.status_code == 422 and budget.json()["error"]["field"] == "budget"
    plain = client.post(
        f"{API}/s/messages", content=b"{}", headers={**key, "content-type": "text/plain"}
    )
    assert plain.status_code == 422
    many = {"messages": [{"role": "user", "content": "x" * 1000}] * 70}
    assert client.post(f"{API}/s/messages", json=many, headers=key).status_code == 201
    assert taken == []
