"""The event stream over a real server on 127.0.0.1: appends and compaction arrive as SSE."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import NATO
from server_harness import add_key, bearer, make_service, running

from contextfold.server.app import create_app
from contextfold.server.service import Service
from contextfold.store.sqlite import SQLiteStore

API = "/api/v1/sessions"
TIMEOUT = 30.0


class Stream:
    """Reads an SSE response on a thread, handing each event (name, data) to a queue."""

    def __init__(self, url: str, **kwargs: Any) -> None:
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.listening = threading.Event()
        self.ended = threading.Event()
        self.ended_at = 0.0  # time.time() when the server ended the stream
        self.status = 0
        self._client = httpx.Client(timeout=httpx.Timeout(TIMEOUT, read=None))
        self._thread = threading.Thread(target=self._read, args=(url, kwargs), daemon=True)
        self._thread.start()
        assert self.listening.wait(TIMEOUT), "the stream did not start listening"

    def _read(self, url: str, kwargs: dict[str, Any]) -> None:
        try:
            with self._client.stream("GET", url, **kwargs) as answer:
                self.status = answer.status_code
                name = ""
                for line in answer.iter_lines():
                    if line.startswith(": listening"):
                        self.listening.set()
                    elif line.startswith("event: "):
                        name = line[7:]
                    elif line.startswith("data: "):
                        self.events.put((name, json.loads(line[6:])))
                if answer.status_code != 200:
                    self.listening.set()
        except httpx.HTTPError:
            self.listening.set()
        finally:
            self.ended_at = time.time()
            self.ended.set()

    def next(self, wanted: str) -> Any:
        """The data of the next event named ``wanted`` (others are skipped)."""
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            try:
                name, data = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if name == wanted:
                return data
        raise AssertionError(f"no {wanted!r} event within {TIMEOUT} s")

    def drained(self) -> list[tuple[str, Any]]:
        """Every event received and not yet taken, without waiting."""
        found = []
        while not self.events.empty():
            found.append(self.events.get_nowait())
        return found

    def close(self) -> None:
        self._client.close()


@pytest.fixture
def served(tmp_path: Any) -> Iterator[tuple[str, Service, str]]:
    store = SQLiteStore(str(tmp_path / "events.db"))
    service = make_service(store)
    key = add_key(service.memory, "t1")
    with running(create_app(service)) as base:
        yield base, service, key


def chat_body(turn: int) -> dict[str, Any]:
    words = " ".join(NATO)
    return {
        "messages": [
            {"role": "user", "content": f"question {turn} " + words * 4},
            {"role": "assistant", "content": f"answer {turn} " + words * 6},
        ]
    }


def test_appends_and_compaction_are_streamed(served: tuple[str, Service, str]) -> None:
    base, _, key = served
    h = bearer(key)
    with httpx.Client(base_url=base, headers=h, timeout=TIMEOUT) as client:
        assert client.post(API, json={"id": "s1", "system": "sys"}).status_code == 201
        client.put(f"{API}/s1/views/default", json={"preset": "offline", "budget": 2000})
        stream = Stream(f"{base}{API}/s1/events", headers=h)
        try:
            assert client.post(f"{API}/s1/messages", json=chat_body(0)).status_code == 201
            assert stream.next("appended") == {"last_seq": 3}
            for turn in range(1, 40):
                client.post(f"{API}/s1/messages", json=chat_body(turn))
            planned = stream.next("planned")
            assert planned["session"] == "s1" and planned["view"] == "default"
            committed = stream.next("committed")
            assert committed["tokens_after"] < committed["tokens_before"]
            assert committed["session"] == "s1"
        finally:
            stream.close()


def test_appends_from_another_path_reach_the_stream(served: tuple[str, Service, str]) -> None:
    """An append through the library (another handle on the store) is announced too."""
    base, service, key = served
    with httpx.Client(base_url=base, headers=bearer(key), timeout=TIMEOUT) as client:
        client.post(API, json={"id": "s2"})
    stream = Stream(f"{base}{API}/s2/events", params={"api_key": key})
    try:
        service.memory.session("t1/s2").append({"role": "user", "content": "from the library"})
        assert stream.next("appended") == {"last_seq": 1}
    finally:
        stream.close()


def test_stream_refuses_other_tenants_and_bad_keys(served: tuple[str, Service, str]) -> None:
    base, service, key = served
    other = add_key(service.memory, "t2")
    with httpx.Client(base_url=base, headers=bearer(key), timeout=TIMEOUT) as client:
        client.post(API, json={"id": "s3"})
    with httpx.Client(base_url=base, timeout=TIMEOUT) as client:
        assert client.get(f"{API}/s3/events", headers=bearer(other)).status_code == 404
        assert client.get(f"{API}/s3/events", params={"api_key": other}).status_code == 404
        assert client.get(f"{API}/s3/events").status_code == 401


def test_a_closed_stream_unsubscribes(served: tuple[str, Service, str]) -> None:
    base, service, key = served
    with httpx.Client(base_url=base, headers=bearer(key), timeout=TIMEOUT) as client:
        client.post(API, json={"id": "s4"})
    stream = Stream(f"{base}{API}/s4/events", headers=bearer(key))
    assert service.hub.subscribers("t1/s4") == 1
    stream.close()
    deadline = time.monotonic() + TIMEOUT
    while service.hub.subscribers("t1/s4") and time.monotonic() < deadline:
        time.sleep(0.05)  # noticed without anything to write
    assert service.hub.subscribers("t1/s4") == 0
