"""The OpenAI adapter: the real ``openai`` SDK against a fake server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from fake_openai import openai_reply
from fake_providers import FakeProvider, Reply, error_reply
from sdk_errors import sdk_exceptions

from contextfold.core.errors import ModelError
from contextfold.llm import OpenAIModel, OpenAIProvider, RetryableError, RetryPolicy, get_model
from contextfold.llm.openai import OPENAI_URL

FAST = RetryPolicy(attempts=3, base_delay=0.001, max_delay=0.01)
SCHEMA = {"type": "object", "properties": {"summary": {"type": "string"}}}

TOOL_CHAT: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Run the tests."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "run_tests", "arguments": '{"path": "tests"}'},
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "FAILED tests/test_io.py::test_read",
        "meta": {"is_error": True},
    },
    {"role": "user", "content": "Summarize."},
]
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def server() -> Iterator[FakeProvider]:
    with FakeProvider("openai") as fake:
        yield fake


@pytest.fixture
def model(server: FakeProvider) -> OpenAIModel:
    """Hosted OpenAI as the adapter sees it, with the URL pointed at the fake."""
    provider = OpenAIProvider(base_url=server.url, api_key="sk-test")
    return OpenAIModel("gpt-4o-mini", provider=provider, timeout=0.2, max_tokens=256, retry=FAST)


def test_complete_returns_text_usage_and_the_model_that_answered(
    server: FakeProvider, model: OpenAIModel
) -> None:
    server.add(openai_reply("the summary", prompt_tokens=40, completion_tokens=7))
    completion = model.complete(USER)
    assert completion.text == "the summary"
    assert completion.data is None
    usage = completion.usage
    assert (usage.model, usage.input_tokens, usage.output_tokens, usage.calls) == (
        "gpt-4o-mini-2024-07-18",
        40,
        7,
        1,
    )
    assert usage.latency_s > 0
    (request,) = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.headers["x-stainless-retry-count"] == "0"


def test_sync_and_async_send_the_same_request_and_read_the_same_answer(
    server: FakeProvider, model: OpenAIModel
) -> None:
    server.add(openai_reply("same"), openai_reply("same"))
    sync = model.complete(TOOL_CHAT, max_tokens=64, schema=SCHEMA)
    async_ = asyncio.run(model.acomplete(TOOL_CHAT, max_tokens=64, schema=SCHEMA))
    assert (sync.text, sync.data) == (async_.text, async_.data)
    assert sync.usage.to_dict() | {"latency_s": 0} == async_.usage.to_dict() | {"latency_s": 0}
    first, second = server.requests
    assert first.body == second.body
    assert first.headers["x-stainless-async"] == "false"
    assert second.headers["x-stainless-async"] != "false"


def test_async_works_across_event_loops(server: FakeProvider, model: OpenAIModel) -> None:
    server.add(openai_reply("one"), openai_reply("two"))
    assert asyncio.run(model.acomplete(USER)).text == "one"
    assert asyncio.run(model.acomplete(USER)).text == "two"


def test_request_carries_the_conversation_without_meta_and_the_token_cap(
    server: FakeProvider, model: OpenAIModel
) -> None:
    server.add(openai_reply(), openai_reply())
    model.complete(TOOL_CHAT, max_tokens=100)
    model.complete(TOOL_CHAT, max_tokens=100_000)
    first, second = server.requests
    expected = [{k: v for k, v in m.items() if k != "meta"} for m in TOOL_CHAT]
    assert first.body["messages"] == expected
    assert first.body["model"] == "gpt-4o-mini"
    assert first.body["max_completion_tokens"] == 100
    assert second.body["max_completion_tokens"] == 256  # the model's cap wins
    assert "response_format" not in first.body


def test_a_schema_asks_for_a_json_object_and_names_it_in_the_system_prompt(
    server: FakeProvider, model: OpenAIModel
) -> None:
    server.add(openai_reply('{"summary": "tests fail"}'), openai_reply('{"summary": "x"}'))
    completion = model.complete(TOOL_CHAT, schema=SCHEMA)
    assert completion.data == {"summary": "tests fail"}
    body = server.requests[0].body
    assert body["response_format"] == {"type": "json_object"}
    system = body["messages"][0]
    assert system["role"] == "system"
    assert system["content"].startswith("You are a coding agent.\n\n")
    assert "JSON" in system["content"] and '"summary"' in system["content"]
    assert body["messages"][1:] == server.requests[0].body["messages"][1:]

    model.complete(USER, schema=SCHEMA)
    messages = server.requests[1].body["messages"]
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "JSON" in messages[0]["content"]


def test_an_answer_that_is_not_json_gives_no_data(server: FakeProvider, model: OpenAIModel) -> None:
    server.add(openai_reply("Sure! Here is the summary."))
    completion = model.complete(USER, schema=SCHEMA)
    assert completion.text == "Sure! Here is the summary."
    assert completion.data is None


def test_429_with_retry_after_is_retried_and_both_attempts_are_counted(
    server: FakeProvider, model: OpenAIModel
) -> None:
    server.add(
        error_reply("openai", 429, "slow down", headers={"retry-after": "0"}),
        openai_reply("ok", prompt_tokens=9, completion_tokens=2),
    )
    completion = model.complete(USER)
    assert completion.text == "ok"
    assert completion.usage.calls == 2
    assert completion.usage.input_tokens == 9
    assert len(server.requests) == 2


def test_retry_after_is_read_from_the_response(server: FakeProvider, model: OpenAIModel) -> None:
    server.add(error_reply("openai", 429, "slow down", headers={"retry-after": "0.005"}))
    model.retry = RetryPolicy(attempts=1)
    with pytest.raises(RetryableError) as info:
        model.complete(USER)
    assert info.value.retry_after == 0.005
    assert info.value.status == 429


def test_500s_until_the_attempts_run_out_raise_retryable_error(
    server: FakeProvider, model: OpenAIModel
) -> None:
    server.add(*[error_reply("openai", 500, "boom")] * 3)
    with pytest.raises(RetryableError) as info:
        model.complete(USER)
    assert info.value.status == 500
    assert "boom" in (info.value.body or "")
    assert len(server.requests) == 3


def test_400_is_a_model_error_with_status_and_body_and_is_not_retried(
    server: FakeProvider, model: OpenAIModel
) -> None:
    server.add(error_reply("openai", 400, "max_tokens is too large"))
    with pytest.raises(ModelError) as info:
        model.complete(USER)
    assert not isinstance(info.value, RetryableError)
    assert info.value.status == 400
    assert "max_tokens is too large" in (info.value.body or "")
    assert isinstance(info.value.__cause__, openai.BadRequestError)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("status", "retryable", "sdk_error"),
    [
        (401, False, openai.AuthenticationError),
        (403, False, openai.PermissionDeniedError),
        (404, False, openai.NotFoundError),
        (408, True, openai.APIStatusError),
        (409, False, openai.ConflictError),
        (422, False, openai.UnprocessableEntityError),
        (429, True, openai.RateLimitError),
        (502, True, openai.InternalServerError),
        (503, True, openai.InternalServerError),
    ],
)
def test_each_status_is_mapped(
    server: FakeProvider,
    model: OpenAIModel,
    status: int,
    retryable: bool,
    sdk_error: type[Exception],
) -> None:
    server.add(error_reply("openai", status, "nope"))
    model.retry = RetryPolicy(attempts=1)
    with pytest.raises(ModelError) as info:
        model.complete(USER)
    assert isinstance(info.value, RetryableError) is retryable
    assert info.value.status == status
    assert isinstance(info.value.__cause__, sdk_error)


@pytest.mark.parametrize(
    "reply",
    [
        Reply(body="{not json"),
        Reply(body={"object": "error"}),
        Reply(body={"choices": "none"}),
        Reply(body={"choices": [{"message": {"content": "x"}}], "usage": "many"}),
        Reply(body="<html>busy</html>", headers={"content-type": "text/html"}),
    ],
    ids=["invalid-json", "no-choices", "choices-not-a-list", "usage-not-an-object", "html"],
)
def test_a_malformed_body_is_a_model_error_and_not_retried(
    server: FakeProvider, model: OpenAIModel, reply: Reply
) -> None:
    server.add(reply)
    with pytest.raises(ModelError) as info:
        model.complete(USER)
    assert not isinstance(info.value, RetryableError)
    assert len(server.requests) == 1


def test_a_response_without_usage_counts_zero_tokens(
    server: FakeProvider, model: OpenAIModel
) -> None:
    server.add(Reply(body={"model": "local", "choices": [{"message": {"content": "hi"}}]}))
    completion = model.complete(USER)
    assert (completion.text, completion.usage.model, completion.usage.input_tokens) == (
        "hi",
        "local",
        0,
    )


def test_a_slow_response_times_out_is_retried_then_fails(
    server: FakeProvider, model: OpenAIModel
) -> None:
    model.retry = RetryPolicy(attempts=2, base_delay=0.001, max_delay=0.01)
    server.add(Reply(delay=1.0, body=openai_reply().body), Reply(delay=1.0, body={}))
    with pytest.raises(RetryableError, match=r"no answer within 0\.2 s"):
        model.complete(USER)
    assert len(server.requests) == 2


def test_a_slow_async_response_times_out_too(server: FakeProvider, model: OpenAIModel) -> None:
    model.retry = RetryPolicy(attempts=1)
    server.add(Reply(delay=1.0, body=openai_reply().body))
    with pytest.raises(RetryableError, match="no answer within"):
        asyncio.run(model.acomplete(USER))


def test_a_dropped_connection_is_retried(server: FakeProvider, model: OpenAIModel) -> None:
    server.add(Reply(drop=True), openai_reply("back"))
    completion = model.complete(USER)
    assert (completion.text, completion.usage.calls) == ("back", 2)


def test_every_sdk_exception_class_is_mapped(model: OpenAIModel) -> None:
    errors = sdk_exceptions(openai, openai.OpenAIError)
    assert len(errors) >= 15
    for exc in errors:
        with pytest.raises(ModelError) as info, model.sdk_errors():
            raise exc
        mapped = info.value
        assert mapped.__cause__ is exc
        if isinstance(exc, openai.APIStatusError):
            retryable = exc.status_code in (408, 429) or exc.status_code >= 500
            assert mapped.status == exc.status_code, type(exc)
            assert isinstance(mapped, RetryableError) is retryable, type(exc)
            assert "happened" in (mapped.body or ""), type(exc)
            if retryable:
                assert isinstance(mapped, RetryableError) and mapped.retry_after == 2.0
        elif isinstance(exc, openai.APIConnectionError):
            assert isinstance(mapped, RetryableError), type(exc)
        else:
            assert not isinstance(mapped, RetryableError), type(exc)


def test_the_hosted_key_comes_from_the_environment(
    server: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    llm = get_model("openai:gpt-4o-mini", retry=FAST)
    assert isinstance(llm, OpenAIModel) and llm.endpoint() == server.url
    server.add(openai_reply())
    llm.complete(USER)
    assert server.requests[0].headers["authorization"] == "Bearer sk-from-env"


def test_a_missing_hosted_key_is_a_clear_model_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ModelError, match="OPENAI_API_KEY"):
        get_model("openai:gpt-4o-mini")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    assert get_model("openai:gpt-4o-mini").endpoint() == OPENAI_URL  # type: ignore[attr-defined]


def test_a_compatible_server_needs_no_key_and_gets_max_tokens(
    server: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    llm = get_model(f"openai-compatible:{server.url}#qwen", max_tokens=32, retry=FAST)
    server.add(openai_reply("local answer", model="qwen"))
    completion = llm.complete(USER, max_tokens=500)
    assert (completion.text, completion.usage.model) == ("local answer", "qwen")
    request = server.requests[0]
    assert request.headers["authorization"] == "Bearer not-needed"
    assert request.body["model"] == "qwen"
    assert request.body["max_tokens"] == 32
    assert "max_completion_tokens" not in request.body


def test_a_compatible_server_gets_the_key_it_is_given(server: FakeProvider) -> None:
    llm = get_model(f"openai-compatible:{server.url}#qwen", api_key="vllm-key", retry=FAST)
    server.add(openai_reply())
    llm.complete(USER)
    assert server.requests[0].headers["authorization"] == "Bearer vllm-key"


def test_without_the_sdk_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(ModelError, match=r"pip install 'contextfold\[openai\]'"):
        get_model("openai-compatible:http://127.0.0.1:9/v1#qwen")
