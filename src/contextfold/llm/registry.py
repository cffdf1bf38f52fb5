"""``get_model("provider:rest")``: a model from a string, through a small plugin registry.

The part before the first ``:`` names a provider; its factory receives the rest
and the keyword options. The built-in providers are registered below exactly
as a third party would register its own, and each imports its adapter (and
so its SDK) only when a model of it is asked for::

    openai:gpt-4o-mini                               key from OPENAI_API_KEY
    anthropic:claude-haiku-4-5                       key from ANTHROPIC_API_KEY
    openai-compatible:http://127.0.0.1:8080/v1#qwen  base URL, then the model after '#'
    offline                                          the model-free stand-in

Options of the adapters: ``timeout``, ``max_tokens`` (the per-call cap),
``retry`` (a ``RetryPolicy``), ``api_key``, and for the hosted providers
``base_url`` (an OpenAI-compatible spec carries its own).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.llm.base import LLM

ProviderFactory = Callable[..., LLM]
"""``factory(rest, **options) -> LLM``; ``rest`` is the spec after ``provider:``."""

_PROVIDERS: dict[str, ProviderFactory] = {}


def register_provider(prefix: str, factory: ProviderFactory) -> None:
    """Make ``get_model(f"{prefix}:...")`` call ``factory``; a later registration wins."""
    if not prefix or ":" in prefix:
        raise InvalidInput(f"provider prefix {prefix!r} must be non-empty, without ':'")
    _PROVIDERS[prefix] = factory


def provider_names() -> list[str]:
    """The registered prefixes, sorted; errors list them."""
    return sorted(_PROVIDERS)


def get_model(spec: str, **options: Any) -> LLM:
    """The model ``spec`` names, e.g. ``get_model("openai:gpt-4o-mini", timeout=30)``."""
    prefix, _, rest = spec.partition(":")
    factory = _PROVIDERS.get(prefix)
    if factory is None:
        raise InvalidInput(
            f"unknown model provider {prefix!r} in {spec!r}; known: {', '.join(provider_names())}",
            field="model",
        )
    return factory(rest, **options)


def _model_name(rest: str, example: str) -> str:
    if not rest.strip():
        raise InvalidInput(
            f"a model name is needed after the provider, as in {example!r}", field="model"
        )
    return rest.strip()


def _openai(
    rest: str, *, base_url: str | None = None, api_key: str | None = None, **options: Any
) -> LLM:
    from contextfold.llm.openai import OpenAIModel, OpenAIProvider

    name = _model_name(rest, "openai:gpt-4o-mini")
    provider = OpenAIProvider(
        base_url=base_url, api_key=api_key, timeout=options.get("timeout", 60.0)
    )
    return OpenAIModel(name, provider=provider, **options)


def _openai_compatible(rest: str, *, api_key: str | None = None, **options: Any) -> LLM:
    from contextfold.llm.openai import OpenAIModel, OpenAIProvider

    example = "openai-compatible:http://127.0.0.1:8080/v1#qwen"
    url, _, name = rest.partition("#")  # a base URL has no fragment; a model name may
    if not url.startswith(("http://", "https://")):
        raise InvalidInput(
            f"an OpenAI-compatible model is '<base URL>#<model>', as in {example!r}; got {rest!r}",
            field="model",
        )
    provider = OpenAIProvider(
        base_url=url, api_key=api_key, compatible=True, timeout=options.get("timeout", 60.0)
    )
    return OpenAIModel(_model_name(name, example), provider=provider, **options)


def _anthropic(
    rest: str, *, base_url: str | None = None, api_key: str | None = None, **options: Any
) -> LLM:
    from contextfold.llm.anthropic import AnthropicModel, AnthropicProvider

    name = _model_name(rest, "anthropic:claude-haiku-4-5")
    provider = AnthropicProvider(
        base_url=base_url, api_key=api_key, timeout=options.get("timeout", 60.0)
    )
    return AnthropicModel(name, provider=provider, **options)


def _offline(rest: str, **options: Any) -> LLM:
    from contextfold.llm.offline import OfflineModel

    if rest:
        raise InvalidInput(f"the offline model takes no name, got {rest!r}", field="model")
    return OfflineModel(**options)


register_provider("openai", _openai)
register_provider("openai-compatible", _openai_compatible)
register_provider("anthropic", _anthropic)
register_provider("offline", _offline)
