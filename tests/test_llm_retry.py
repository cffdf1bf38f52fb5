"""The retry loop every adapter shares, the HTTP status rules, and the guard on model calls."""

from __future__ import annotations

import asyncio
import email.utils
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from fake_openai import openai_reply
from fake_providers import FakeProvider

from contextfold.core.errors import ModelError
from contextfold.core.messages import Message
from contextfold.llm import Completion, Model, OpenAIModel, OpenAIProvider, RetryPolicy, Usage
from contextfold.llm.base import (
    BLOCK_ENV,
    RetryableError,
    call_limits,
    parse_json,
    retry_after,
    status_error,
)
from contextfold.testing import block_model_calls

USER = [{"role": "user", "content": "hi"}]


@dataclass
class Flaky(Model):
    """A model double whose attempts fail or answer as scripted, recording each attempt."""

    outcomes: list[BaseException | str] = field(default_factory=list)
    url: str | None = "https://api.example.com/v1"
    caps: list[int] = field(default_factory=list)

    def endpoint(self) -> str | None:
        return self.url

    def _call(
        self, messages: list[Message], max_tokens: int, schema: Mapping[str, Any] | None
    ) -> Completion:
        self.caps.append(max_tokens)
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return Completion(outcome, Usage("flaky-1", input_tokens=10, output_tokens=2))


def flaky(*outcomes: BaseException | str, attempts: int = 3, **kwargs: Any) -> Flaky:
    policy = RetryPolicy(attempts=attempts, base_delay=0.001, max_delay=0.01)
    return Flaky("flaky", retry=policy, outcomes=list(outcomes), **kwargs)


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The delays the loop waits, sync and async, without waiting them."""
    waited: list[float] = []

    async def fake_async_sleep(seconds: float) -> None:
        waited.append(seconds)

    monkeypatch.setattr(time, "sleep", waited.append)
    monkeypatch.setattr(asyncio, "sleep", fake_async_sleep)
    return waited


@pytest.mark.parametrize("run_async", [False, True], ids=["sync", "async"])
def test_a_retryable_failure_is_retried_and_the_attempts_counted(
    run_async: bool, sleeps: list[float]
) -> None:
    model = flaky(RetryableError("busy", status=503, retry_after=1.5), "done")
    completion = asyncio.run(model.acomplete(USER)) if run_async else model.complete(USER)
    assert completion.text == "done"
    assert (completion.usage.calls, completion.usage.model, completion.usage.input_tokens) == (
        2,
        "flaky-1",
        10,
    )
    assert sleeps == [0.01]  # Retry-After wins, within the policy's cap


@pytest.mark.parametrize("run_async", [False, True], ids=["sync", "async"])
def test_the_last_retryable_failure_is_raised_when_attempts_run_out(
    run_async: bool, sleeps: list[float]
) -> None:
    errors = [RetryableError(f"busy {i}", status=500) for i in range(3)]
    model = flaky(*errors)
    with pytest.raises(RetryableError) as info:
        if run_async:
            asyncio.run(model.acomplete(USER))
        else:
            model.complete(USER)
    assert info.value is errors[-1]
    assert len(sleeps) == 2  # no wait after the last attempt


def test_call_limits_set_one_callers_timeout_and_attempts_and_no_one_elses(
    sleeps: list[float],
) -> None:
    model = flaky(RetryableError("503"), RetryableError("503"), "ok", attempts=3, timeout=60.0)
    with call_limits(timeout=2.5, attempts=1):
        assert model.call_timeout() == 2.5
        with pytest.raises(RetryableError):
            model.complete(USER)
    assert len(model.outcomes) == 2  # one attempt made, not three
    assert model.call_timeout() == 60.0  # outside the block, the model's own settings
    assert model.complete(USER).usage.calls == 2


def test_a_model_error_is_not_retried(sleeps: list[float]) -> None:
    model = flaky(ModelError("bad request", status=400), "never")
    with pytest.raises(ModelError, match="bad request"):
        model.complete(USER)
    assert model.outcomes == ["never"]
    assert sleeps == []


def test_the_per_call_cap_never_exceeds_the_models() -> None:
    model = flaky("a", "b", "c", max_tokens=200)
    model.complete(USER)
    model.complete(USER, max_tokens=50)
    model.complete(USER, max_tokens=5000)
    assert model.caps == [200, 50, 200]


def test_a_schema_answer_is_parsed_and_bad_json_gives_none() -> None:
    model = flaky('```json\n{"a": 1}\n```', "no json here")
    assert model.complete(USER, schema={"type": "object"}).data == {"a": 1}
    assert model.complete(USER, schema={"type": "object"}).data is None


@pytest.mark.parametrize(
    ("text", "data"),
    [
        ('{"a": 1}', {"a": 1}),
        ('```json\n{"a": 1}\n```', {"a": 1}),
        ('```json\n{"a": 1}', {"a": 1}),  # cut off by the token cap before the fence closed
        ('Here is the summary:\n```json\n{"a": 1}\n```\nAnything else?', {"a": 1}),
        ('The answer is {"a": 1}', None),  # braces in prose are not an answer
        ("no json here", None),
        ("Sorry\n```", None),
    ],
)
def test_parse_json_takes_a_fenced_answer_after_a_preamble(text: str, data: Any) -> None:
    assert parse_json(text) == data


def test_backoff_is_exponential_with_full_jitter_and_capped() -> None:
    policy = RetryPolicy(attempts=6, base_delay=0.5, max_delay=3.0)
    for attempt, ceiling in [(0, 0.5), (1, 1.0), (2, 2.0), (3, 3.0), (5, 3.0)]:
        delays = [policy.delay(attempt, None) for _ in range(200)]
        assert all(0 <= d <= ceiling for d in delays)
        assert max(delays) > ceiling / 2  # jitter spreads over the whole range
    assert policy.delay(0, 2.0) == 2.0
    assert policy.delay(0, 60.0) == 3.0
    assert policy.delay(0, -1.0) == 0.0


def test_retry_after_reads_milliseconds_seconds_and_dates() -> None:
    assert retry_after({"retry-after-ms": "250"}) == 0.25
    assert retry_after({"retry-after-ms": "soon", "retry-after": "3"}) == 3.0
    assert retry_after({"retry-after": "0.5"}) == 0.5
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 27 <= (retry_after({"retry-after": later}) or 0) <= 30
    past = email.utils.formatdate(time.time() - 30, usegmt=True)
    assert retry_after({"retry-after": past}) == 0.0
    assert retry_after({"retry-after": "whenever"}) is None
    assert retry_after({"retry-after": "nan"}) is None
    assert retry_after({}) is None


@pytest.mark.parametrize(
    ("status", "headers", "retryable"),
    [
        (400, {}, False),
        (401, {}, False),
        (404, {}, False),
        (408, {}, True),
        (429, {}, True),
        (500, {}, True),
        (529, {}, True),
        (503, {"x-should-retry": "false"}, False),
        (409, {"x-should-retry": "true"}, True),
    ],
)
def test_status_rules(status: int, headers: dict[str, str], retryable: bool) -> None:
    error = status_error("failed", status=status, body='{"e": 1}', headers=headers)
    assert isinstance(error, RetryableError) is retryable
    assert (error.status, error.body) == (status, '{"e": 1}')


# The guard.


@pytest.fixture
def no_env_block(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BLOCK_ENV, raising=False)


@pytest.fixture
def blocked() -> Iterator[None]:
    """The guard used as a fixture body, as a user's conftest would."""
    with block_model_calls():
        yield


@pytest.mark.usefixtures("no_env_block", "blocked")
@pytest.mark.parametrize("run_async", [False, True], ids=["sync", "async"])
def test_blocked_calls_to_a_remote_model_fail_before_any_attempt(run_async: bool) -> None:
    model = flaky("never")
    with pytest.raises(ModelError, match="model calls are blocked") as info:
        if run_async:
            asyncio.run(model.acomplete(USER))
        else:
            model.complete(USER)
    assert not isinstance(info.value, RetryableError)
    assert model.caps == []


@pytest.mark.usefixtures("no_env_block", "blocked")
@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8080/v1", "http://localhost:11434/v1", "http://[::1]:8000/v1"]
)
def test_blocked_calls_to_this_machine_go_through(url: str) -> None:
    assert flaky("local", url=url).complete(USER).text == "local"


@pytest.mark.usefixtures("no_env_block", "blocked")
def test_a_model_that_does_not_say_where_it_calls_is_blocked() -> None:
    with pytest.raises(ModelError, match="model calls are blocked"):
        flaky("never", url=None).complete(USER)


@pytest.mark.usefixtures("no_env_block")
def test_the_block_ends_with_its_block_and_blocks_nest() -> None:
    model = flaky("after")
    with block_model_calls():
        with block_model_calls():
            pass
        with pytest.raises(ModelError, match="model calls are blocked"):
            model.complete(USER)
    assert model.complete(USER).text == "after"


@pytest.mark.usefixtures("no_env_block", "blocked")
def test_the_block_holds_in_other_threads() -> None:
    model = flaky("never")
    failures: list[BaseException] = []

    def work() -> None:
        try:
            model.complete(USER)
        except ModelError as exc:
            failures.append(exc)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert len(failures) == 1 and "model calls are blocked" in str(failures[0])


def test_the_environment_variable_blocks_the_whole_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(BLOCK_ENV, "1")
    with pytest.raises(ModelError, match="model calls are blocked"):
        flaky("never").complete(USER)
    assert flaky("local", url="http://127.0.0.1:1/v1").complete(USER).text == "local"
    monkeypatch.setenv(BLOCK_ENV, "0")
    assert flaky("remote").complete(USER).text == "remote"


@pytest.mark.usefixtures("no_env_block", "blocked")
def test_a_real_adapter_is_blocked_before_it_opens_a_connection() -> None:
    provider = OpenAIProvider(api_key="sk-test")  # the real api.openai.com
    model = OpenAIModel("gpt-4o-mini", provider=provider)
    with pytest.raises(ModelError, match=r"gpt-4o-mini at https://api\.openai\.com/v1"):
        model.complete(USER)


@pytest.mark.usefixtures("no_env_block", "blocked")
def test_a_real_adapter_reaches_a_local_server_while_blocked() -> None:
    with FakeProvider("openai") as server:
        server.add(openai_reply("from localhost"))
        provider = OpenAIProvider(base_url=server.url, compatible=True)
        assert OpenAIModel("qwen", provider=provider).complete(USER).text == "from localhost"
