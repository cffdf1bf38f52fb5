"""The Anthropic adapter: the real ``anthropic`` SDK against a fake server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator

import anthropic
import pytest
from fake_anthropic import anthropic_reply
from fake_providers import FakeProvider, Reply, error_reply
from sdk_errors import sdk_exceptions
from test_llm_openai import SCHEMA, TOOL_CHAT, USER

from contextfold.core.errors import InvalidInput, ModelError
from contextfold.llm import (
    AnthropicModel,
    AnthropicProvider,
    RetryableError,
    RetryPolicy,
    get_model,
)
from contextfold.llm.anthropic import ANTHROPIC_URL

FAST = RetryPolicy(attempts=3, base_delay=0.001, max_delay=0.01)


@pytest.fixture
def server() -> Iterator[FakeProvider]:
    with FakeProvider("anthropic") as fake:
        yield fake


@pytest.fixture
def model(server: FakeProvider) -> AnthropicModel:
    provider = AnthropicProvider(base_url=server.url, api_key="sk-ant-test")
    return AnthropicModel(
        "claude-haiku-4-5", provider=provider, timeout=0.2, max_tokens=256, retry=FAST
    )


def test_complete_returns_text_usage_and_the_model_that_answered(
    server: FakeProvider, model: AnthropicModel
) -> None:
    server.add(anthropic_reply("the summary", input_tokens=50, output_tokens=8))
    completion = model.complete(USER)
    assert completion.text == "the summary"
    usage = completion.usage
    assert (usage.model, usage.input_tokens, usage.output_tokens, usage.calls) == (
        "claude-haiku-4-5-20251001",
        50,
        8,
        1,
    )
    assert usage.latency_s > 0
    (request,) = server.requests
    assert request.path == "/v1/messages"
    assert "sk-ant-test" in (
        request.headers.get("x-api-key", "") + request.headers.get("authorization", "")
    )
    assert request.headers["anthropic-version"]
    assert request.headers["x-stainless-retry-count"] == "0"


def test_sync_and_async_send_the_same_request_and_read_the_same_answer(
    server: FakeProvider, model: AnthropicModel
) -> None:
    server.add(anthropic_reply('{"summary": "s"}'), anthropic_reply('{"summary": "s"}'))
    sync = model.complete(TOOL_CHAT, max_tokens=64, schema=SCHEMA)
    async_ = asyncio.run(model.acomplete(TOOL_CHAT, max_tokens=64, schema=SCHEMA))
    assert (
        (sync.text, sync.data)
        == (async_.text, async_.data)
        == ('{"summary": "s"}', {"summary": "s"})
    )
    assert sync.usage.to_dict() | {"latency_s": 0} == async_.usage.to_dict() | {"latency_s": 0}
    first, second = server.requests
    assert first.body == second.body
    assert second.headers["x-stainless-async"] != "false"


def test_async_works_across_event_loops(server: FakeProvider, model: AnthropicModel) -> None:
    server.add(anthropic_reply("one"), anthropic_reply("two"))
    assert asyncio.run(model.acomplete(USER)).text == "one"
    assert asyncio.run(model.acomplete(USER)).text == "two"


def test_a_tool_using_conversation_is_sent_in_anthropic_form(
    server: FakeProvider, model: AnthropicModel
) -> None:
    server.add(anthropic_reply(), anthropic_reply())
    model.complete(TOOL_CHAT, max_tokens=100)
    model.complete(TOOL_CHAT, max_tokens=100_000)
    first, second = server.requests
    assert first.body["model"] == "claude-haiku-4-5"
    assert first.body["system"] == "You are a coding agent."
    assert first.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Run the tests."}]},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "call_1",
                    "name": "run_tests",
                    "input": {"path": "tests"},
                }
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_1",
                    "content": "FAILED tests/test_io.py::test_read",
                    "is_error": True,
                },
                {"type": "text", "text": "Summarize."},
            ],
        },
    ]
    assert first.body["max_tokens"] == 100
    assert second.body["max_tokens"] == 256  # the model's cap wins


def test_without_a_system_message_no_system_is_sent(
    server: FakeProvider, model: AnthropicModel
) -> None:
    server.add(anthropic_reply())
    model.complete(USER)
    assert "system" not in server.requests[0].body


def test_a_schema_is_asked_for_in_the_system_prompt_and_the_text_parsed(
    server: FakeProvider, model: AnthropicModel
) -> None:
    server.add(
        anthropic_reply('```json\n{"summary": "tests fail"}\n```'), anthropic_reply("not JSON")
    )
    completion = model.complete(TOOL_CHAT, schema=SCHEMA)
    assert completion.data == {"summary": "tests fail"}
    system = server.requests[0].body["system"]
    assert system.startswith("You are a coding agent.\n\n")
    assert "JSON" in system and '"summary"' in system

    assert model.complete(USER, schema=SCHEMA).data is None
    assert "JSON" in server.requests[1].body["system"]


def test_cached_input_tokens_count_as_input(server: FakeProvider, model: AnthropicModel) -> None:
    reply = anthropic_reply("x")
    reply.body["usage"] |= {"cache_read_input_tokens": 100, "cache_creation_input_tokens": 20}
    server.add(reply)
    assert model.complete(USER).usage.input_tokens == 14 + 100 + 20


def test_text_blocks_are_joined_and_other_blocks_skipped(
    server: FakeProvider, model: AnthropicModel
) -> None:
    reply = anthropic_reply()
    reply.body["content"] = [
        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
        {"type": "text", "text": "part one, "},
        {"type": "text", "text": "part two"},
    ]
    server.add(reply)
    assert model.complete(USER).text == "part one, part two"


def test_a_bad_message_is_refused_before_any_request(
    server: FakeProvider, model: AnthropicModel
) -> None:
    with pytest.raises(InvalidInput):
        model.complete([{"role": "tool", "tool_call_id": "nowhere", "content": "x"}])
    assert server.requests == []


def test_429_with_retry_after_is_retried_and_both_attempts_are_counted(
    server: FakeProvider, model: AnthropicModel
) -> None:
    server.add(
        error_reply("anthropic", 429, "slow down", headers={"retry-after": "0"}),
        anthropic_reply("ok"),
    )
    completion = model.complete(USER)
    assert (completion.text, completion.usage.calls) == ("ok", 2)
    assert len(server.requests) == 2


def test_overloaded_529s_until_the_attempts_run_out_raise_retryable_error(
    server: FakeProvider, model: AnthropicModel
) -> None:
    server.add(*[error_reply("anthropic", 529, "Overloaded")] * 3)
    with pytest.raises(RetryableError) as info:
        model.complete(USER)
    assert info.value.status == 529
    assert "Overloaded" in (info.value.body or "")
    assert isinstance(info.value.__cause__, anthropic.OverloadedError)
    assert len(server.requests) == 3


def test_400_is_a_model_error_with_status_and_body_and_is_not_retried(
    server: FakeProvider, model: AnthropicModel
) -> None:
    server.add(error_reply("anthropic", 400, "messages: roles must alternate"))
    with pytest.raises(ModelError) as info:
        model.complete(USER)
    assert not isinstance(info.value, RetryableError)
    assert info.value.status == 400
    assert "roles must alternate" in (info.value.body or "")
    assert len(server.requests) == 1


def test_the_server_can_forbid_a_retry(server: FakeProvider, model: AnthropicModel) -> None:
    server.add(error_reply("anthropic", 503, "down", headers={"x-should-retry": "false"}))
    with pytest.raises(ModelError) as info:
        model.complete(USER)
    assert not isinstance(info.value, RetryableError)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "reply",
    [
        Reply(body="{not json"),
        Reply(body={"type": "message"}),
        Reply(body={"content": [{"type": "text"}]}),
        Reply(body={"content": [], "usage": {"input_tokens": "lots"}}),
    ],
    ids=["invalid-json", "no-content", "text-block-without-text", "usage-not-a-number"],
)
def test_a_malformed_body_is_a_model_error_and_not_retried(
    server: FakeProvider, model: AnthropicModel, reply: Reply
) -> None:
    server.add(reply)
    with pytest.raises(ModelError) as info:
        model.complete(USER)
    assert not isinstance(info.value, RetryableError)
    assert len(server.requests) == 1


def test_a_slow_response_times_out_is_retried_then_fails(
    server: FakeProvider, model: AnthropicModel
) -> None:
    model.retry = RetryPolicy(attempts=2, base_delay=0.001, max_delay=0.01)
    server.add(*[Reply(delay=1.0, body=anthropic_reply().body)] * 2)
    with pytest.raises(RetryableError, match=r"no answer within 0\.2 s"):
        model.complete(USER)
    assert len(server.requests) == 2


def test_every_sdk_exception_class_is_mapped(model: AnthropicModel) -> None:
    errors = sdk_exceptions(anthropic, anthropic.AnthropicError)
    assert len(errors) >= 40
    for exc in errors:
        with pytest.raises(ModelError) as info, model.sdk_errors():
            raise exc
        mapped = info.value
        assert mapped.__cause__ is exc
        if isinstance(exc, anthropic.APIStatusError):
            retryable = exc.status_code in (408, 429) or exc.status_code >= 500
            assert mapped.status == exc.status_code, type(exc)
            assert isinstance(mapped, RetryableError) is retryable, type(exc)
            assert "happened" in (mapped.body or ""), type(exc)
        elif isinstance(exc, anthropic.APIConnectionError | anthropic.RetryableError):
            assert isinstance(mapped, RetryableError), type(exc)
        else:
            assert not isinstance(mapped, RetryableError), type(exc)


def test_the_key_comes_from_the_environment(
    server: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    llm = get_model("anthropic:claude-haiku-4-5", base_url=server.url, retry=FAST)
    server.add(anthropic_reply())
    llm.complete(USER)
    headers = server.requests[0].headers
    assert "sk-ant-env" in headers.get("x-api-key", "") + headers.get("authorization", "")


def test_a_missing_key_is_a_clear_model_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    with pytest.raises(ModelError, match="ANTHROPIC_API_KEY"):
        get_model("anthropic:claude-haiku-4-5")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-x")
    llm = get_model("anthropic:claude-haiku-4-5")
    assert isinstance(llm, AnthropicModel) and llm.endpoint() == ANTHROPIC_URL


def test_without_the_sdk_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)
    with pytest.raises(ModelError, match=r"pip install 'contextfold\[anthropic\]'"):
        get_model("anthropic:claude-haiku-4-5", api_key="sk-ant-x")
