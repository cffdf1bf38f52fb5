"""Anthropic's Messages API through the ``anthropic`` SDK.

``AnthropicProvider`` is who we talk to: base URL, key, and the SDK clients.
``AnthropicModel`` is how: ``contextfold.formats.anthropic.to_anthropic`` turns the
OpenAI-format messages into Anthropic's (system prompt apart, tool calls as
``tool_use`` and ``tool_result`` blocks), and the text blocks of the answer
are read back. The API requires ``max_tokens``, so the per-call cap is always
sent. Anthropic has no JSON mode: when a schema is asked for, the system
prompt says so and ``Model`` parses the text.

As for OpenAI, the SDK's own retries are off and every SDK failure leaves
through ``AnthropicModel.sdk_errors``.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from contextfold.core.errors import ModelError
from contextfold.core.messages import Message
from contextfold.core.provider_items import ProviderCompacted, ProviderName
from contextfold.formats.anthropic import to_anthropic
from contextfold.formats.provider_compaction import (
    anthropic_compaction_request,
    read_anthropic_compaction,
)
from contextfold.llm.base import (
    Completion,
    Model,
    Usage,
    body_text,
    json_instruction,
)
from contextfold.llm.sdk import SDKClients, SDKProvider, translated_errors

ANTHROPIC_URL = "https://api.anthropic.com"
COMPACTION_MAX_TOKENS = 4096
"""A compaction call's cap when none is given: it covers the summary and any thinking."""
# Cached prompt tokens are billed input too, but reported apart from input_tokens.
_INPUT_KEYS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def import_anthropic() -> Any:
    """The ``anthropic`` module, or a ModelError naming the extra that installs it."""
    try:
        return importlib.import_module("anthropic")
    except ImportError as exc:
        raise ModelError(
            "the Anthropic adapter needs the anthropic SDK: pip install 'contextfold[anthropic]'"
        ) from exc


class AnthropicProvider(SDKProvider):
    """Base URL, key and SDK clients for Anthropic.

    The key comes from ``api_key`` or ``ANTHROPIC_API_KEY``, the URL from
    ``base_url`` or ``ANTHROPIC_BASE_URL``.
    """

    def __init__(
        self, *, base_url: str | None = None, api_key: str | None = None, timeout: float = 60.0
    ) -> None:
        self.sdk = import_anthropic()
        key = api_key or os.environ.get("ANTHROPIC_API_KEY") or ""
        if not key:
            raise ModelError("no Anthropic API key: set ANTHROPIC_API_KEY or pass api_key")
        self.base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or ANTHROPIC_URL
        self.timeout = timeout
        self._clients = SDKClients(
            lambda: self.sdk.Anthropic(
                api_key=key, base_url=self.base_url, timeout=timeout, max_retries=0
            ),
            lambda: self.sdk.AsyncAnthropic(
                api_key=key, base_url=self.base_url, timeout=timeout, max_retries=0
            ),
        )

    def __repr__(self) -> str:
        return f"AnthropicProvider(base_url={self.base_url!r})"


@dataclass
class AnthropicModel(Model):
    """A Claude model; ``name`` is its id (``claude-haiku-4-5``)."""

    provider: AnthropicProvider = field(default_factory=AnthropicProvider, repr=False)

    def endpoint(self) -> str:
        return self.provider.base_url

    def _call(
        self, messages: list[Message], max_tokens: int, schema: Mapping[str, Any] | None
    ) -> Completion:
        request = self.request(messages, max_tokens, schema)
        with self.sdk_errors():
            response = self.provider.client().messages.create(**request)
        return self._read(response)

    async def _acall(
        self, messages: list[Message], max_tokens: int, schema: Mapping[str, Any] | None
    ) -> Completion:
        request = self.request(messages, max_tokens, schema)
        with self.sdk_errors():
            response = await self.provider.async_client().messages.create(**request)
        return self._read(response)

    def compact(
        self,
        messages: Sequence[Message],
        *,
        provider: ProviderName,
        model: str | None = None,
        instructions: str | None = None,
        max_tokens: int | None = None,
    ) -> ProviderCompacted:
        """Anthropic's on-demand compaction of ``messages``: one signed ``compaction``
        block, kept as the raw JSON that came (the SDK's models would add fields the
        API refuses back); wire shapes in ``contextfold.formats.provider_compaction``."""
        if provider != "anthropic":
            raise ModelError(f"{self.name}: an Anthropic model cannot compact for {provider}")
        name = model or self.name
        body, headers = anthropic_compaction_request(
            list(messages),
            model=name,
            max_tokens=max_tokens or COMPACTION_MAX_TOKENS,
            instructions=instructions,
        )

        def call() -> Any:
            options = {"headers": headers, "timeout": self.call_timeout()}
            with self.sdk_errors():
                return self.provider.client().post(
                    "/v1/messages", body=body, cast_to=object, options=options
                )

        data, latency, calls = self.retrying(call)
        blocks, summary, usage = read_anthropic_compaction(data, self.name)
        model_name = data.get("model") if isinstance(data.get("model"), str) else name
        return ProviderCompacted(
            "anthropic",
            model_name,
            tuple(blocks),
            summary,
            {"model": model_name, **usage, "latency_s": round(latency, 4), "calls": calls},
        )

    def request(
        self, messages: list[Message], max_tokens: int, schema: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """Keyword arguments of ``messages.create`` for one attempt."""
        system, turns = to_anthropic(messages)
        if schema is not None:
            instruction = json_instruction(schema)
            system = f"{system}\n\n{instruction}" if system else instruction
        request: dict[str, Any] = {
            "model": self.name,
            "max_tokens": max_tokens,
            "messages": turns,
            "timeout": self.call_timeout(),
        }
        if system:
            request["system"] = system
        return request

    def sdk_errors(self) -> AbstractContextManager[None]:
        """Translate every exception of the SDK into ModelError or RetryableError."""
        sdk = self.provider.sdk
        return translated_errors(self.name, self.call_timeout(), sdk, sdk.AnthropicError)

    def _read(self, response: Any) -> Completion:
        """Text, usage and model from a response, refusing any body that is not a message."""
        data = response.to_dict(warnings=False) if hasattr(response, "to_dict") else response
        content = data.get("content") if isinstance(data, dict) else None
        if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
            raise ModelError(f"{self.name}: response is not a message", body=body_text(data))
        texts = [b.get("text") for b in content if b.get("type") == "text"]
        if not all(isinstance(t, str) for t in texts):
            raise ModelError(f"{self.name}: a text block has no text", body=body_text(data))
        usage = data.get("usage") or {}
        if not isinstance(usage, dict):
            raise ModelError(f"{self.name}: response usage is malformed", body=body_text(data))
        inputs = [usage.get(key) or 0 for key in _INPUT_KEYS]
        output = usage.get("output_tokens") or 0
        if not all(isinstance(n, int) for n in [*inputs, output]):
            raise ModelError(f"{self.name}: response usage is malformed", body=body_text(data))
        model = data.get("model")
        name = model if isinstance(model, str) and model else self.name
        usage_record = Usage(name, input_tokens=sum(inputs), output_tokens=output)
        text = "".join(str(t) for t in texts)
        # Claude's safety stop: whatever text came before it is no answer.
        refusal = (text or "stop_reason: refusal") if data.get("stop_reason") == "refusal" else None
        return Completion(text, usage_record, refusal=refusal)
