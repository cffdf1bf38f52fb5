"""Models: the ``LLM`` protocol, the adapters, and ``get_model`` to build one from a string."""

from contextfold.llm.base import LLM, Completion, Model, RetryableError, RetryPolicy, Usage

__all__ = ["LLM", "Completion", "Model", "RetryPolicy", "RetryableError", "Usage"]
