"""Models: the ``LLM`` protocol, the adapters, and ``get_model`` to build one from a string."""

from contextfold.llm.anthropic import AnthropicModel, AnthropicProvider
from contextfold.llm.base import LLM, Completion, Model, RetryableError, RetryPolicy, Usage
from contextfold.llm.openai import OpenAIModel, OpenAIProvider
from contextfold.llm.registry import get_model, provider_names, register_provider

__all__ = [
    "LLM",
    "AnthropicModel",
    "AnthropicProvider",
    "Completion",
    "Model",
    "OpenAIModel",
    "OpenAIProvider",
    "RetryPolicy",
    "RetryableError",
    "Usage",
    "get_model",
    "provider_names",
    "register_provider",
]
