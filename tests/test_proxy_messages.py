"""The Anthropic Messages wire end to end: the official ``anthropic`` SDK as the client,
a real uvicorn server on 127.0.0.1, and a scripted Anthropic upstream on 127.0.0.1
(``tests/fake_providers.py``) that records what it was sent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from fake_anthropic import anthropic_content_reply
from fake_providers import FakeProvider, Reply, error_reply
from server_harness import add_key, running

from contextfold.core.errors import NotFound
from contextfold.core.messages import Message
from contextfold.core.tokens import get_counter
from contextfold.formats.anthropic import LEADING_USER_TEXT
from contextfold.formats.anthropic_checks import anthropic_faults
from contextfold.formats.anthropic_turns import read_request
from contextfold.server.app import create_app
from contextfold.server.service import Service
from contextfold.server.settings import Settings

MODEL = "claude-sonnet-4-5"
SYSTEM = [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}]
TOOLS = [{"name": "read", "description": "read a file",
          "input_schema": {"type": "object", "properties": {"p": {"type": "string"}}}}]  # fmt: skip
THINKING = {"type": "thinking", "thinking": "The file first.", "signature": "sig-abc=="}


@dataclass
class Rig:
    service: Service
    url: str
    upstream: FakeProvider

    def client(self, session: str = "s1", key: str = "unused") -> anthropic.Anthropic:
        return anthropic.Anthropic(
            base_url=self.url,
            api_key=key,
            max_retries=0,
            timeout=20,
            default_headers={"X-Contextfold-Session": session},
        )

    def sent(self, i: int = -1) -> dict[str, Any]:
        calls = [r for r in self.upstream.requests if r.path == "/v1/messages"]
        body: dict[str, Any] = calls[i].body
        return body

    def log(self, sid: str = "s1", tenant: str = "local") -> list[Message]:
        return [m.message for m in self.service.memory.store.messages(f"{tenant}/{sid}")]


@contextmanager
def served(tmp_path: Path, *upstreams: str, **settings: Any) -> Iterator[tuple[Service, str]]:
    settings = {"auth": False, **settings}
    service = Service(Settings(database=str(tmp_path / "cf.db"), upstream=upstreams, **settings))
    try:
        with running(create_app(service)) as url:
            yield service, url
    finally:
        service.close()


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    with FakeProvider("anthropic") as upstream:
        upstream.routes.add(("POST", "/v1/messages/count_tokens"))
        with served(tmp_path, f"anthropic:{upstream.url}/v1", upstream_timeout_s=2.0) as (s, url):
            yield Rig(s, url, upstream)


def unmarked(body: Any) -> Any:
    """``body`` without its ``cache_control`` keys."""
    if isinstance(body, list):
        return [unmarked(v) for v in body]
    if isinstance(body, dict):
        return {k: unmarked(v) for k, v in body.items() if k != "cache_control"}
    return body


def plain(log: list[Message]) -> list[Message]:
    return [{k: v for k, v in m.items() if k != "meta"} for m in log]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_tool_using_conversation_keeps_thinking_cache_control_and_pairs(
    rig: Rig, stream: bool
) -> None:
    use = {"type": "tool_use", "id": "toolu_01", "name": "read", "input": {"p": "a.txt"}}
    rig.upstream.add(
        anthropic_content_reply([THINKING, use], stop_reason="tool_use", stream=stream),
        anthropic_content_reply([{"type": "text", "text": "It says hi."}], stream=stream),
    )
    client = rig.client()
    turns: list[dict[str, Any]] = [{"role": "user", "content": "What is in a.txt?"}]

    def ask() -> list[dict[str, Any]]:
        args: dict[str, Any] = {"model": MODEL, "max_tokens": 1024, "system": SYSTEM,
                                "messages": turns, "tools": TOOLS}  # fmt: skip
        if stream:
            with client.messages.stream(**args) as events:
                answer = events.get_final_message()
        else:
            answer = client.messages.create(**args)
        return [block.model_dump(exclude_none=True) for block in answer.content]

    first = ask()
    assert first == [THINKING, use]
    turns.append({"role": "assistant", "content": first})
    result = {"type": "tool_result", "tool_use_id": "toolu_01", "content": "hi",
              "cache_control": {"type": "ephemeral"}}  # fmt: skip
    turns.append({"role": "user", "content": [result]})
    second = ask()
    assert second == [{"type": "text", "text": "It says hi."}]

    later = rig.sent()
    assert later["system"] == SYSTEM and later["tools"] == TOOLS and later["model"] == MODEL
    assert later["messages"] == turns  # thinking, its signature and cache_control unchanged
    for body in (rig.sent(0), later):
        assert list(anthropic_faults(body["messages"], body["system"])) == []
    assert plain(rig.log()) == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is in a.txt?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "toolu_01", "type": "function",
             "function": {"name": "read", "arguments": '{"p": "a.txt"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_01", "name": "read", "content": "hi"},
        {"role": "assistant", "content": "It says hi."},
    ]  # fmt: skip
    assert rig.log()[2]["meta"]["anthropic"]["content"] == [THINKING, use]


def test_each_forwarded_prompt_fits_the_budget_and_the_log_holds_every_turn_once(
    rig: Rig,
) -> None:
    budget = 700
    client = rig.client()
    turns: list[dict[str, Any]] = []
    counter = get_counter("o200k_base")
    for i in range(12):
        rig.upstream.add(anthropic_content_reply([{"type": "text", "text": f"noted {i} " * 20}]))
        turns.append({"role": "user", "content": f"fact {i}: " + "word " * 60})
        answer = client.messages.with_raw_response.create(
            model=MODEL, max_tokens=256, messages=turns,
            extra_headers={"X-Contextfold-Budget": str(budget)},
        )  # fmt: skip
        assert answer.headers["X-Contextfold-Budget"] == str(budget)
        text = answer.parse().content[0].text  # type: ignore[union-attr]
        turns.append({"role": "assistant", "content": text})
        sent = rig.sent()
        # A prompt that opens with an assistant turn gets the format's user turn first,
        # beyond the budget (formats.anthropic.LEADING_USER_TEXT).
        lead = {"role": "user", "content": [{"type": "text", "text": LEADING_USER_TEXT}]}
        extra = counter.message(plain(read_request(None, [lead]))[0])
        seen = unmarked(sent)  # the proxy's cache breakpoints are not tokens the model reads
        allowed = budget + (extra if seen["messages"][0] == lead else 0)
        assert counter.messages(read_request(seen.get("system"), seen["messages"])) <= allowed
        assert list(anthropic_faults(sent["messages"], sent.get("system"))) == []
    assert plain(rig.log()) == turns
    assert len(rig.sent()["messages"]) < len(turns) - 1  # compacted, not the whole history


def test_count_tokens_asks_the_upstream_else_estimates(rig: Rig, tmp_path: Path) -> None:
    rig.upstream.add(Reply(body={"input_tokens": 42}))
    client = rig.client()
    messages: list[Any] = [{"role": "user", "content": "how long is this?"}]
    counted = client.messages.with_raw_response.count_tokens(model=MODEL, messages=messages)
    assert counted.headers["X-Contextfold-Count-Source"] == "upstream"
    assert counted.parse().input_tokens == 42
    assert rig.upstream.requests[-1].body["messages"] == messages
    with pytest.raises(NotFound):  # counting stores nothing, not even a new session
        rig.log()
    (tmp_path / "alone").mkdir()
    with served(tmp_path / "alone") as (_, url):
        alone = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0,
                                    default_headers={"X-Contextfold-Session": "s1"})  # fmt: skip
        counted = alone.messages.with_raw_response.count_tokens(model=MODEL, messages=messages)
        assert counted.headers["X-Contextfold-Count-Source"] == "estimate"
        assert 5 < counted.parse().input_tokens < 20


def test_without_an_anthropic_upstream_the_answer_names_the_flag(tmp_path: Path) -> None:
    with served(tmp_path, "openai-compatible:http://127.0.0.1:9/v1") as (_, url):
        client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0,
                                     default_headers={"X-Contextfold-Session": "s1"})  # fmt: skip
        with pytest.raises(anthropic.APIStatusError) as caught:
            client.messages.create(model=MODEL, max_tokens=9, messages=[
                {"role": "user", "content": "hi"}])  # fmt: skip
    assert caught.value.status_code == 502
    assert "--upstream anthropic:URL" in str(caught.value)


def test_the_sdk_key_header_is_the_contextfold_key(tmp_path: Path) -> None:
    with FakeProvider("anthropic") as upstream:
        upstream.add(anthropic_content_reply([{"type": "text", "text": "ok"}]))
        spec = f"anthropic:{upstream.url}/v1"
        with served(tmp_path, spec, auth=True) as (service, url):
            key = add_key(service.memory, "alpha")
            client = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0,
                                         default_headers={"X-Contextfold-Session": "s1"})  # fmt: skip
            client.messages.create(model=MODEL, max_tokens=9, messages=[
                {"role": "user", "content": "hi"}])  # fmt: skip
            assert [m.message["content"] for m in service.memory.store.messages("alpha/s1")] == [
                "hi", "ok"]  # fmt: skip
            with pytest.raises(anthropic.AuthenticationError):
                anthropic.Anthropic(base_url=url, api_key="cf_nope", max_retries=0).messages.create(
                    model=MODEL, max_tokens=9, messages=[{"role": "user", "content": "hi"}])  # fmt: skip
        headers = upstream.requests[0].headers
        assert key not in json.dumps(headers) and headers["anthropic-version"]


def test_an_upstream_refusal_keeps_its_status_in_anthropic_shape(rig: Rig) -> None:
    rig.upstream.add(error_reply("anthropic", 429, "slow down, key sk-secret"))
    with pytest.raises(anthropic.RateLimitError) as caught:
        rig.client().messages.create(model=MODEL, max_tokens=9, messages=[
            {"role": "user", "content": "hi"}])  # fmt: skip
    body = caught.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "rate_limit_error" and "sk-secret" not in json.dumps(body)
    assert plain(rig.log()) == [{"role": "user", "content": "hi"}]


def test_a_stream_cut_short_is_the_formats_error_and_logs_no_answer(rig: Rig) -> None:
    whole = anthropic_content_reply([{"type": "text", "text": "a long answer"}], stream=True)
    body = whole.body.rsplit("event: message_delta", 1)[0]
    rig.upstream.add(Reply(body=body, headers=whole.headers))
    hi = [{"role": "user", "content": "hi"}]
    with (
        pytest.raises(anthropic.APIError) as caught,
        rig.client().messages.stream(model=MODEL, max_tokens=9, messages=hi) as events,  # type: ignore[arg-type]
    ):
        events.get_final_message()
    assert "message_stop" in str(caught.value)
    assert plain(rig.log()) == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model": MODEL, "max_tokens": 9}, "messages"),
        ({"model": MODEL, "max_tokens": 9, "messages": "hi"}, "messages"),
        ({"model": MODEL, "max_tokens": 9, "messages": [{"role": "bot", "content": "x"}]}, "role"),
        ({"model": MODEL, "max_tokens": 9, "messages": [{"role": "user", "content": []}]},
         "content"),
        ({"model": MODEL, "max_tokens": 9, "system": 7,
          "messages": [{"role": "user", "content": "x"}]}, "system"),
        ({"model": MODEL, "max_tokens": 9, "messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}]}]},
         "content[0].tool_use_id"),
        ({"model": MODEL, "max_tokens": 0, "messages": [{"role": "user", "content": "x"}]},
         "max_tokens"),
    ],
)  # fmt: skip
def test_a_malformed_body_is_a_4xx_naming_the_field(
    rig: Rig, body: dict[str, Any], field: str
) -> None:
    answer = httpx.post(f"{rig.url}/v1/messages", json=body,
                        headers={"X-Contextfold-Session": "s1"})  # fmt: skip
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == field
    assert rig.upstream.requests == []
    with pytest.raises(NotFound):  # not even a new session
        rig.log()


def test_a_turn_already_logged_is_checked_as_sent_now_before_anything_is_stored(rig: Rig) -> None:
    rig.upstream.add(anthropic_content_reply([{"type": "text", "text": "ok"}]))
    first = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    rig.client().messages.create(model=MODEL, max_tokens=9, messages=first)  # type: ignore[arg-type]
    # The same turn as a model sees it, with a lone surrogate beside its text.
    again = [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control":
                                           {"type": "\udc80"}}]},
             {"role": "assistant", "content": "ok"}, {"role": "user", "content": "next"}]  # fmt: skip
    answer = httpx.post(f"{rig.url}/v1/messages", headers={"X-Contextfold-Session": "s1",
                        "content-type": "application/json"},
                        content=json.dumps({"model": MODEL, "max_tokens": 9, "messages": again}))  # fmt: skip
    assert answer.status_code == 422 and answer.json()["error"]["field"].startswith("messages")
    assert plain(rig.log()) == [{"role": "user", "content": "hi"},
                                {"role": "assistant", "content": "ok"}]  # fmt: skip


def test_an_error_event_from_the_upstream_reaches_the_client_once_and_logs_no_answer(
    rig: Rig,
) -> None:
    whole = anthropic_content_reply([{"type": "text", "text": "a long answer"}], stream=True)
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    body = whole.body.split("event: content_block_stop", 1)[0]
    body += f"event: error\ndata: {json.dumps(error)}\n\n"
    rig.upstream.add(Reply(body=body, headers=whole.headers))
    hi = [{"role": "user", "content": "hi"}]
    raw = httpx.post(f"{rig.url}/v1/messages", headers={"X-Contextfold-Session": "s1"},
                     json={"model": MODEL, "max_tokens": 9, "messages": hi, "stream": True})  # fmt: skip
    assert raw.text.count("event: error") == 1 and "overloaded_error" in raw.text
    assert plain(rig.log()) == hi
