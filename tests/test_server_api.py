"""The REST API, endpoint by endpoint: shapes, paging, idempotency, errors, deletion."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conftest import NATO
from fastapi.testclient import TestClient
from server_harness import make_service

from contextfold.server.app import create_app
from contextfold.server.service import Service
from contextfold.store.ram import RAMStore
from contextfold.strategies import DEFAULT_PRESET

API = "/api/v1/sessions"


@pytest.fixture(params=[False, True], ids=["on-loop", "offloaded"])
def service(request: pytest.FixtureRequest) -> Service:
    """No background runner: compaction here is the compact endpoint's alone. Every test
    runs with the handlers' work on the loop (as for SQLite) and on threads (PostgreSQL)."""
    return make_service(auth=False, runner=False, offload=request.param)


@pytest.fixture
def client(service: Service) -> Iterator[TestClient]:
    with TestClient(create_app(service), base_url="http://127.0.0.1") as c:
        yield c


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def create(client: TestClient, sid: str = "s1", **body: Any) -> dict[str, Any]:
    answer = client.post(API, json={"id": sid, **body})
    assert answer.status_code == 201, answer.text
    found: dict[str, Any] = answer.json()
    return found


def append(client: TestClient, sid: str, *messages: dict[str, Any], key: str | None = None) -> Any:
    headers = {"Idempotency-Key": key} if key else {}
    return client.post(f"{API}/{sid}/messages", json={"messages": list(messages)}, headers=headers)


def chat(client: TestClient, sid: str, turns: int) -> None:
    for i in range(turns):
        words = " ".join(NATO)
        answer = append(
            client,
            sid,
            user(f"question {i} " + words * 4),
            {"role": "assistant", "content": f"answer {i} " + words * 6},
        )
        assert answer.status_code == 201


def error(answer: Any, status: int, code: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    found: dict[str, Any] = answer.json()["error"]
    assert found["code"] == code
    return found


# -- sessions ---------------------------------------------------------------


def test_create_logs_the_system_prompt_and_reports_counts(client: TestClient) -> None:
    out = create(client, "s1", system="be brief", meta={"app": "x"})
    assert out["id"] == "s1" and out["meta"] == {"app": "x"}
    assert out["encoding"] == "o200k_base"
    assert out["last_seq"] == 1 and out["messages"] == 1 and out["tokens"] > 0
    assert out["last_at"] >= out["created_at"] > 0
    history = client.get(f"{API}/s1/messages").json()["messages"]
    assert [m["message"] for m in history] == [{"role": "system", "content": "be brief"}]


def test_create_without_id_makes_one(client: TestClient) -> None:
    answer = client.post(API, json={})
    assert answer.status_code == 201
    sid = answer.json()["id"]
    assert client.get(f"{API}/{sid}").json()["last_seq"] == 0


def test_create_refuses_a_taken_id_and_bad_fields(client: TestClient) -> None:
    create(client, "s1")
    assert error(client.post(API, json={"id": "s1"}), 409, "conflict")["field"] == "id"
    assert error(client.post(API, json={"id": "a/b"}), 422, "invalid_input")["field"] == "id"
    assert error(client.post(API, json={"id": "x" * 129}), 422, "invalid_input")["field"] == "id"
    bad = client.post(API, json={"id": "s2", "encoding": "nope"})
    assert error(bad, 422, "invalid_input")["field"] == "encoding"
    assert error(client.post(API, json={"colour": 1}), 422, "invalid_input")["field"] == "colour"
    assert error(client.post(API, json={"meta": [1]}), 422, "invalid_input")["field"] == "meta"
    assert client.get(f"{API}/s2").status_code == 404


def test_list_pages_by_id_and_searches(client: TestClient) -> None:
    for sid in ("b-chat", "a-chat", "c-task", "d-chat"):
        create(client, sid)
    first = client.get(API, params={"limit": 2}).json()
    assert [s["id"] for s in first["sessions"]] == ["a-chat", "b-chat"]
    assert first["next"] == "b-chat"
    second = client.get(API, params={"limit": 2, "after": first["next"]}).json()
    assert [s["id"] for s in second["sessions"]] == ["c-task", "d-chat"]
    assert second["next"] is None
    found = client.get(API, params={"q": "CHAT"}).json()
    assert [s["id"] for s in found["sessions"]] == ["a-chat", "b-chat", "d-chat"]
    assert error(client.get(API, params={"limit": 501}), 422, "invalid_input")["field"] == "limit"
    assert error(client.get(API, params={"limit": 0}), 422, "invalid_input")["field"] == "limit"


def test_get_and_delete(client: TestClient, service: Service) -> None:
    create(client, "s1")
    append(client, "s1", user("hello"), key="k")
    client.put(f"{API}/s1/views/default", json={"preset": "offline", "budget": 500})
    assert client.get(f"{API}/s1").json()["messages"] == 1
    assert client.delete(f"{API}/s1").status_code == 204
    error(client.get(f"{API}/s1"), 404, "not_found")
    error(client.delete(f"{API}/s1"), 404, "not_found")
    error(append(client, "s1", user("again")), 404, "not_found")
    assert service.memory.store.list_sessions() == []
    # the same id again starts clean: no log, no view, no remembered key
    create(client, "s1")
    assert client.get(f"{API}/s1/views").json() == {"views": []}
    again = append(client, "s1", user("hello"), key="k").json()["messages"]
    assert [m["seq"] for m in again] == [1]


def test_unknown_session_is_404_everywhere(client: TestClient) -> None:
    for method, path in [
        ("GET", f"{API}/nope"),
        ("GET", f"{API}/nope/messages"),
        ("GET", f"{API}/nope/views"),
        ("GET", f"{API}/nope/views/default/render"),
        ("GET", f"{API}/nope/events"),
    ]:
        error(client.request(method, path), 404, "not_found")


# -- messages ---------------------------------------------------------------


def test_append_one_or_a_batch(client: TestClient) -> None:
    create(client, "s1", system="sys")
    one = append(client, "s1", user("hi"))
    assert one.status_code == 201
    assert [(m["seq"], m["message"]) for m in one.json()["messages"]] == [(2, user("hi"))]
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    batch = append(client, "s1", call, {"role": "tool", "tool_call_id": "c1", "content": "ok"})
    records = batch.json()["messages"]
    assert [m["seq"] for m in records] == [3, 4]
    assert all(m["tokens"] > 0 and m["created_at"] > 0 for m in records)


def test_bad_batch_names_field_and_index_and_stores_nothing(client: TestClient) -> None:
    create(client, "s1", system="sys")
    append(client, "s1", user("hi"))
    orphan = append(client, "s1", user("a"), {"role": "tool", "tool_call_id": "zz", "content": "x"})
    found = error(orphan, 422, "invalid_input")
    assert (found["field"], found["index"]) == ("tool_call_id", 1)
    role = error(
        append(client, "s1", user("a"), {"role": "robot", "content": "x"}), 422, "invalid_input"
    )
    assert (role["field"], role["index"]) == ("messages[1].role", 1)
    no_content = error(append(client, "s1", {"role": "user"}), 422, "invalid_input")
    assert (no_content["field"], no_content["index"]) == ("content", 0)
    extra = error(
        append(client, "s1", {"role": "user", "content": "x", "x": 1}), 422, "invalid_input"
    )
    assert extra["index"] == 0 and extra["field"] == "messages[0].x"
    error(append(client, "s1"), 422, "invalid_input")
    too_many = client.post(f"{API}/s1/messages", json={"messages": [user("x")] * 1001})
    assert error(too_many, 422, "invalid_input")["field"] == "messages"
    assert client.get(f"{API}/s1").json()["last_seq"] == 2


def test_idempotency_key_retry_returns_the_same_records(client: TestClient) -> None:
    create(client, "s1")
    first = append(client, "s1", user("a"), user("b"), key="req-1")
    retry = append(client, "s1", user("a"), user("b"), key="req-1")
    assert retry.status_code == 201
    assert retry.json() == first.json()
    assert client.get(f"{API}/s1").json()["last_seq"] == 2
    other = append(client, "s1", user("a"), user("b"), key="req-2")
    assert [m["seq"] for m in other.json()["messages"]] == [3, 4]


def test_idempotency_key_with_another_body_is_409_and_stores_nothing(client: TestClient) -> None:
    create(client, "s1")
    append(client, "s1", user("a"), user("b"), key="req-1")
    found = error(append(client, "s1", user("a"), user("c"), key="req-1"), 409, "conflict")
    assert found["field"] == "Idempotency-Key"
    error(append(client, "s1", user("a"), user("b"), user("c"), key="req-1"), 409, "conflict")
    error(append(client, "s1", user("a"), key="req-1"), 409, "conflict")
    assert client.get(f"{API}/s1").json()["last_seq"] == 2


def test_idempotency_across_processes_is_answered_by_the_store() -> None:
    store = RAMStore()
    with TestClient(
        create_app(make_service(store, auth=False, runner=False)), base_url="http://127.0.0.1"
    ) as one:
        create(one, "s1")
        first = append(one, "s1", user("a"), user("b"), key="req-1").json()
    # another process over the same store has not seen the key
    with TestClient(
        create_app(make_service(store, auth=False, runner=False)), base_url="http://127.0.0.1"
    ) as two:
        assert append(two, "s1", user("a"), user("b"), key="req-1").json() == first
        error(append(two, "s1", user("x"), user("y"), key="req-1"), 409, "conflict")
        assert two.get(f"{API}/s1").json()["last_seq"] == 2


def test_history_pages_by_seq_and_is_never_folded(client: TestClient) -> None:
    create(client, "s1", system="sys")
    chat(client, "s1", 40)
    client.put(f"{API}/s1/views/default", json={"preset": "offline", "budget": 2000})
    assert client.post(f"{API}/s1/views/default/compact").json()["folds"]
    seqs: list[int] = []
    after = 0
    while True:
        page = client.get(f"{API}/s1/messages", params={"after": after, "limit": 30}).json()
        seqs += [m["seq"] for m in page["messages"]]
        if page["next_after"] is None:
            break
        after = page["next_after"]
    assert seqs == list(range(1, 82))
    last = client.get(f"{API}/s1/messages", params={"after": 81}).json()
    assert last == {"messages": [], "next_after": None}
    exact = client.get(f"{API}/s1/messages", params={"after": 41, "limit": 40}).json()
    assert exact["next_after"] is None and len(exact["messages"]) == 40
    bad = client.get(f"{API}/s1/messages", params={"limit": 1001})
    assert error(bad, 422, "invalid_input")["field"] == "limit"


# -- views ------------------------------------------------------------------


def test_put_view_creates_then_updates_what_is_given(client: TestClient) -> None:
    create(client, "s1")
    made = client.put(f"{API}/s1/views/main", json={"preset": "offline", "budget": 900})
    assert made.status_code == 200
    assert made.json()["version"] == 1 and made.json()["config"]["budget"] == 900
    changed = client.put(f"{API}/s1/views/main", json={"budget": 700, "expected_version": 1})
    config = changed.json()["config"]
    assert changed.json()["version"] == 2
    assert (config["budget"], config["preset"]) == (700, "offline")
    stale = client.put(f"{API}/s1/views/main", json={"budget": 600, "expected_version": 1})
    error(stale, 409, "conflict")
    assert client.get(f"{API}/s1/views/main").json()["config"]["budget"] == 700
    listed = client.get(f"{API}/s1/views").json()["views"]
    assert [(v["name"], v["version"]) for v in listed] == [("main", 2)]


def test_a_view_put_without_a_preset_folds_with_the_default(
    client: TestClient, service: Service
) -> None:
    create(client, "s1", system="sys")
    chat(client, "s1", 40)
    made = client.put(f"{API}/s1/views/main", json={"budget": 2000})
    assert made.json()["config"]["preset"] == DEFAULT_PRESET
    report = client.post(f"{API}/s1/views/main/compact").json()
    assert report["folds"] and report["tokens_after"] < report["tokens_before"]
    # A record an earlier version stored without a preset is shown and folds the same way.
    old = {"preset": None, "pipeline": None, "options": {}, "budget": 2000, "local": False}
    service.memory.store.put_view(service.session("local", "s1").id, "old", old)
    assert client.get(f"{API}/s1/views/old").json()["config"]["preset"] == DEFAULT_PRESET
    assert client.post(f"{API}/s1/views/old/compact").json()["folds"]


def test_put_view_refuses_bad_settings_naming_the_field(client: TestClient) -> None:
    create(client, "s1")
    for body, field in [
        ({"preset": "nope"}, "preset"),
        ({"budget": 0}, "budget"),
        ({"budget": "many"}, "budget"),
        ({"high_water": 2}, "high_water"),
        ({"low_water": 0.95, "high_water": 0.9}, "low_water"),
        ({"preset": "offline", "pipeline": {"strategies": []}}, "pipeline"),
        ({"filter": {"bogus": 1}}, "filter.bogus"),
        ({"colour": "red"}, "colour"),
    ]:
        found = error(client.put(f"{API}/s1/views/v", json=body), 422, "invalid_input")
        assert found["field"] == field, (body, found)
    error(client.get(f"{API}/s1/views/v"), 404, "not_found")


def test_render_reports_what_it_did(client: TestClient) -> None:
    create(client, "s1", system="sys")
    chat(client, "s1", 10)
    client.put(f"{API}/s1/views/default", json={"preset": "offline", "budget": 100_000})
    out = client.get(f"{API}/s1/views/default/render").json()
    assert out["messages"][0] == {"role": "system", "content": "sys"}
    assert len(out["messages"]) == 21
    assert out["report"] == {
        "tokens": out["report"]["tokens"],
        "budget": 100_000,
        "folds": [],
        "omitted": 0,
        "clipped": [],
        "whole": True,
        "recalled": [],
        "provisional": [],
        "pinned": [],
    }
    tight = client.get(f"{API}/s1/views/default/render", params={"budget": 800}).json()
    assert tight["report"]["budget"] == 800 and tight["report"]["tokens"] <= 800
    # Nothing folded yet: provisional folds stand where the budget would cut.
    assert tight["report"]["omitted"] == 0 and tight["report"]["provisional"]
    small = client.get(f"{API}/s1/views/default/render", params={"budget": 5})
    assert error(small, 422, "budget_too_small")["field"] == "budget"
    for huge in (2**31, 2**64):  # schemathesis's find: a 2**64 budget was a 500 once
        answer = client.get(f"{API}/s1/views/default/render", params={"budget": huge})
        assert error(answer, 422, "invalid_input")["field"] == "budget"
        put = client.put(f"{API}/s1/views/default", json={"budget": huge})
        assert error(put, 422, "invalid_input")["field"] == "budget"
    error(client.get(f"{API}/s1/views/other/render"), 404, "not_found")


def test_compact_then_folds_and_render_use_them(client: TestClient) -> None:
    create(client, "s1", system="sys")
    chat(client, "s1", 40)
    client.put(f"{API}/s1/views/default", json={"preset": "offline", "budget": 2000})
    report = client.post(f"{API}/s1/views/default/compact").json()
    assert report["folds"] and report["tokens_after"] < report["tokens_before"]
    assert report["failed"] == [] and report["degraded"] is False
    folds = client.get(f"{API}/s1/views/default/folds").json()["folds"]
    assert folds and all(f["superseded_by"] is None for f in folds)
    fold = folds[0]
    assert 1 <= fold["start"] <= fold["end"] <= 81
    assert fold["tokens_after"] < fold["tokens_before"] and fold["text"]
    assert {"kind", "strategy", "model", "placement", "created_at", "id"} <= set(fold)
    rendered = client.get(f"{API}/s1/views/default/render").json()
    assert set(rendered["report"]["folds"]) <= {f["id"] for f in folds}
    assert rendered["report"]["folds"] and rendered["report"]["tokens"] <= 2000
    chat(client, "s1", 30)
    client.post(f"{API}/s1/views/default/compact")
    every = client.get(f"{API}/s1/views/default/folds", params={"superseded": True}).json()
    active = client.get(f"{API}/s1/views/default/folds").json()
    assert len(every["folds"]) >= len(active["folds"])
    if len(every["folds"]) > len(active["folds"]):
        assert any(f["superseded_by"] for f in every["folds"])


def test_folds_report_the_log_tokens_of_their_range(client: TestClient) -> None:
    create(client, "s1", system="sys")
    chat(client, "s1", 40)
    client.put(f"{API}/s1/views/default", json={"preset": "offline", "budget": 2000})
    compacted = client.post(f"{API}/s1/views/default/compact").json()["folds"]
    chat(client, "s1", 30)
    client.post(f"{API}/s1/views/default/compact")
    logged = client.get(f"{API}/s1/messages", params={"limit": 500}).json()["messages"]
    tokens = {m["seq"]: m["tokens"] for m in logged}
    every = client.get(f"{API}/s1/views/default/folds", params={"superseded": True}).json()
    for fold in compacted + every["folds"]:
        in_log = sum(tokens[seq] for seq in range(fold["start"], fold["end"] + 1))
        assert fold["log_tokens"] == in_log, fold


def test_a_view_reports_its_floor_the_smallest_budget_it_renders_at(
    client: TestClient,
) -> None:
    create(client, "s1", system="sys")
    chat(client, "s1", 3)
    view = client.put(f"{API}/s1/views/default", json={"preset": "offline", "budget": 900}).json()
    floor = view["floor"]
    assert floor == client.get(f"{API}/s1/views/default").json()["floor"]
    at = client.get(f"{API}/s1/views/default/render", params={"budget": floor})
    assert at.status_code == 200 and at.json()["report"]["tokens"] <= floor
    below = client.get(f"{API}/s1/views/default/render", params={"budget": floor - 1})
    error(below, 422, "budget_too_small")
    append(client, "s1", user("a much longer question " * 80))
    [listed] = client.get(f"{API}/s1/views").json()["views"]
    assert listed["floor"] > floor
    below = client.get(f"{API}/s1/views/default/render", params={"budget": listed["floor"] - 1})
    error(below, 422, "budget_too_small")


def test_the_background_runner_compacts_views_used_through_the_api() -> None:
    service = make_service(auth=False)
    with TestClient(create_app(service), base_url="http://127.0.0.1") as client:
        create(client, "s1", system="sys")
        client.put(f"{API}/s1/views/default", json={"preset": "offline", "budget": 2000})
        chat(client, "s1", 40)
        assert service.runner is not None and service.runner.wait_idle(30)
        folds = client.get(f"{API}/s1/views/default/folds").json()["folds"]
        assert folds
        assert client.get(f"{API}/s1/views/default/render").json()["report"]["folds"]
    assert service.runner is None  # stopped with the app
