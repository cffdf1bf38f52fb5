"""Claude token counts estimated offline: ``o200k_base`` tokens times a stated factor.

Anthropic publishes no tokenizer for Claude 3 or later. The npm package
``@anthropic-ai/tokenizer`` is Claude 2's, and its own README says it is not
accurate for Claude 3 and later; the count Anthropic stands behind is its
``POST /v1/messages/count_tokens`` endpoint, which its docs call an estimate
too. Claude models use one of two vocabularies, as ``ctok`` (an MIT-licensed
offline reconstruction of Claude's counts, probed against that endpoint)
found: ``v3`` (Claude 3 up to Opus 4.6, Sonnet 4.6 and Haiku 4.5) and ``v4.7``
(Opus 4.7 and later, and the 5 generation), which makes the same English text
about 1.4 times longer.

The estimate is the ``o200k_base`` count times the factor of the model's
vocabulary: the highest ratio of ``ctok``'s count to the ``o200k_base`` count
over the conversations ``bench/anthropic_tokens.py`` reads, rounded up, so it
counts more than Claude does on every conversation measured (by 13.5% for v3
and 22.5% for v4.7 on average there). Budgets made with it leave Claude room
rather than overflow. Where the upstream's count endpoint is reachable,
``contextfold.llm.claude_calibration`` measures the factor on the prompts sent,
and the proxy takes that one where it is higher.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from contextfold.core.tokens import TiktokenTokenizer, TokenCounter


class Vocabulary(NamedTuple):
    """One Claude vocabulary: its name and the factor over ``o200k_base`` counts."""

    name: str
    factor: float


V3 = Vocabulary("v3", 1.25)
V4_7 = Vocabulary("v4.7", 1.85)

# Model name prefixes (of ``model_name``) and their vocabulary;
# the longest matching prefix wins, and any other ``claude-`` model reads V3.
_PREFIXES: dict[str, Vocabulary] = {
    "claude-opus-4-7": V4_7,
    "claude-opus-4-8": V4_7,
    "claude-opus-4-9": V4_7,
    "claude-opus-5": V4_7,
    "claude-sonnet-5": V4_7,
    "claude-haiku-5": V4_7,
    "claude-fable-": V4_7,
    "claude-mythos-": V4_7,
}


def model_name(model: str) -> str:
    """``model`` as the vendors' tables spell it: lowercased, without a router's prefix
    (``anthropic/``), a cloud's (Bedrock's ``us.anthropic.``) or a ``@version`` (Vertex),
    and a Claude version with dashes, as Anthropic writes it (``claude-opus-4.7`` on a
    router is ``claude-opus-4-7``)."""
    bare = model.rpartition("/")[2].strip().lower()
    bare = bare.rpartition("anthropic.")[2].partition("@")[0]
    return bare.replace(".", "-") if bare.startswith("claude-") else bare


def vocabulary(model: str) -> Vocabulary | None:
    """The vocabulary of a Claude ``model`` (``anthropic/claude-opus-5``,
    ``us.anthropic.claude-opus-4-7-v1:0`` too); None for a model that is not Claude."""
    bare = model_name(model)
    if not bare.startswith("claude-"):
        return None
    found = [prefix for prefix in _PREFIXES if bare.startswith(prefix)]
    return _PREFIXES[max(found, key=len)] if found else V3


class ClaudeEstimate:
    """A ``Tokenizer`` whose count is the ``o200k_base`` count times ``factor``, rounded up."""

    def __init__(self, vocab: Vocabulary, factor: float | None = None) -> None:
        self.factor = vocab.factor if factor is None else factor
        self.name = f"claude-{vocab.name}-estimate"
        self._o200k = TiktokenTokenizer("o200k_base")

    def count(self, text: str) -> int:
        return math.ceil(self._o200k.count(text) * self.factor) if text else 0


def claude_counter(model: str, factor: float | None = None) -> TokenCounter | None:
    """A counter of ``model``'s tokens, estimated (``factor`` in place of the vocabulary's
    when given, such as a calibrated one); None for a model that is not Claude."""
    vocab = vocabulary(model)
    return None if vocab is None else TokenCounter(ClaudeEstimate(vocab, factor))
