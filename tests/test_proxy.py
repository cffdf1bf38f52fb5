"""The OpenAI-compatible proxy, end to end: the official ``openai`` SDK as the client,
a real uvicorn server on 127.0.0.1 running ``create_app``, and a real HTTP
upstream on 127.0.0.1 (``tests/fake_providers.py``) that records what it was sent.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from agent_log import RULES, agent_log
from fake_openai import openai_reply
from fake_providers import FakeProvider, Reply, error_reply
from server_harness import add_key, running

from contextfold.core.messages import Message
from contextfold.server.app import create_app
from contextfold.server.service import Service
from contextfold.server.settings import Settings

SYSTEM = {"role": "system", "content": "You are terse."}
CALL = {"id": "call_7", "type": "function", "function": {"name": "read", "arguments": '{"p": "a"}'}}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read",
            "description": "read a file",
            "parameters": {"type": "object", "properties": {"p": {"type": "string"}}},
        },
    }
]


@dataclass
class LiveServer:
    """``create_app(service)`` served by uvicorn on 127.0.0.1 (``tests/server_harness``)."""

    service: Service
    url: str

    def log(self, tenant: str, sid: str) -> list[Message]:
        """The session's whole log, as stored."""
        return [m.message for m in self.service.memory.store.messages(f"{tenant}/{sid}")]


@dataclass
class Rig:
    server: LiveServer
    upstream: FakeProvider

    def client(
        self, session: str | None = "s1", key: str = "unused", **extra: Any
    ) -> openai.OpenAI:
        headers = {"X-Contextfold-Session": session} if session else {}
        return openai.OpenAI(
            base_url=f"{self.server.url}/v1",
            api_key=key,
            max_retries=0,
            timeout=20,
            default_headers={**headers, **extra},
        )

    def sent(self, i: int = -1) -> dict[str, Any]:
        """The body of the upstream's ``i``-th chat request."""
        chats = [r for r in self.upstream.requests if r.path == "/v1/chat/completions"]
        body: dict[str, Any] = chats[i].body
        return body

    def log(self, sid: str = "s1", tenant: str = "local") -> list[Message]:
        return self.server.log(tenant, sid)


@contextmanager
def serve(tmp_path: Path, upstream: str | None, **settings: Any) -> Iterator[LiveServer]:
    settings = {"auth": False, **settings}
    service = Service(Settings(database=str(tmp_path / "cf.db"), upstream=upstream, **settings))
    try:
        with running(create_app(service)) as url:
            yield LiveServer(service, url)
    finally:
        service.close()


@pytest.fixture(params=[False, True], ids=["on-loop", "offloaded"])
def rig(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Rig]:
    """A served app and its upstream; the store work on the loop (SQLite's way) or on
    worker threads (as for PostgreSQL)."""
    with FakeProvider("openai") as upstream:
        upstream.routes.add(("GET", "/v1/models"))
        spec = f"openai-compatible:{upstream.url}"
        with serve(tmp_path, spec, upstream_timeout_s=1.0, offload=request.param) as server:
            yield Rig(server, upstream)


def sse(*events: Any) -> bytes:
    return b"".join(
        f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode() for e in events
    )


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-s",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def streamed(*pieces: str) -> Reply:
    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": p}) for p in pieces]
    body = sse(*events, chunk({}, "stop"), "[DONE]")
    return Reply(body=body, headers={"content-type": "text/event-stream"})


def tool_call_reply(*, stream: bool) -> Reply:
    if not stream:
        reply = openai_reply("")
        message = reply.body["choices"][0]
        message["message"] = {"role": "assistant", "content": None, "tool_calls": [CALL]}
        message["finish_reason"] = "tool_calls"
        return reply
    first = {"index": 0, "id": CALL["id"], "type": "function",
             "function": {"name": "read", "arguments": ""}}  # fmt: skip
    args = CALL["function"]["arguments"]
    body = sse(
        chunk({"role": "assistant", "content": None, "tool_calls": [first]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[:5]}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[5:]}}]}),
        chunk({}, "tool_calls"),
        "[DONE]",
    )
    return Reply(body=body, headers={"content-type": "text/event-stream"})


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def test_a_completion_is_forwarded_returned_unchanged_and_logged(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONTEXTFOLD_UPSTREAM_KEY", "sk-the-servers")
    rig.upstream.add(openai_reply("hello there"))
    client = rig.client()
    answer = client.chat.completions.create(
        model="gpt-x", messages=[SYSTEM, user("hi")], temperature=0.25, max_tokens=9
    )
    assert answer.choices[0].message.content == "hello there"
    assert answer.id == "chatcmpl-abc123"
    assert answer.usage is not None and answer.usage.total_tokens == 15
    sent = rig.sent()
    # Every field but messages goes upstream unchanged; the key is the server's, not the client's.
    assert {k: v for k, v in sent.items() if k != "messages"} == {
        "model": "gpt-x",
        "temperature": 0.25,
        "max_tokens": 9,
    }
    assert sent["messages"] == [SYSTEM, user("hi")]
    assert rig.upstream.requests[-1].headers["authorization"] == "Bearer sk-the-servers"
    assert rig.log() == [SYSTEM, user("hi"), {"role": "assistant", "content": "hello there"}]


def test_the_upstream_is_sent_the_compacted_prompt(rig: Rig) -> None:
    history: list[dict[str, Any]] = [SYSTEM]
    for i in range(30):
        history += [user(f"question {i} about the loader " * 20)]
        history += [{"role": "assistant", "content": f"answer {i} with details " * 30}]
    session = rig.server.service.memory.session("local/s1")
    session.extend(history)
    view = session.view("default", preset="offline", budget=2000)
    assert view.compact().folds
    rig.upstream.add(openai_reply("ok"))
    rig.client().chat.completions.create(model="m", messages=[*history, user("and now?")])
    sent = rig.sent()["messages"]
    assert len(sent) < len(history) // 4
    assert sent[0] == SYSTEM
    assert sent[1]["content"].startswith("[Conversation History Summary")
    assert sent[-1] == user("and now?")
    assert rig.log()[-2:] == [user("and now?"), {"role": "assistant", "content": "ok"}]
    assert len(rig.log()) == len(history) + 2


def test_an_agents_latest_todo_list_and_rules_come_back_after_what_is_folded(rig: Rig) -> None:
    conversation = [SYSTEM, *agent_log()]
    rig.upstream.add(openai_reply("a"))
    rig.client().chat.completions.create(
        model="m", messages=conversation, extra_headers={"X-Contextfold-Budget": "1200"}
    )
    sent = [str(m.get("content")) for m in rig.sent()["messages"]]
    assert any(text.startswith("[Folded") for text in sent)
    assert [t for t in sent if t.startswith("todo list")] == ["todo list 3 saved"]
    assert RULES in sent


def test_a_budget_header_renders_for_that_budget(rig: Rig) -> None:
    history = [SYSTEM]
    for i in range(8):
        history += [user(f"tell me about part {i} " * 40), {"role": "assistant", "content": "ok"}]
    rig.upstream.add(openai_reply("a"), openai_reply("b"))
    client = rig.client()
    client.chat.completions.create(model="m", messages=[*history, user("q")])
    full = rig.sent()["messages"]
    logged = [*history, user("q"), {"role": "assistant", "content": "a"}]
    client.chat.completions.create(
        model="m", messages=[*logged, user("r")], extra_headers={"X-Contextfold-Budget": "300"}
    )
    small = rig.sent()["messages"]
    assert len(full) == len(history) + 1
    assert len(small) < len(full)
    assert small[0] == SYSTEM and small[-1] == user("r")


def test_streaming_passes_events_byte_for_byte_and_logs_the_assembled_answer(rig: Rig) -> None:
    reply = streamed("Hel", "lo", " é")
    rig.upstream.add(reply, streamed("again"))
    raw = httpx.post(
        f"{rig.server.url}/v1/chat/completions",
        json={"model": "m", "messages": [user("hi")], "stream": True},
        headers={"X-Contextfold-Session": "s1"},
    )
    assert raw.status_code == 200
    assert raw.headers["content-type"].startswith("text/event-stream")
    assert raw.content == reply.body
    assert rig.sent()["stream"] is True
    logged = [user("hi"), {"role": "assistant", "content": "Hello é"}]
    assert rig.log() == logged
    # The SDK reads the same stream; the conversation goes on from the assembled answer.
    stream = rig.client().chat.completions.create(
        model="m", messages=[*logged, user("more")], stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "again"
    assert rig.log() == [*logged, user("more"), {"role": "assistant", "content": "again"}]


@pytest.mark.parametrize("stream", [False, True])
def test_tool_calls_round_trip(rig: Rig, stream: bool) -> None:
    rig.upstream.add(tool_call_reply(stream=stream), openai_reply("the file says a"))
    client = rig.client()
    asked = [SYSTEM, user("read a")]
    first = client.chat.completions.create(model="m", messages=asked, tools=TOOLS, stream=stream)
    if stream:
        calls: dict[int, dict[str, Any]] = {}
        for piece in first:
            for delta in piece.choices[0].delta.tool_calls or () if piece.choices else ():
                call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                call["id"] = delta.id or call["id"]
                call["name"] += (delta.function.name or "") if delta.function else ""
                call["arguments"] += (delta.function.arguments or "") if delta.function else ""
        assistant: Any = {
            "role": "assistant",
            "tool_calls": [
                {"id": c["id"], "type": "function",
                 "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in calls.values()
            ],
        }  # fmt: skip
    else:
        assistant = first.choices[0].message  # the SDK's own object, sent back as it is
    assert rig.sent()["tools"] == TOOLS
    result = {"role": "tool", "tool_call_id": CALL["id"], "content": "a"}
    second = client.chat.completions.create(
        model="m", messages=[*asked, assistant, result], tools=TOOLS
    )
    assert second.choices[0].message.content == "the file says a"
    logged_call = {"role": "assistant", "content": None, "tool_calls": [CALL]}
    assert rig.sent()["messages"] == [*asked, logged_call, result]
    assert rig.log() == [
        *asked,
        logged_call,
        result,
        {"role": "assistant", "content": "the file says a"},
    ]


def test_regenerate_edit_and_a_dropped_turn_start_branches(rig: Rig) -> None:
    rig.upstream.add(*(openai_reply(text) for text in ("one", "two", "one again", "edited", "c")))
    client = rig.client()
    first = [user("a")]
    client.chat.completions.create(model="m", messages=first)
    second = [*first, {"role": "assistant", "content": "one"}, user("b")]
    client.chat.completions.create(model="m", messages=second)
    # Regenerate: the same conversation without its last answer.
    client.chat.completions.create(model="m", messages=second)
    assert rig.sent()["messages"] == second
    # Edit: an earlier message changed; the prompt is the edited branch's alone.
    edited = [*first, {"role": "assistant", "content": "edited"}, user("b2")]
    client.chat.completions.create(model="m", messages=edited)
    assert rig.sent()["messages"] == edited
    # A client that drops a turn: its list goes on after the turn it kept.
    client.chat.completions.create(model="m", messages=[*first, user("c")])
    assert rig.sent()["messages"] == [*first, user("c")]
    session = rig.server.service.memory.existing_session("local/s1")
    logged = [(m.seq, m.parent, m.message.get("content")) for m in session.messages()]
    assert logged == [
        (1, 0, "a"),
        (2, 1, "one"),
        (3, 2, "b"),
        (4, 3, "two"),
        (5, 3, "one again"),
        (6, 1, "edited"),
        (7, 6, "b2"),
        (8, 7, "edited"),
        (9, 1, "c"),
        (10, 9, "c"),
    ]
    assert [(b.head, b.fork) for b in session.branches()] == [(10, 1), (8, 1), (5, 3), (4, 3)]
    assert len(rig.upstream.requests) == 5


def test_the_same_conversation_sent_again_appends_nothing_twice(rig: Rig) -> None:
    rig.upstream.add(error_reply("openai", 500, "overloaded"), openai_reply("two"))
    client = rig.client()
    conversation = [SYSTEM, user("a")]
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="m", messages=conversation)
    assert caught.value.status_code == 502
    assert rig.log() == conversation
    client.chat.completions.create(model="m", messages=conversation)
    assert rig.log() == [*conversation, {"role": "assistant", "content": "two"}]
    assert [r.body["messages"] for r in rig.upstream.requests] == [conversation, conversation]


def test_a_client_without_a_system_prompt_uses_the_sessions_own(rig: Rig) -> None:
    rig.server.service.memory.session("local/s1", system="server side")
    rig.upstream.add(openai_reply("x"), openai_reply("y"), openai_reply("z"))
    client = rig.client()
    client.chat.completions.create(model="m", messages=[user("a")])
    assert rig.sent()["messages"] == [{"role": "system", "content": "server side"}, user("a")]
    client.chat.completions.create(
        model="m", messages=[user("a"), {"role": "assistant", "content": "x"}, user("b")]
    )
    assert len(rig.log()) == 5
    # A client sending a system prompt of its own starts a conversation of its own.
    client.chat.completions.create(model="m", messages=[SYSTEM, user("a")])
    assert rig.sent()["messages"] == [SYSTEM, user("a")]
    assert [m.parent for m in rig.server.service.memory.store.messages("local/s1")][5:] == [0, 6, 7]


@pytest.mark.parametrize(
    "reply",
    [error_reply("openai", 500, "boom"), error_reply("openai", 401, "bad upstream key"),
     Reply(delay=3.0, body={}), Reply(drop=True)],
    ids=["500", "401", "timeout", "dropped"],
)  # fmt: skip
def test_an_upstream_failure_is_502_and_logs_no_answer(rig: Rig, reply: Reply) -> None:
    rig.upstream.add(reply)
    with pytest.raises(openai.APIStatusError) as caught:
        rig.client().chat.completions.create(model="m", messages=[user("a")])
    assert caught.value.status_code == 502
    body = caught.value.body
    assert isinstance(body, dict) and body["code"] == "upstream_error"
    if reply.status in (500, 401):
        assert f"HTTP {reply.status}" in body["message"]
    assert rig.log() == [user("a")]


def test_an_unreachable_upstream_is_502(tmp_path: Path) -> None:
    spare = socket.socket()
    spare.bind(("127.0.0.1", 0))
    port = spare.getsockname()[1]
    spare.close()  # nothing listens there now: connection refused
    with serve(tmp_path, f"openai-compatible:http://127.0.0.1:{port}/v1") as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(model="m", messages=[user("a")], user="s9")
        assert caught.value.status_code == 502
        assert "unreachable" in str(caught.value.body)
        assert server.log("local", "s9") == [user("a")]


def test_a_client_error_from_upstream_keeps_its_status_not_its_message(rig: Rig) -> None:
    rig.upstream.add(error_reply("openai", 400, "model 'nope' does not exist"))
    with pytest.raises(openai.BadRequestError) as caught:
        rig.client().chat.completions.create(model="nope", messages=[user("a")])
    assert "does not exist" not in str(caught.value)
    assert caught.value.type == "invalid_request_error"
    assert rig.log() == [user("a")]


def test_a_stream_the_upstream_breaks_ends_with_an_error_and_logs_nothing(rig: Rig) -> None:
    whole = streamed("Hel", "lo")
    assert isinstance(whole.body, bytes)
    rig.upstream.add(Reply(body=whole.body, headers=whole.headers, cut=len(whole.body) // 2))
    stream = rig.client().chat.completions.create(model="m", messages=[user("a")], stream=True)
    with pytest.raises(openai.APIError) as caught:
        list(stream)
    assert "upstream stream broken" in str(caught.value)
    assert rig.log() == [user("a")]


def test_a_streamed_upstream_error_status_is_502(rig: Rig) -> None:
    rig.upstream.add(error_reply("openai", 503, "busy"))
    with pytest.raises(openai.APIStatusError) as caught:
        rig.client().chat.completions.create(model="m", messages=[user("a")], stream=True)
    assert caught.value.status_code == 502
    assert rig.log() == [user("a")]


def test_the_session_id_comes_from_the_header_else_the_user_field(rig: Rig) -> None:
    rig.upstream.add(openai_reply("x"))
    rig.client(session=None).chat.completions.create(
        model="m", messages=[user("a")], user="from-body"
    )
    assert rig.sent()["user"] == "from-body"
    assert rig.log("from-body")[0] == user("a")
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        rig.client(session=None).chat.completions.create(model="m", messages=[user("a")])
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["field"] == "X-Contextfold-Session"
    with pytest.raises(openai.UnprocessableEntityError) as bad:
        rig.client(session="no/slash").chat.completions.create(model="m", messages=[user("a")])
    assert isinstance(bad.value.body, dict) and bad.value.body["field"] == "X-Contextfold-Session"


@pytest.mark.parametrize(
    ("body", "headers", "field", "index"),
    [
        (b"not json", {}, "body", None),
        (b"[]", {}, "body", None),
        (b'{"messages": []}', {}, "messages", None),
        (b'{"messages": [{"role": "wizard", "content": "x"}]}', {}, "role", 0),
        (b'{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}', {}, "stream", None),
        (b'{"messages": [{"role": "user", "content": "x"}]}', {"X-Contextfold-Budget": "-3"},
         "X-Contextfold-Budget", None),
        (b'{"messages": [{"role": "user", "content": "x"}]}', {"X-Contextfold-View": "a b"},
         "X-Contextfold-View", None),
        (b'{"messages": [{"role": "tool", "tool_call_id": "nope", "content": "x"}]}', {},
         "tool_call_id", 0),
    ],
)  # fmt: skip
def test_bad_requests_are_422_naming_the_field_and_store_nothing(
    rig: Rig, body: bytes, headers: dict[str, str], field: str, index: int | None
) -> None:
    answer = httpx.post(
        f"{rig.server.url}/v1/chat/completions",
        content=body,
        headers={"X-Contextfold-Session": "s1", "content-type": "application/json", **headers},
    )
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert (error["code"], error["field"], error["index"]) == ("invalid_input", field, index)
    assert rig.server.service.memory.store.list_sessions() == []
    assert rig.upstream.requests == []


def test_models_pass_through(rig: Rig) -> None:
    listing = {"object": "list", "data": [{"id": "m1", "object": "model", "created": 1,
                                           "owned_by": "me"}]}  # fmt: skip
    rig.upstream.add(Reply(body=listing))
    models = rig.client().models.list()
    assert [m.id for m in models] == ["m1"]
    assert rig.upstream.requests[-1].method == "GET"


def test_no_upstream_configured_is_502_and_stores_nothing(tmp_path: Path) -> None:
    with serve(tmp_path, None) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(model="m", messages=[user("a")], user="s1")
        assert caught.value.status_code == 502
        assert "--upstream" in str(caught.value.body)
        with pytest.raises(openai.APIStatusError) as models:
            client.models.list()
        assert models.value.status_code == 502
        assert server.service.memory.store.list_sessions() == []


def test_tenants_are_isolated_on_the_proxy(tmp_path: Path) -> None:
    with FakeProvider("openai") as upstream:
        upstream.routes.add(("GET", "/v1/models"))
        spec = f"openai-compatible:{upstream.url}"
        with serve(tmp_path, spec, auth=True) as server:
            rig = Rig(server, upstream)
            a = rig.client(key=add_key(server.service.memory, "alpha"))
            b = rig.client(key=add_key(server.service.memory, "bravo"))
            upstream.add(openai_reply("for a"), openai_reply("for b"))
            a.chat.completions.create(model="m", messages=[user("secret of a")])
            a_log = rig.log("s1", "alpha")
            # B names A's session id: it gets a session of its own, with no trace of A's.
            b.chat.completions.create(model="m", messages=[user("b here")])
            assert rig.sent()["messages"] == [user("b here")]
            assert rig.log("s1", "bravo") == [
                user("b here"),
                {"role": "assistant", "content": "for b"},
            ]
            # B resending A's conversation appends to B's session, never to A's.
            upstream.add(openai_reply("b again"))
            b.chat.completions.create(
                model="m",
                messages=[user("secret of a"), {"role": "assistant", "content": "for a"}],
            )
            assert rig.log("s1", "bravo")[2:] == [
                user("secret of a"),
                {"role": "assistant", "content": "for a"},
                {"role": "assistant", "content": "b again"},
            ]
            assert rig.log("s1", "alpha") == a_log
            assert sorted(server.service.memory.store.list_sessions()) == ["alpha/s1", "bravo/s1"]
            for path in ("/v1/chat/completions", "/v1/models"):
                method = "POST" if path.endswith("completions") else "GET"
                for auth in ({}, {"authorization": "Bearer cf_000000000000_" + "x" * 32}):
                    answer = httpx.request(
                        method, server.url + path, json={"messages": [user("x")]},
                        headers={"X-Contextfold-Session": "s1", **auth},
                    )  # fmt: skip
                    assert answer.status_code == 401
                    assert answer.json()["error"]["code"] == "unauthorized"
            assert rig.log("s1", "alpha") == a_log
            assert len(upstream.requests) == 3


def test_the_view_is_made_with_the_servers_defaults_and_again_for_a_recreated_session(
    rig: Rig,
) -> None:
    store = rig.server.service.memory.store
    rig.upstream.add(openai_reply("x"), openai_reply("y"))
    client = rig.client()
    client.chat.completions.create(
        model="m", messages=[user("a")], extra_headers={"X-Contextfold-View": "planner"}
    )
    view = store.get_view("local/s1", "planner")
    assert view is not None
    assert (view.config["preset"], view.config["budget"]) == ("offline", 8000)
    assert view.config["pins"] == ["todo", "rules"]  # an agent CLI's to-do list and rules
    assert store.get_view("local/s1", "default") is None
    # Deleted and made again under the same id: matched afresh, its view made again.
    rig.server.service.delete("local", "s1")
    client.chat.completions.create(
        model="m", messages=[user("b")], extra_headers={"X-Contextfold-View": "planner"}
    )
    assert rig.log() == [user("b"), {"role": "assistant", "content": "y"}]
    assert store.get_view("local/s1", "planner") is not None


def test_concurrent_identical_calls_on_one_session_are_served_one_after_the_other(
    rig: Rig,
) -> None:
    rig.upstream.add(Reply(body=openai_reply("only one").body, delay=0.3), openai_reply("two"))
    threads = [
        threading.Thread(
            target=lambda: rig.client().chat.completions.create(model="m", messages=[user("a")])
        )
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    # The second waits for the first, then regenerates: one user message, two answers.
    session = rig.server.service.memory.existing_session("local/s1")
    logged = [(m.seq, m.parent, m.message.get("content")) for m in session.messages()]
    assert logged == [(1, 0, "a"), (2, 1, "only one"), (3, 1, "two")]
    assert [r.body["messages"] for r in rig.upstream.requests] == [[user("a")], [user("a")]]


def test_a_client_leaving_a_stream_early_logs_no_answer_and_frees_the_session(rig: Rig) -> None:
    slow = streamed(*[f"w{i} " for i in range(40)])
    rig.upstream.add(Reply(body=slow.body, headers=slow.headers, pace=0.05), openai_reply("next"))
    body = {"model": "m", "messages": [user("a")], "stream": True}
    with httpx.stream(
        "POST",
        f"{rig.server.url}/v1/chat/completions",
        json=body,
        headers={"X-Contextfold-Session": "s1"},
    ) as answer:
        first = next(answer.iter_bytes())
        assert first.startswith(b"data: ")
    # The session's lock is released: the same conversation goes through again, and
    # only the answer the client received whole is logged.
    started = time.monotonic()
    again = rig.client().chat.completions.create(model="m", messages=[user("a")])
    assert again.choices[0].message.content == "next"
    assert time.monotonic() - started < 5
    assert rig.log() == [user("a"), {"role": "assistant", "content": "next"}]


def test_an_answer_the_log_cannot_keep_goes_back_unchanged_and_is_not_logged(rig: Rig) -> None:
    reply = openai_reply("")
    broken = {"id": "c1", "type": "function", "function": {"name": "", "arguments": "{}"}}
    reply.body["choices"][0]["message"] = {"role": "assistant", "content": None,
                                           "tool_calls": [broken]}  # fmt: skip
    rig.upstream.add(reply)
    answer = httpx.post(
        f"{rig.server.url}/v1/chat/completions",
        json={"model": "m", "messages": [user("a")]},
        headers={"X-Contextfold-Session": "s1"},
    )
    assert answer.status_code == 200
    assert answer.json() == reply.body
    assert rig.log() == [user("a")]
