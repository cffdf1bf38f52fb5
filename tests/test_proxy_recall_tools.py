"""The recall tools through the proxy, end to end: the official ``openai`` (Chat Completions
and Responses) and ``anthropic`` (Messages) SDKs as clients, a real uvicorn server on
127.0.0.1, and scripted upstreams on 127.0.0.1 (``tests/fake_providers.py``) that call a
recall tool on a scripted turn.

The session's early turns are folded, one of them naming a fact only the log still
holds (``parse_header``); the model looks it up with ``contextfold_search``. What is
checked: the tools go upstream in the wire's own schema only when asked for and when
there are folds; the proxy answers the call from the log and the result reaches the
upstream's next request; the client sees only the final answer, whole or as one
well-formed stream; the log holds the client's conversation alone; each round is a
``recall`` event; a client tool of the same name, the round bound and an answer mixing
the proxy's calls with the client's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from fake_anthropic import anthropic_content_reply
from fake_openai import called, openai_reply, responses_reply, responses_stream, said
from fake_providers import FakeProvider, Reply
from server_harness import add_key, running
from test_proxy import chunk, sse
from test_server_events import Stream

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message
from contextfold.server.app import create_app
from contextfold.server.proxy_budget import tools_tokens
from contextfold.server.proxy_chat import CHAT
from contextfold.server.proxy_recall import with_recall_tools
from contextfold.server.service import Service
from contextfold.server.settings import Settings

SYSTEM = "You are terse."
FACT = "The loader bug was in parse_header: it read the length field as signed."
QUESTION = "Which function had the loader bug?"
FINAL = "It was parse_header."
SEARCH = "contextfold_search"
NAMES = {"contextfold_search", "contextfold_expand", "contextfold_folds"}
FORMATS = ["chat", "responses", "messages"]
CLIENT_TOOL = "read"


def history(fact: str = FACT) -> list[dict[str, str]]:
    """A conversation whose early turns fold away, the first naming ``fact``."""
    turns = [{"role": "user", "content": fact}, {"role": "assistant", "content": "Noted."}]
    for i in range(24):
        turns.append({"role": "user", "content": f"step {i}: tidy the module " * 12})
        turns.append({"role": "assistant", "content": f"done with step {i} " * 12})
    return turns


@dataclass
class Rig:
    service: Service
    url: str
    openai_upstream: FakeProvider
    anthropic_upstream: FakeProvider

    def upstream(self, fmt: str) -> FakeProvider:
        return self.anthropic_upstream if fmt == "messages" else self.openai_upstream

    def sent(self, fmt: str) -> list[dict[str, Any]]:
        path = {"chat": "/v1/chat/completions", "responses": "/v1/responses"}.get(
            fmt, "/v1/messages"
        )
        return [r.body for r in self.upstream(fmt).requests if r.path == path]

    def log(self, sid: str = "s1") -> list[Message]:
        return [
            {k: v for k, v in m.message.items() if k != "meta"}
            for m in self.service.memory.store.messages(f"local/{sid}")
        ]

    def seed(
        self, sid: str = "s1", *, fold: bool = True, tenant: str = "local", fact: str = FACT
    ) -> list[str]:
        """The session's log: the system prompt and ``history(fact)``, folded when ``fold``;
        the ids of its folds."""
        session = self.service.memory.session(f"{tenant}/{sid}")
        session.extend([{"role": "system", "content": SYSTEM}, *history(fact)])
        view = session.view("default", preset="offline", budget=1200)
        if fold:
            assert view.compact().folds
        return [f.id for f in view.folds()]


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    with FakeProvider("openai") as oa, FakeProvider("anthropic") as an:
        oa.routes.add(("POST", "/v1/responses"))
        service = Service(
            Settings(
                database=str(tmp_path / "cf.db"),
                upstream=(f"openai-compatible:{oa.url}", f"anthropic:{an.url}/v1"),
                auth=False,
                runner=False,
                recall_tools=True,
                recall_rounds=2,
                upstream_timeout_s=5.0,
            )
        )
        try:
            with running(create_app(service)) as url:
                yield Rig(service, url, oa, an)
        finally:
            service.close()


# -- scripted upstream answers, in each format ----------------------------------------


def calls_reply(fmt: str, calls: list[tuple[str, str, dict[str, Any]]], stream: bool) -> Reply:
    """An answer calling ``(id, name, arguments)`` tools, whole or streamed."""
    if fmt == "chat":
        tool_calls = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in calls
        ]
        if not stream:
            reply = openai_reply("")
            reply.body["choices"][0]["message"] = {
                "role": "assistant",
                "content": None,
                "tool_calls": tool_calls,
            }
            reply.body["choices"][0]["finish_reason"] = "tool_calls"
            return reply
        deltas = [
            chunk(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {**c, "index": k, "function": {**c["function"], "arguments": ""}}
                    ],
                }
            )
            for k, c in enumerate(tool_calls)
        ] + [
            chunk(
                {
                    "tool_calls": [
                        {"index": k, "function": {"arguments": c["function"]["arguments"]}}
                    ]
                }
            )
            for k, c in enumerate(tool_calls)
        ]
        body = sse(*deltas, chunk({}, "tool_calls"), "[DONE]")
        return Reply(body=body, headers={"content-type": "text/event-stream"})
    if fmt == "responses":
        items = [called(n, json.dumps(a), i) for i, n, a in calls]
        return (responses_stream if stream else responses_reply)(items, response_id="resp_c")
    blocks = [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls]
    return anthropic_content_reply(blocks, stop_reason="tool_use", stream=stream)


def text_reply(fmt: str, text: str, stream: bool) -> Reply:
    if fmt == "chat":
        if not stream:
            return openai_reply(text)
        events = [chunk({"role": "assistant", "content": ""}), chunk({"content": text})]
        body = sse(*events, chunk({}, "stop"), "[DONE]")
        return Reply(body=body, headers={"content-type": "text/event-stream"})
    if fmt == "responses":
        make = responses_stream if stream else responses_reply
        return make([said(text)], response_id="resp_final")
    return anthropic_content_reply([{"type": "text", "text": text}], stream=stream)


# -- the client's side, through each SDK ------------------------------------------------


@dataclass(frozen=True)
class Answered:
    """What the client got: the answer's text, the tool calls it saw, the proxy's headers."""

    text: str
    tools: list[str]
    headers: httpx.Headers


def ask(
    rig: Rig,
    fmt: str,
    stream: bool,
    *,
    tools: list[str] | None = None,
    headers: dict[str, str] | None = None,
    sid: str = "s1",
) -> Answered:
    """The whole conversation and ``QUESTION`` sent through ``fmt``'s SDK."""
    turns = [*history(), {"role": "user", "content": QUESTION}]
    sent_headers = {"X-Contextfold-Session": sid, **(headers or {})}
    if fmt == "messages":
        client = anthropic.Anthropic(
            base_url=rig.url,
            api_key="unused",
            max_retries=0,
            timeout=20,
            default_headers=sent_headers,
        )
        defs = [
            {"name": n, "description": n, "input_schema": {"type": "object"}} for n in tools or ()
        ]
        kwargs: dict[str, Any] = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 500,
            "system": SYSTEM,
            "messages": turns,
        }
        if defs:
            kwargs["tools"] = defs
        if stream:
            with client.messages.with_streaming_response.create(stream=True, **kwargs) as raw:
                events = [
                    json.loads(line[6:]) for line in raw.iter_lines() if line.startswith("data: ")
                ]
                return Answered(_anthropic_text(events), _anthropic_tools(events), raw.headers)
        raw_answer = client.messages.with_raw_response.create(**kwargs)
        message = raw_answer.parse()
        text = "".join(b.text for b in message.content if b.type == "text")
        used = [b.name for b in message.content if b.type == "tool_use"]
        return Answered(text, used, raw_answer.headers)
    client_oa = openai.OpenAI(
        base_url=f"{rig.url}/v1",
        api_key="unused",
        max_retries=0,
        timeout=20,
        default_headers=sent_headers,
    )
    if fmt == "chat":
        defs_oa = [
            {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
            for n in tools or ()
        ]
        messages = [{"role": "system", "content": SYSTEM}, *turns]
        extra: dict[str, Any] = {"tools": defs_oa} if defs_oa else {}
        if stream:
            with client_oa.chat.completions.with_streaming_response.create(
                model="gpt-4o",
                messages=messages,
                stream=True,
                **extra,  # type: ignore[arg-type]
            ) as raw:
                parts = list(raw.parse())
                text = "".join(p.choices[0].delta.content or "" for p in parts if p.choices)
                used = [
                    c.function.name
                    for p in parts
                    if p.choices
                    for c in p.choices[0].delta.tool_calls or ()
                    if c.function and c.function.name
                ]
                return Answered(text, used, raw.headers)
        raw_chat = client_oa.chat.completions.with_raw_response.create(
            model="gpt-4o",
            messages=messages,
            **extra,  # type: ignore[arg-type]
        )
        completion = raw_chat.parse()
        calls = completion.choices[0].message.tool_calls or []
        names = [c.function.name for c in calls if c.type == "function"]
        return Answered(completion.choices[0].message.content or "", names, raw_chat.headers)
    defs_r = [
        {"type": "function", "name": n, "parameters": {"type": "object"}} for n in tools or ()
    ]
    extra_r: dict[str, Any] = {"tools": defs_r} if defs_r else {}
    if stream:
        with client_oa.responses.with_streaming_response.create(
            model="gpt-5",
            instructions=SYSTEM,
            input=turns,
            stream=True,
            **extra_r,  # type: ignore[arg-type]
        ) as raw:
            events = list(raw.parse())
            assert events[-1].type == "response.completed"
            response = events[-1].response
            used = [i.name for i in response.output if i.type == "function_call"]
            return Answered(response.output_text, used, raw.headers)
    raw_r = client_oa.responses.with_raw_response.create(
        model="gpt-5",
        instructions=SYSTEM,
        input=turns,
        **extra_r,  # type: ignore[arg-type]
    )
    response = raw_r.parse()
    used = [i.name for i in response.output if i.type == "function_call"]
    return Answered(response.output_text, used, raw_r.headers)


def _anthropic_text(events: list[dict[str, Any]]) -> str:
    assert events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop"
    return "".join(
        e["delta"]["text"]
        for e in events
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "text_delta"
    )


def _anthropic_tools(events: list[dict[str, Any]]) -> list[str]:
    return [
        e["content_block"]["name"]
        for e in events
        if e["type"] == "content_block_start" and e["content_block"]["type"] == "tool_use"
    ]


# -- reading what went upstream, in each format -----------------------------------------


def tool_names(fmt: str, body: dict[str, Any]) -> list[str]:
    """The tool names a request defines, read in the format's own schema."""
    tools = body.get("tools") or []
    if fmt == "chat":
        assert all(t["type"] == "function" and "parameters" in t["function"] for t in tools)
        return [t["function"]["name"] for t in tools]
    if fmt == "responses":
        assert all(t["type"] == "function" and "parameters" in t for t in tools)
        return [t["name"] for t in tools]
    assert all("input_schema" in t and "type" not in t for t in tools)
    return [t["name"] for t in tools]


def results_sent(fmt: str, body: dict[str, Any]) -> list[tuple[str, str]]:
    """The tool results at the end of a request: (call id, result text)."""
    if fmt == "chat":
        return [(m["tool_call_id"], m["content"]) for m in body["messages"] if m["role"] == "tool"]
    if fmt == "responses":
        return [
            (i["call_id"], i["output"])
            for i in body["input"]
            if i.get("type") == "function_call_output"
        ]
    return [
        (b["tool_use_id"], b["content"])
        for m in body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    ]


def calls_sent(fmt: str, body: dict[str, Any]) -> list[str]:
    """The names of every tool call in a request's conversation."""
    if fmt == "chat":
        return [c["function"]["name"] for m in body["messages"] for c in m.get("tool_calls") or ()]
    if fmt == "responses":
        return [i["name"] for i in body["input"] if i.get("type") == "function_call"]
    return [
        b["name"]
        for m in body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_use"
    ]


def expected_log(*answer: Message) -> list[Message]:
    return [
        {"role": "system", "content": SYSTEM},
        *history(),
        {"role": "user", "content": QUESTION},
        *answer,
    ]


# -- the tests ------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_the_proxy_answers_a_recall_call_and_the_client_sees_only_the_final_answer(
    rig: Rig, fmt: str, stream: bool
) -> None:
    rig.seed()
    up = rig.upstream(fmt)
    up.add(
        calls_reply(fmt, [("call_r1", SEARCH, {"query": "parse_header loader"})], stream),
        text_reply(fmt, FINAL, stream),
    )
    events = Stream(f"{rig.url}/api/v1/sessions/s1/events")
    try:
        got = ask(rig, fmt, stream)
        told = events.next("recall")
    finally:
        events.close()
    assert (got.text, got.tools) == (FINAL, [])
    assert got.headers["x-contextfold-recall-tools"] == "on"
    assert got.headers["x-contextfold-recall-rounds"] == "1"
    first, second = rig.sent(fmt)
    # The tools went in the wire's own schema, after none of the client's.
    assert set(tool_names(fmt, first)) == NAMES
    # The call and the proxy's answer to it reached the next request: the fact from the log.
    assert calls_sent(fmt, second) == [SEARCH]
    ((call_id, result),) = results_sent(fmt, second)
    assert call_id == "call_r1"
    assert "parse_header" in json.dumps(json.loads(result))
    # The log holds the client's conversation and the final answer, nothing of the round.
    assert rig.log() == expected_log({"role": "assistant", "content": FINAL})
    assert told["session"] == "s1" and told["round"] == 1 and told["view"] == "default"
    ((shown,),) = [told["calls"]]
    assert shown["name"] == SEARCH and shown["arguments"] == {"query": "parse_header loader"}
    assert shown["result"] == result and told["dropped"] == []


def test_off_by_default_nothing_is_injected(tmp_path: Path) -> None:
    with FakeProvider("openai") as up:
        service = Service(
            Settings(
                database=str(tmp_path / "cf.db"),
                upstream=f"openai-compatible:{up.url}",
                auth=False,
                runner=False,
            )
        )
        try:
            with running(create_app(service)) as url:
                rig = Rig(service, url, up, up)
                rig.seed()
                up.add(text_reply("chat", FINAL, False))
                got = ask(rig, "chat", False)
                assert got.text == FINAL
                assert "x-contextfold-recall-tools" not in got.headers
                assert "tools" not in rig.sent("chat")[0]
                # The header turns them on for one request.
                up.add(
                    calls_reply("chat", [("c1", SEARCH, {"query": "parse_header"})], False),
                    text_reply("chat", FINAL, False),
                )
                got = ask(rig, "chat", False, headers={"X-Contextfold-Recall-Tools": "on"})
                assert (got.text, got.headers["x-contextfold-recall-tools"]) == (FINAL, "on")
                assert set(tool_names("chat", rig.sent("chat")[1])) == NAMES
                assert len(rig.sent("chat")) == 3
        finally:
            service.close()


def test_the_header_turns_them_off_and_a_bad_value_is_refused(rig: Rig) -> None:
    rig.seed()
    rig.openai_upstream.add(text_reply("chat", FINAL, False))
    got = ask(rig, "chat", False, headers={"X-Contextfold-Recall-Tools": "off"})
    assert got.text == FINAL and "x-contextfold-recall-tools" not in got.headers
    assert "tools" not in rig.sent("chat")[0]
    before = rig.log()
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        ask(rig, "chat", False, headers={"X-Contextfold-Recall-Tools": "maybe"})
    error = caught.value.body
    assert isinstance(error, dict) and error["field"] == "X-Contextfold-Recall-Tools"
    assert rig.log() == before and len(rig.sent("chat")) == 1


@pytest.mark.parametrize("fmt", FORMATS)
def test_nothing_is_injected_without_folds(rig: Rig, fmt: str) -> None:
    rig.seed(fold=False)
    rig.upstream(fmt).add(text_reply(fmt, FINAL, False))
    got = ask(rig, fmt, False)
    assert got.headers["x-contextfold-recall-tools"] == "no-folds"
    assert tool_names(fmt, rig.sent(fmt)[0]) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_client_tool_of_the_same_name_is_left_alone(rig: Rig, fmt: str) -> None:
    rig.seed()
    # The client's own contextfold_search: its call is the client's, passed on as is.
    rig.upstream(fmt).add(calls_reply(fmt, [("c1", SEARCH, {"query": "x"})], False))
    got = ask(rig, fmt, False, tools=[SEARCH, CLIENT_TOOL])
    assert got.headers["x-contextfold-recall-tools"] == f"clash:{SEARCH}"
    assert got.tools == [SEARCH]
    assert tool_names(fmt, rig.sent(fmt)[0]) == [SEARCH, CLIENT_TOOL]
    assert len(rig.sent(fmt)) == 1


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_the_round_bound_then_tool_calls_are_forbidden(rig: Rig, fmt: str, stream: bool) -> None:
    rig.seed()
    up = rig.upstream(fmt)
    up.add(
        calls_reply(fmt, [("r1", SEARCH, {"query": "loader"})], stream),
        calls_reply(fmt, [("r2", "contextfold_folds", {})], stream),
        text_reply(fmt, FINAL, stream),
    )
    got = ask(rig, fmt, stream)
    assert (got.text, got.tools) == (FINAL, [])
    assert got.headers["x-contextfold-recall-rounds"] == "2"
    sent = rig.sent(fmt)
    assert len(sent) == 3  # the bound (2) rounds answered, then one request without calls
    forbidden = {"type": "none"} if fmt == "messages" else "none"
    assert [b.get("tool_choice") for b in sent] == [None, None, forbidden]
    assert [c for c, _ in results_sent(fmt, sent[2])] == ["r1", "r2"]
    assert rig.log() == expected_log({"role": "assistant", "content": FINAL})


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_upstream_calling_past_the_bound_is_passed_on_as_is(rig: Rig, fmt: str) -> None:
    rig.seed()
    rig.upstream(fmt).add(
        *(calls_reply(fmt, [(f"r{i}", SEARCH, {"query": "loader"})], False) for i in range(3))
    )
    got = ask(rig, fmt, False)
    assert got.tools == [SEARCH] and got.headers["x-contextfold-recall-rounds"] == "2"
    assert len(rig.sent(fmt)) == 3


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_mixed_answer_answers_ours_drops_the_clients_and_asks_again(
    rig: Rig, fmt: str, stream: bool
) -> None:
    rig.seed()
    up = rig.upstream(fmt)
    up.add(
        calls_reply(
            fmt,
            [("m1", SEARCH, {"query": "parse_header"}), ("m2", CLIENT_TOOL, {"p": "a.py"})],
            stream,
        ),
        calls_reply(fmt, [("m3", CLIENT_TOOL, {"p": "loader.py"})], stream),
    )
    events = Stream(f"{rig.url}/api/v1/sessions/s1/events")
    try:
        got = ask(rig, fmt, stream, tools=[CLIENT_TOOL])
        told = events.next("recall")
    finally:
        events.close()
    # The client sees its own tool called, on the second round, and nothing of ours.
    assert got.tools == [CLIENT_TOOL]
    first, second = rig.sent(fmt)
    assert tool_names(fmt, first)[0] == CLIENT_TOOL and set(tool_names(fmt, first)) == {
        CLIENT_TOOL,
        *NAMES,
    }
    # The dropped call is not in the next request: only ours, with its result.
    assert calls_sent(fmt, second) == [SEARCH]
    assert [c for c, _ in results_sent(fmt, second)] == ["m1"]
    assert told["dropped"] == [CLIENT_TOOL]
    logged = rig.log()
    assert logged[:-1] == expected_log()
    assert [c["function"]["name"] for c in logged[-1]["tool_calls"]] == [CLIENT_TOOL]
    assert logged[-1]["tool_calls"][0]["id"] == "m3"


def test_the_tools_are_taken_off_a_window_derived_budget_when_wanted(rig: Rig) -> None:
    """The model's window holds the recall tools' definitions as it holds the client's."""
    defined = tools_tokens(with_recall_tools({"model": "gpt-4o"}, CHAT))
    assert defined > 100
    rig.openai_upstream.add(text_reply("chat", FINAL, False), text_reply("chat", FINAL, False))
    wanted = ask(rig, "chat", False, sid="fresh")  # no folds yet: nothing injected
    assert wanted.headers["x-contextfold-recall-tools"] == "no-folds"
    assert wanted.headers["x-contextfold-budget-source"] == "table"
    assert wanted.headers["x-contextfold-budget-tools"] == str(defined)
    plain = ask(rig, "chat", False, sid="fresh", headers={"X-Contextfold-Recall-Tools": "off"})
    assert plain.headers["x-contextfold-budget-tools"] == "0"
    assert (
        int(plain.headers["x-contextfold-budget"])
        == int(wanted.headers["x-contextfold-budget"]) + defined
    )


@pytest.mark.parametrize("rounds", [0, -1, 1.5])
def test_a_bad_round_bound_is_refused_naming_it(rounds: Any) -> None:
    with pytest.raises(InvalidInput) as caught:
        Settings(upstream=None, recall_rounds=rounds)
    assert caught.value.field == "recall_rounds"


def test_a_call_never_recalls_another_tenants_session(tmp_path: Path) -> None:
    """Two tenants' sessions of one name: the tools answer from the caller's alone."""
    with FakeProvider("openai") as up:
        service = Service(
            Settings(
                database=str(tmp_path / "cf.db"),
                upstream=f"openai-compatible:{up.url}",
                runner=False,
                recall_tools=True,
            )
        )
        try:
            with running(create_app(service)) as url:
                rig = Rig(service, url, up, up)
                rig.seed(tenant="alpha")
                theirs = rig.seed(tenant="bravo", fact="The vault code is zebra-9931.")
                asked = [
                    ("t1", SEARCH, {"query": "vault code zebra"}),
                    ("t2", "contextfold_expand", {"id": theirs[0]}),
                ]
                up.add(calls_reply("chat", asked, False), text_reply("chat", FINAL, False))
                key = add_key(service.memory, "alpha")
                client = openai.OpenAI(
                    base_url=f"{url}/v1",
                    api_key=key,
                    max_retries=0,
                    default_headers={"X-Contextfold-Session": "s1"},
                )
                messages: Any = [
                    {"role": "system", "content": SYSTEM},
                    *history(),
                    {"role": "user", "content": QUESTION},
                ]
                answer = client.chat.completions.create(model="gpt-4o", messages=messages)
                assert answer.choices[0].message.content == FINAL
                results = dict(results_sent("chat", rig.sent("chat")[1]))
                assert "9931" not in json.dumps(results)
                assert json.loads(results["t1"])["hits"] == []
                assert json.loads(results["t2"])["field"] == "id"
        finally:
            service.close()


def test_a_stream_broken_after_a_round_ends_as_a_broken_stream_and_logs_no_answer(
    rig: Rig,
) -> None:
    rig.seed()
    whole = text_reply("chat", "It was parse_header, I think.", True)
    assert isinstance(whole.body, bytes)
    rig.openai_upstream.add(
        calls_reply("chat", [("b1", SEARCH, {"query": "parse_header"})], True),
        Reply(body=whole.body, headers=whole.headers, cut=len(whole.body) // 2),
    )
    with pytest.raises(openai.APIError) as caught:
        ask(rig, "chat", True)
    assert "stream" in str(caught.value)
    assert len(rig.sent("chat")) == 2
    assert rig.log() == expected_log()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("fmt", ["responses", "messages"])
def test_a_round_goes_back_with_the_answers_own_reasoning(rig: Rig, fmt: str, stream: bool) -> None:
    """A reasoning model's thinking or reasoning item before its call goes back with the
    call, as the provider requires of a tool round."""
    rig.seed()
    up = rig.upstream(fmt)
    query = {"query": "parse_header"}
    if fmt == "messages":
        thinking = {"type": "thinking", "thinking": "Look it up.", "signature": "sig-1=="}
        use = {"type": "tool_use", "id": "k1", "name": SEARCH, "input": query}
        up.add(anthropic_content_reply([thinking, use], stop_reason="tool_use", stream=stream))
    else:
        reasoning = {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Look it up."}],
            "encrypted_content": "opaque==",
        }
        make = responses_stream if stream else responses_reply
        up.add(make([reasoning, called(SEARCH, json.dumps(query), "k1")], response_id="resp_k"))
    up.add(text_reply(fmt, FINAL, stream))
    assert ask(rig, fmt, stream).text == FINAL
    second = rig.sent(fmt)[1]
    if fmt == "messages":
        said_turn = second["messages"][-2]
        assert said_turn["role"] == "assistant"
        assert said_turn["content"] == [thinking, use]
    else:
        tail = second["input"][-3:]
        assert tail[0] == reasoning
        assert (tail[1]["type"], tail[1]["call_id"]) == ("function_call", "k1")
        assert (tail[2]["type"], tail[2]["call_id"]) == ("function_call_output", "k1")
