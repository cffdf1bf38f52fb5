"""The offline Claude estimate: which vocabulary a model reads, and the stated factor."""

from __future__ import annotations

import math

import pytest

from contextfold.core.claude_tokens import V3, V4_7, claude_counter, vocabulary
from contextfold.core.tokens import get_counter

TEXT = "Refactor the loader so that it streams rows instead of reading the whole file."


@pytest.mark.parametrize(
    ("model", "vocab"),
    [
        ("claude-3-5-haiku-20241022", V3),
        ("claude-sonnet-4-5-20250929", V3),
        ("claude-opus-4-6", V3),
        ("claude-sonnet-4-6", V3),
        ("claude-haiku-4-5", V3),
        ("claude-opus-4-7", V4_7),
        ("claude-opus-4-8-20260601", V4_7),
        ("claude-opus-5", V4_7),
        ("claude-opus-5-5", V4_7),
        ("claude-sonnet-5-5", V4_7),
        ("claude-fable-5-1", V4_7),
        ("anthropic/Claude-Sonnet-5", V4_7),
        ("us.anthropic.claude-opus-4-7-v1:0", V4_7),
        ("claude-sonnet-4-6@20260217", V3),
        ("anthropic/claude-opus-4.7", V4_7),
        ("claude-some-future-name", V3),
    ],
)
def test_each_claude_model_reads_its_vocabulary(model: str, vocab: object) -> None:
    assert vocabulary(model) == vocab


@pytest.mark.parametrize("model", ["gpt-5.5", "gemini-3-pro", "my-claude-finetune", ""])
def test_a_model_that_is_not_claude_has_no_claude_counter(model: str) -> None:
    assert vocabulary(model) is None
    assert claude_counter(model) is None


def test_the_estimate_is_o200k_times_the_factor_rounded_up() -> None:
    o200k = get_counter("o200k_base").text(TEXT)
    for model, vocab in (("claude-haiku-4-5", V3), ("claude-opus-5", V4_7)):
        counter = claude_counter(model)
        assert counter is not None
        assert counter.text(TEXT) == math.ceil(o200k * vocab.factor) > o200k
        assert counter.name == f"claude-{vocab.name}-estimate"
        assert counter.text("") == 0
    measured = claude_counter("claude-opus-5", factor=1.1)
    assert measured is not None and measured.text(TEXT) == math.ceil(o200k * 1.1)


def test_the_counter_counts_whole_messages_like_every_counter() -> None:
    counter = claude_counter("claude-sonnet-5")
    assert counter is not None
    messages = [
        {"role": "user", "content": TEXT},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"path": "loader.py"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "def load(): ..."},
    ]
    o200k = get_counter("o200k_base").messages(messages)
    assert o200k < counter.messages(messages) <= math.ceil(o200k * V4_7.factor) + len(messages) * 3
