"""OpenAI and OpenAI-compatible servers (vLLM, Ollama, llama.cpp) through the ``openai`` SDK.

``OpenAIProvider`` is who we talk to: base URL, key, and the SDK clients.
``OpenAIModel`` is how: it sends contextfold's messages (already OpenAI chat
format, minus ``meta``) and reads text and usage back. The SDK is imported
when a provider is made, so the core install does not need it; without it the
error names the extra to install.

The SDK's own retries are off (``max_retries=0``): ``Model`` retries, so there
is one backoff policy and ``Usage.calls`` counts every attempt. Every SDK
failure leaves through ``OpenAIModel.sdk_errors``.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from contextfold.core.errors import ModelError
from contextfold.core.messages import Message, for_model
from contextfold.core.provider_items import ProviderCompacted, ProviderName
from contextfold.formats.provider_compaction import (
    OPENAI_COMPACT_PATH,
    openai_compaction_request,
    read_openai_compaction,
)
from contextfold.llm.base import (
    Completion,
    Model,
    Usage,
    body_text,
    json_instruction,
)
from contextfold.llm.sdk import SDKClients, SDKProvider, translated_errors

OPENAI_URL = "https://api.openai.com/v1"
# Local servers ignore the key, but the SDK refuses to start without one.
NO_KEY = "not-needed"


def import_openai() -> Any:
    """The ``openai`` module, or a ModelError naming the extra that installs it."""
    try:
        return importlib.import_module("openai")
    except ImportError as exc:
        raise ModelError(
            "the OpenAI adapter needs the openai SDK: pip install 'contextfold[openai]'"
        ) from exc


class OpenAIProvider(SDKProvider):
    """Base URL, key and SDK clients for an OpenAI-style server.

    Hosted OpenAI (``compatible=False``) needs a key, from ``api_key`` or
    ``OPENAI_API_KEY``, and its URL may come from ``OPENAI_BASE_URL``. A
    compatible server gets ``api_key`` or a dummy key: ``OPENAI_API_KEY`` is
    never sent to a third party. Compatible servers are sent ``max_tokens``;
    OpenAI gets ``max_completion_tokens``, which its reasoning models require.
    """

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        compatible: bool = False,
        timeout: float = 60.0,
    ) -> None:
        self.sdk = import_openai()
        if compatible:
            if not base_url:
                raise ModelError("an OpenAI-compatible provider needs a base URL")
            key = api_key or NO_KEY
        else:
            base_url = base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_URL
            key = api_key or os.environ.get("OPENAI_API_KEY") or ""
            if not key:
                raise ModelError("no OpenAI API key: set OPENAI_API_KEY or pass api_key")
        self.base_url = base_url
        self.compatible = compatible
        self.timeout = timeout
        self.max_tokens_param = "max_tokens" if compatible else "max_completion_tokens"
        self._clients = SDKClients(
            lambda: self.sdk.OpenAI(
                api_key=key, base_url=self.base_url, timeout=timeout, max_retries=0
            ),
            lambda: self.sdk.AsyncOpenAI(
                api_key=key, base_url=self.base_url, timeout=timeout, max_retries=0
            ),
        )

    def __repr__(self) -> str:
        return f"OpenAIProvider(base_url={self.base_url!r}, compatible={self.compatible})"


@dataclass
class OpenAIModel(Model):
    """A chat model behind an OpenAI-style ``/chat/completions`` endpoint; ``name`` is its id."""

    provider: OpenAIProvider = field(default_factory=OpenAIProvider, repr=False)

    def endpoint(self) -> str:
        return self.provider.base_url

    def _call(
        self, messages: list[Message], max_tokens: int, schema: Mapping[str, Any] | None
    ) -> Completion:
        request = self.request(messages, max_tokens, schema)
        with self.sdk_errors():
            response = self.provider.client().chat.completions.create(**request)
        return self._read(response)

    async def _acall(
        self, messages: list[Message], max_tokens: int, schema: Mapping[str, Any] | None
    ) -> Completion:
        request = self.request(messages, max_tokens, schema)
        with self.sdk_errors():
            response = await self.provider.async_client().chat.completions.create(**request)
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
        """``POST /responses/compact`` of ``messages``: the compacted window, kept as
        the raw JSON that came (wire shapes in
        ``contextfold.formats.provider_compaction``). ``max_tokens`` has no
        counterpart there and is ignored."""
        if provider != "openai":
            raise ModelError(f"{self.name}: an OpenAI model cannot compact for {provider}")
        name = model or self.name
        body = openai_compaction_request(list(messages), model=name, instructions=instructions)

        def call() -> Any:
            options = {"timeout": self.call_timeout()}
            with self.sdk_errors():
                return self.provider.client().post(
                    OPENAI_COMPACT_PATH, body=body, cast_to=object, options=options
                )

        data, latency, calls = self.retrying(call)
        items, usage = read_openai_compaction(data, self.name)
        model_name = data.get("model") if isinstance(data.get("model"), str) else name
        return ProviderCompacted(
            "openai",
            model_name,
            tuple(items),
            None,
            {"model": model_name, **usage, "latency_s": round(latency, 4), "calls": calls},
        )

    def request(
        self, messages: list[Message], max_tokens: int, schema: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """Keyword arguments of ``chat.completions.create`` for one attempt."""
        sent = [for_model(m) for m in messages]
        request: dict[str, Any] = {
            "model": self.name,
            "messages": sent,
            self.provider.max_tokens_param: max_tokens,
            "timeout": self.call_timeout(),
        }
        if schema is not None:
            request["messages"] = _with_system(sent, json_instruction(schema))
            request["response_format"] = {"type": "json_object"}
        return request

    def sdk_errors(self) -> AbstractContextManager[None]:
        """Translate every exception of the SDK into ModelError or RetryableError."""
        sdk = self.provider.sdk
        return translated_errors(self.name, self.call_timeout(), sdk, sdk.OpenAIError)

    def _read(self, response: Any) -> Completion:
        """Text, usage and model from a response, refusing any body that is not a completion."""
        data = response.to_dict(warnings=False) if hasattr(response, "to_dict") else response
        if not isinstance(data, dict):
            raise ModelError(
                f"{self.name}: response is not a chat completion", body=body_text(data)
            )
        choices = data.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        message = first.get("message") if isinstance(first, dict) else None
        if not isinstance(message, dict):
            raise ModelError(f"{self.name}: response has no message", body=body_text(data))
        content, refusal = message.get("content"), message.get("refusal")
        text = content if isinstance(content, str) else ""
        # The refusal travels apart from the text, so no check of the text can miss it.
        refused = str(refusal) if refusal else None
        # Some compatible servers leave usage out; a malformed one is an error.
        usage = data.get("usage") or {}
        if not isinstance(usage, dict):
            raise ModelError(f"{self.name}: response usage is malformed", body=body_text(data))
        prompt, output = (usage.get(key) or 0 for key in ("prompt_tokens", "completion_tokens"))
        if not isinstance(prompt, int) or not isinstance(output, int):
            raise ModelError(f"{self.name}: response usage is malformed", body=body_text(data))
        model = data.get("model")
        name = model if isinstance(model, str) and model else self.name
        return Completion(
            text, Usage(name, input_tokens=prompt, output_tokens=output), refusal=refused
        )


def _with_system(messages: list[Message], instruction: str) -> list[Message]:
    """``messages`` with ``instruction`` appended to the system prompt (one is added if none)."""
    if messages and messages[0]["role"] == "system":
        first = dict(messages[0])
        content = first["content"]
        if isinstance(content, str):
            first["content"] = f"{content}\n\n{instruction}" if content else instruction
        else:
            first["content"] = [*content, {"type": "text", "text": instruction}]
        return [first, *messages[1:]]
    return [{"role": "system", "content": instruction}, *messages]
