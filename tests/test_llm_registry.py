"""``get_model`` and the provider registry: spec parsing, plugins, laziness, errors."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message
from contextfold.llm import (
    LLM,
    AnthropicModel,
    Completion,
    OpenAIModel,
    RetryPolicy,
    Usage,
    get_model,
    provider_names,
    register_provider,
    registry,
)
from contextfold.llm.offline import OfflineModel
from contextfold.llm.openai import OPENAI_URL


@pytest.fixture(autouse=True)
def _own_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plugins a test registers do not outlive it."""
    monkeypatch.setattr(registry, "_PROVIDERS", dict(registry._PROVIDERS))


def test_built_in_providers_are_registered() -> None:
    # Tests in this process may have registered more (the workers' "slow" model).
    assert {"anthropic", "offline", "openai", "openai-compatible"} <= set(provider_names())
    assert provider_names() == sorted(provider_names())


def test_openai_spec_builds_a_hosted_openai_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    policy = RetryPolicy(attempts=2)
    llm = get_model("openai:gpt-4o-mini", timeout=5.0, max_tokens=300, retry=policy)
    assert isinstance(llm, OpenAIModel) and isinstance(llm, LLM)
    assert (llm.name, llm.timeout, llm.max_tokens, llm.retry) == ("gpt-4o-mini", 5.0, 300, policy)
    assert llm.endpoint() == OPENAI_URL
    assert llm.provider.max_tokens_param == "max_completion_tokens"
    assert llm.provider.timeout == 5.0


def test_openai_compatible_spec_is_a_base_url_then_the_model_after_hash() -> None:
    llm = get_model("openai-compatible:http://127.0.0.1:8080/v1#qwen2.5:0.5b")
    assert isinstance(llm, OpenAIModel)
    assert (llm.name, llm.endpoint()) == ("qwen2.5:0.5b", "http://127.0.0.1:8080/v1")
    assert llm.provider.max_tokens_param == "max_tokens"


def test_anthropic_spec_builds_an_anthropic_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-x")
    llm = get_model("anthropic:claude-haiku-4-5", base_url="http://localhost:9000")
    assert isinstance(llm, AnthropicModel)
    assert (llm.name, llm.endpoint()) == ("claude-haiku-4-5", "http://localhost:9000")


def test_offline_spec_builds_the_model_free_stand_in() -> None:
    llm = get_model("offline", max_tokens=50)
    assert isinstance(llm, OfflineModel) and llm.max_tokens == 50
    with pytest.raises(InvalidInput) as info:
        get_model("offline:something")
    assert info.value.field == "model"


def test_an_unknown_provider_names_the_field_and_lists_the_known_ones() -> None:
    with pytest.raises(InvalidInput) as info:
        get_model("gemini:flash")
    assert info.value.field == "model"
    message = str(info.value)
    assert "'gemini'" in message
    for name in ("anthropic", "offline", "openai", "openai-compatible"):
        assert name in message


@pytest.mark.parametrize(
    "spec",
    [
        "openai",
        "openai:",
        "anthropic:  ",
        "openai-compatible:http://127.0.0.1:8080/v1",
        "openai-compatible:http://127.0.0.1:8080/v1#",
        "openai-compatible:#qwen",
        "openai-compatible:127.0.0.1:8080#qwen",
    ],
)
def test_a_malformed_spec_is_invalid_input_naming_the_field(
    spec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-x")
    with pytest.raises(InvalidInput) as info:
        get_model(spec)
    assert info.value.field == "model"
    assert "as in '" in str(info.value)  # the error shows a well-formed spec


class Echo:
    """A third-party model, as a plugin would bring one."""

    def __init__(self, name: str, prefix: str = "") -> None:
        self.name = name
        self.prefix = prefix

    def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        return Completion(self.prefix + str(messages[-1]["content"]), Usage(self.name))

    async def acomplete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        return self.complete(messages, max_tokens=max_tokens, schema=schema)


def test_a_registered_provider_gets_the_rest_of_the_spec_and_the_options() -> None:
    register_provider("echo", lambda rest, **options: Echo(rest, **options))
    llm = get_model("echo:parrot:v2", prefix="> ")
    assert isinstance(llm, Echo) and llm.name == "parrot:v2"
    assert llm.complete([{"role": "user", "content": "hi"}]).text == "> hi"
    assert "echo" in provider_names()


def test_a_later_registration_replaces_a_built_in() -> None:
    register_provider("openai", lambda rest, **options: Echo(f"mine:{rest}"))
    assert get_model("openai:gpt-4o-mini").name == "mine:gpt-4o-mini"


@pytest.mark.parametrize("prefix", ["", "a:b"])
def test_a_prefix_must_be_a_plain_name(prefix: str) -> None:
    with pytest.raises(InvalidInput):
        register_provider(prefix, Echo)


def test_importing_contextfold_loads_no_sdk() -> None:
    code = (
        "import sys, contextfold, contextfold.llm;"
        "print(sorted(m for m in ('openai', 'anthropic') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert out.strip() == "[]"
