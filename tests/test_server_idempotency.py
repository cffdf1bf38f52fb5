"""Idempotency keys on appends, answered by the store: across processes sharing a
SQLite file, and under concurrent requests."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from server_harness import make_service

from contextfold.core.log import LoggedMessage
from contextfold.server.app import create_app
from contextfold.store.ram import RAMStore
from contextfold.store.sqlite import SQLiteStore

API = "/api/v1/sessions"


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def append(client: TestClient, *messages: dict[str, Any], key: str) -> Any:
    body = {"messages": list(messages)}
    return client.post(f"{API}/s1/messages", json=body, headers={"Idempotency-Key": key})


def history(client: TestClient) -> list[tuple[int, dict[str, Any]]]:
    found = client.get(f"{API}/s1/messages", params={"limit": 1000}).json()["messages"]
    return [(m["seq"], m["message"]) for m in found]


def conflict(answer: Any) -> None:
    assert answer.status_code == 409, answer.text
    assert answer.json()["error"]["field"] == "Idempotency-Key"


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[tuple[TestClient, TestClient]]:
    """Two services over one SQLite file, each with its own store: what two processes see."""
    path = tmp_path / "shared.db"
    with (
        TestClient(
            create_app(make_service(SQLiteStore(path), auth=False, runner=False)),
            base_url="http://127.0.0.1",
        ) as one,
        TestClient(
            create_app(make_service(SQLiteStore(path), auth=False, runner=False)),
            base_url="http://127.0.0.1",
        ) as two,
    ):
        assert one.post(API, json={"id": "s1", "system": "sys"}).status_code == 201
        yield one, two


def test_a_retry_elsewhere_with_more_messages_is_409_and_stores_nothing(
    processes: tuple[TestClient, TestClient],
) -> None:
    one, two = processes
    first = append(one, user("a"), user("b"), key="req-1")
    assert [m["seq"] for m in first.json()["messages"]] == [2, 3]
    before = history(one)
    conflict(append(two, user("a"), user("b"), user("c"), key="req-1"))
    assert history(two) == before
    assert two.get(f"{API}/s1").json()["messages"] == 3


def test_a_retry_elsewhere_with_the_same_body_gets_the_same_records(
    processes: tuple[TestClient, TestClient],
) -> None:
    one, two = processes
    first = append(one, user("a"), user("b"), key="req-1")
    again = append(two, user("a"), user("b"), key="req-1")
    assert again.status_code == 201
    assert again.json() == first.json()
    assert [seq for seq, _ in history(two)] == [1, 2, 3]
    assert [m["seq"] for m in append(two, user("c"), key="req-2").json()["messages"]] == [4]


@pytest.mark.parametrize(
    "retry",
    [[user("a"), user("x")], [user("a")], [user("b"), user("a")], [{"role": "user"}, user("b")]],
    ids=["other-message", "fewer", "reordered", "invalid"],
)
def test_a_retry_elsewhere_with_another_body_is_409_and_stores_nothing(
    processes: tuple[TestClient, TestClient], retry: list[dict[str, Any]]
) -> None:
    one, two = processes
    append(one, user("a"), user("b"), key="req-1")
    before = history(one)
    conflict(append(two, *retry, key="req-1"))
    assert history(two) == before


def test_a_key_is_refused_when_only_some_of_its_messages_are_stored(
    processes: tuple[TestClient, TestClient],
) -> None:
    """A message stored under ``K:1`` by hand (a library caller) makes ``K`` taken."""
    one, two = processes
    assert one.post(f"{API}/s1/messages", json={"messages": [user("b")]}).status_code == 201
    session = one.app.state.service.session("local", "s1")  # type: ignore[attr-defined]
    session.extend([user("b")], keys=["req-1:1"])
    before = history(two)
    conflict(append(two, user("a"), user("b"), key="req-1"))
    assert history(two) == before


def concurrently(requests: list[tuple[TestClient, list[dict[str, Any]]]], key: str) -> list[Any]:
    """Send every (client, body) at once (released together by a barrier); the answers
    in order."""
    start = threading.Barrier(len(requests))
    answers: list[Any] = [None] * len(requests)

    def send(i: int) -> None:
        client, body = requests[i]
        start.wait()
        answers[i] = append(client, *body, key=key)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return answers


class SlowLookup(RAMStore):
    """Keys looked up, then answered slowly, the more keys the slower: concurrent
    requests all look before any appends, and the shortest batch appends first,
    unless this process makes them take turns."""

    def keyed(self, session_id: str, keys: Sequence[str]) -> dict[str, LoggedMessage]:
        found = super().keyed(session_id, keys)
        time.sleep(0.02 * len(keys))
        return found


@pytest.fixture
def offloaded() -> Iterator[TestClient]:
    """Handlers on worker threads (as for PostgreSQL), so requests really overlap."""
    with TestClient(
        create_app(make_service(SlowLookup(), auth=False, runner=False, offload=True)),
        base_url="http://127.0.0.1",
    ) as client:
        assert client.post(API, json={"id": "s1"}).status_code == 201
        yield client


def test_concurrent_requests_with_one_key_store_once(offloaded: TestClient) -> None:
    answers = concurrently([(offloaded, [user("a"), user("b")])] * 8, "req-1")
    assert {a.status_code for a in answers} == {201}
    assert all(a.json() == answers[0].json() for a in answers)
    assert history(offloaded) == [(1, user("a")), (2, user("b"))]


def test_concurrent_requests_with_one_key_and_other_bodies_store_one_body(
    offloaded: TestClient,
) -> None:
    bodies = [[user("a"), user("b")], [user("a"), user("b"), user("c")], [user("x")]] * 3
    answers = concurrently([(offloaded, body) for body in bodies], "req-1")
    assert sorted(a.status_code for a in answers) == [201] * 3 + [409] * 6
    won = {i % 3 for i, a in enumerate(answers) if a.status_code == 201}
    assert len(won) == 1
    assert [m for _, m in history(offloaded)] == bodies[won.pop()]


def test_concurrent_requests_from_two_processes_store_once(
    processes: tuple[TestClient, TestClient],
) -> None:
    one, two = processes
    answers = concurrently(
        [(one, [user("a"), user("b")]), (two, [user("a"), user("b")])] * 4, "req-1"
    )
    assert {a.status_code for a in answers} == {201}
    assert all(a.json() == answers[0].json() for a in answers)
    assert [seq for seq, _ in history(two)] == [1, 2, 3]
