"""Several server processes on one store, each a real ``contextfold serve``.

Behind one port (``--processes``): the children share it, stop together on a
signal and a dead one is started again. As separate servers on one SQLite file
or one PostgreSQL schema (what a balancer in front of them sees): an
``Idempotency-Key`` raced on both stores one body, a conversation proxied
through both is logged once on one branch, and events made on one reach the
streams held on the other.
"""

from __future__ import annotations

import itertools
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_openai import openai_reply
from fake_providers import FakeProvider, Reply, Request
from serve_harness import (
    Served,
    alive,
    kill_all,
    left_behind,
    session_members,
    start_serve,
    stop,
)
from test_server_events import Stream

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")

API = "/api/v1/sessions"
WAIT_S = 30.0


def children(pid: int) -> set[int]:
    """The live processes whose parent is ``pid``."""
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[1]) == pid:
            found.add(int(entry.name))
    return found


def servers_of(served: Served) -> set[int]:
    """The supervisor's server processes (its children running ``serve``)."""
    return {
        pid
        for pid in children(served.pid)
        if "serve" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    }


def eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {what}"
        time.sleep(0.05)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


@pytest.mark.parametrize(
    ("signals", "group"),
    [([signal.SIGTERM], False), ([signal.SIGINT], True), ([signal.SIGTERM] * 2, False)],
    ids=["sigterm", "ctrl-c-in-a-terminal", "sigterm-twice"],
)
def test_processes_share_the_port_and_stop_together(
    tmp_path: Path, signals: list[signal.Signals], group: bool
) -> None:
    served = start_serve(
        str(tmp_path / "shared.db"), tmp_path / "serve.log", extra=["--processes", "3"]
    )
    before: set[int] = set()
    try:
        eventually(lambda: len(servers_of(served)) == 3, "three server processes")
        with httpx.Client(base_url=served.base, timeout=WAIT_S) as client:
            assert client.post(API, json={"id": "s1"}).status_code == 201
            for i in range(30):  # a new connection each: any of the three may take it
                sent = httpx.post(
                    f"{served.base}{API}/s1/messages", json={"messages": [user(f"m{i}")]}
                )
                assert sent.status_code == 201, sent.text
            assert client.get(f"{API}/s1").json()["messages"] == 30
        before = session_members(served.pid)
        assert stop(served, signals, gap_s=0.2, group=group) == 0
        left = left_behind(before, served.pid)
        assert not left, f"left behind: {left}"
    finally:
        kill_all(session_members(served.pid) | before)
        served.process.kill()


def test_a_server_process_that_dies_is_reported_and_started_again(tmp_path: Path) -> None:
    served = start_serve(
        str(tmp_path / "shared.db"), tmp_path / "serve.log", extra=["--processes", "2"]
    )
    try:
        eventually(lambda: len(servers_of(served)) == 2, "two server processes")
        first = servers_of(served)
        victim = min(first)
        kill_all([victim])
        eventually(
            lambda: len(servers_of(served)) == 2 and victim not in servers_of(served),
            "a new server process in the dead one's place",
        )
        eventually(lambda: not alive([victim]), "the killed server process gone")
        log = served.log.read_text()
        assert f"server process {victim} ended unexpectedly (killed by SIGKILL)" in log
        for _ in range(10):
            assert httpx.get(f"{served.base}/healthz", timeout=WAIT_S).status_code == 200
        assert stop(served, [signal.SIGTERM]) == 0
    finally:
        kill_all(session_members(served.pid))
        served.process.kill()


def test_several_processes_need_a_shared_store(tmp_path: Path) -> None:
    from contextfold.cli import main

    code = main(["serve", "--processes", "2", "--database", "memory://", "--no-auth"])
    assert code == 2
    assert main(["serve", "--processes", "0", "--database", str(tmp_path / "x.db")]) == 2


# -- two servers on one store -------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "shared.db")
        return
    from pg import fresh_schema, require_postgres, url

    require_postgres()
    with fresh_schema() as schema:
        yield url(schema)


@contextmanager
def two_servers(database: str, tmp_path: Path, *extra: str) -> Iterator[tuple[Served, Served]]:
    """Two ``contextfold serve`` on one store, each on its own port."""
    with ExitStack() as stack:
        pair = []
        for name in ("one", "two"):
            served = start_serve(database, tmp_path / f"{name}.log", extra=list(extra))
            stack.callback(lambda s=served: _ended(s))
            pair.append(served)
        yield pair[0], pair[1]


def _ended(served: Served) -> None:
    members = session_members(served.pid)
    if served.process.poll() is None:
        stop(served, [signal.SIGTERM])
    kill_all(members)


def _raced(sends: list[tuple[str, list[dict[str, Any]]]], sid: str, key: str) -> list[int]:
    """Every (server, body) sent at once under ``key``; the status codes in order."""
    start = threading.Barrier(len(sends))
    codes = [0] * len(sends)

    def send(i: int) -> None:
        base, body = sends[i]
        with httpx.Client(timeout=WAIT_S) as client:
            start.wait()
            answer = client.post(
                f"{base}{API}/{sid}/messages",
                json={"messages": body},
                headers={"Idempotency-Key": key},
            )
            codes[i] = answer.status_code

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(sends))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    return codes


def test_one_key_raced_on_two_server_processes_stores_one_body_whole(
    database: str, tmp_path: Path
) -> None:
    """Bodies of two, three and one message under one key, each sent to both servers at
    once: one body is stored, once, and every request for another is a 409; never the
    longer body's extra message (the window a process-local lock left open)."""
    bodies = [[user("a"), user("b")], [user("a"), user("b"), user("c")], [user("x")]]
    with two_servers(database, tmp_path) as (one, two), httpx.Client(timeout=WAIT_S) as client:
        for round_ in range(6):
            sid = f"race-{round_}"
            assert client.post(f"{one.base}{API}", json={"id": sid}).status_code == 201
            sends = [(s.base, body) for body in bodies for s in (one, two)]
            sends = sends[round_ % len(sends) :] + sends[: round_ % len(sends)]
            codes = _raced(sends, sid, f"key-{round_}")
            logged = client.get(f"{two.base}{API}/{sid}/messages").json()["messages"]
            stored = [m["message"] for m in logged]
            assert stored in bodies, f"round {round_}: the log holds {stored}"
            for (_, body), code in zip(sends, codes, strict=True):
                assert code == (201 if body == stored else 409), (round_, body, code)


def _upstream_answers(request: Request) -> Reply:
    """The same answer to the same conversation, whichever server forwards it."""
    said = [m["content"] for m in request.body["messages"] if m["role"] == "user"]
    return openai_reply(f"answer to {said[-1]}", prompt_tokens=20)


def _asked_at_once(bases: list[str], conversation: list[dict[str, Any]]) -> list[Any]:
    """The conversation sent through the proxy of every server at the same instant."""
    start = threading.Barrier(len(bases))
    answers: list[Any] = [None] * len(bases)

    def ask(i: int) -> None:
        start.wait()
        answers[i] = httpx.post(
            f"{bases[i]}/v1/chat/completions",
            json={"model": "gpt-4o-mini", "messages": conversation},
            headers={"X-Contextfold-Session": "chat"},
            timeout=WAIT_S,
        )

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(bases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    return answers


def test_two_processes_proxying_one_conversation_log_it_once_on_one_branch(
    database: str, tmp_path: Path
) -> None:
    """Each turn of a client's conversation is sent to both servers at once (a client
    retrying elsewhere, a balancer without sticky routing): each message is logged once,
    on one branch, and both servers answer every turn."""
    with FakeProvider("openai") as upstream:
        upstream.answer("POST", "/v1/chat/completions", _upstream_answers)
        flag = ["--upstream", f"openai-compatible:{upstream.url}"]
        with two_servers(database, tmp_path, *flag) as (one, two):
            conversation: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
            for turn in range(5):
                conversation.append(user(f"question {turn}"))
                answers = _asked_at_once([one.base, two.base], conversation)
                said = {a.json()["choices"][0]["message"]["content"] for a in answers}
                assert said == {f"answer to question {turn}"}, said
                conversation.append({"role": "assistant", "content": said.pop()})
            logged = httpx.get(f"{one.base}{API}/chat/messages", params={"limit": 100}).json()
            contents = [m["message"]["content"] for m in logged["messages"]]
            assert contents == [m["content"] for m in conversation]
            branches = httpx.get(f"{two.base}{API}/chat/branches").json()["branches"]
            assert [b["head"] for b in branches] == [len(conversation)]


def test_events_made_on_one_process_reach_a_stream_on_another(
    database: str, tmp_path: Path
) -> None:
    """A stream held on the second server gets the appends made through the first, and
    the events of the compaction the first runs: the same ones, once each, as a stream
    held on the first."""
    servers = two_servers(database, tmp_path, "--no-runner")
    with servers as (one, two), httpx.Client(timeout=WAIT_S) as client:
        api = f"{one.base}{API}"
        assert client.post(api, json={"id": "s1"}).status_code == 201
        view = {"preset": "offline", "budget": 400}
        assert client.put(f"{api}/s1/views/main", json=view).status_code == 200
        here, there = Stream(f"{api}/s1/events"), Stream(f"{two.base}{API}/s1/events")
        try:
            batch = [
                {
                    "role": "user" if i % 2 == 0 else "assistant",
                    "content": f"turn {i}: " + "word " * 40,
                }
                for i in range(12)
            ]
            assert client.post(f"{api}/s1/messages", json={"messages": batch}).status_code == 201
            assert there.next("appended") == {"last_seq": 12}
            compacted = client.post(f"{api}/s1/views/main/compact")
            assert compacted.status_code == 200, compacted.text
            assert compacted.json()["folds"], compacted.json()
            committed = there.next("committed")
            assert (committed["session"], committed["view"]) == ("s1", "main")
            time.sleep(1.5)  # a duplicate would have come by now (the poll is every 0.5 s)
            assert here.next("committed") == committed
            seen_here = [e for e in here.drained() if e[0] != "appended"]
            seen_there = [e for e in there.drained() if e[0] != "appended"]
            assert seen_there == seen_here
        finally:
            here.close()
            there.close()


def test_an_event_table_keeps_other_processes_events_only(tmp_path: Path) -> None:
    """The SQLite file's event table through two wakes (two processes' worth): each hears
    the other's announcements for the sessions it listens to, never its own."""
    from contextfold.store.sqlite import SQLiteStore
    from contextfold.store.wake import PollingWake

    path = tmp_path / "events.db"
    first, second = SQLiteStore(str(path)), SQLiteStore(str(path))
    try:
        one = PollingWake(first.last_seqs, 0.02, events=first)
        two = PollingWake(second.last_seqs, 0.02, events=second)
        heard: dict[str, list[tuple[str, str]]] = {"one": [], "two": []}
        first.put_event("s1", "elsewhere", json.dumps({"event": "before"}))  # not replayed
        stops = [
            one.listen_events("s1", lambda s, d: heard["one"].append((s, d))),
            two.listen_events("s1", lambda s, d: heard["two"].append((s, d))),
        ]
        one.announce("s1", "from one")
        two.announce("s1", "from two")
        two.announce("s2", "nobody listens")
        eventually(lambda: bool(heard["one"] and heard["two"]), "both heard the other")
        time.sleep(0.2)
        assert heard == {"one": [("s1", "from two")], "two": [("s1", "from one")]}
        for each in stops:
            each()
    finally:
        first.close()
        second.close()


def test_two_servers_watching_one_view_fold_it_one_job_at_a_time(
    database: str, tmp_path: Path
) -> None:
    """Both servers' runners watch the view (each rendered it) and both get appends: the
    view's lease lets one job at a time fold it, so no job fails or is refused, the
    active folds never overlap, and the view ends within its budget."""
    with two_servers(database, tmp_path) as (one, two), httpx.Client(timeout=WAIT_S) as client:
        bases = [f"{s.base}{API}/s1" for s in (one, two)]
        assert client.post(f"{one.base}{API}", json={"id": "s1"}).status_code == 201
        view = {"preset": "offline", "budget": 1500}
        assert client.put(f"{bases[0]}/views/main", json=view).status_code == 200
        for base in bases:
            assert client.get(f"{base}/views/main/render").status_code == 200
        streams = [Stream(f"{base}/events") for base in bases]
        try:
            for i in range(40):
                batch = [
                    user(f"question {i}: " + " ".join(f"w{(i * 7 + k) % 301}" for k in range(40))),
                    {"role": "assistant", "content": f"answer {i}: " + "fine " * 40},
                ]
                sent = client.post(f"{bases[i % 2]}/messages", json={"messages": batch})
                assert sent.status_code == 201
                time.sleep(0.05)

            def settled() -> bool:
                report = client.get(f"{bases[1]}/views/main/render").json()["report"]
                jobs = [client.get(f"{b}/views/main").json()["job"] for b in bases]
                return bool(report["tokens"] <= 1500 and jobs == [None, None])

            eventually(settled, "the view folded within its budget, no job running")
            time.sleep(1.0)  # the last events reach both streams
            folds = client.get(f"{bases[0]}/views/main/folds").json()["folds"]
            spans = sorted((f["start"], f["end"]) for f in folds)
            assert spans and all(a[1] < b[0] for a, b in itertools.pairwise(spans)), spans
            for stream in streams:
                kinds = [name for name, _ in stream.drained()]
                assert "committed" in kinds
                assert not {"failed", "degraded", "quarantined"} & set(kinds), kinds
        finally:
            for stream in streams:
                stream.close()
