"""Context windows of known models: data, each number with where it was read.

``room`` turns a window into a budget: the window less room for the answer,
in the ``o200k_base`` tokens a view counts (a Claude window divided by Claude's
tokens per ``o200k_base`` token, ``contextfold.core.claude_tokens``). The
proxy's views get theirs from it; a library user sizes a view with it:
``session.view("v", budget=room("claude-opus-5").budget)``.

A name matches a model called exactly that, or that name then ``-`` and more
(a dated snapshot: ``gpt-4o`` matches ``gpt-4o-2024-08-06``); a name ending in
``*`` matches any model starting with the rest. The longest matching name wins,
so ``o1-mini`` beats ``o1``. A provider's prefix before the last ``/``
(``openai/gpt-4o`` on a router), a cloud's before ``anthropic.`` (Bedrock's
``us.anthropic.claude-opus-4-7-v1:0``) and a ``@version`` (Vertex's) are ignored,
and a Claude version's dots are dashes (``claude-opus-4.7`` is ``claude-opus-4-7``). Windows are in tokens, prompt and
answer together, as each vendor's model page gives them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from contextfold.core.checks import MAX_BUDGET
from contextfold.core.claude_tokens import model_name, vocabulary
from contextfold.core.errors import InvalidInput

OPENAI = "https://platform.openai.com/docs/models (each model's page: context window)"
ANTHROPIC = "https://platform.claude.com/docs/en/about-claude/models/overview (context window)"
ANTHROPIC_1M = (
    "https://platform.claude.com/docs/en/build-with-claude/context-windows "
    "(the models with a 1M-token window, no beta header needed)"
)
GOOGLE = "https://ai.google.dev/gemini-api/docs/models (input token limit)"


ANSWER_RESERVE = 16_384
"""Tokens left for the answer when a request sets no limit (OpenAI's 128k models' longest)."""


class Window(NamedTuple):
    tokens: int
    source: str


class Room(NamedTuple):
    """What a prompt may take in a model's window, in ``o200k_base`` tokens, and why."""

    budget: int
    window: int
    reserve: int
    source: str
    """Where the window's number was read (a vendor's page, a config file, a flag)."""
    given: bool
    """Found among the entries given (a config file, a flag), not the known table."""
    factor: float | None
    """The model's tokens per ``o200k_base`` token (Claude), else None."""
    counted: str | None
    """Where ``factor`` came from: ``estimate`` or ``count_tokens`` (measured)."""


# Read 2026-11 from the vendors' pages. A model's snapshots and aliases match its
# name (``gpt-5.4-2026-03-05``); a family whose every model has one window is a
# ``*`` name (``claude-opus-5*``). Claude's 1M windows need no beta header; the one
# header that raised a window (``context-1m-2025-08-07``, Sonnet 4 and 4.5) stopped
# doing so on 2026-04-30, so a request's ``anthropic-beta`` never changes a window.
KNOWN: Mapping[str, Window] = {
    "gpt-3.5-turbo": Window(16_385, OPENAI),
    "gpt-4": Window(8_192, OPENAI),
    "gpt-4-32k": Window(32_768, OPENAI),
    "gpt-4-turbo": Window(128_000, OPENAI),
    "gpt-4o": Window(128_000, OPENAI),
    "gpt-4o-mini": Window(128_000, OPENAI),
    "chatgpt-4o-latest": Window(128_000, OPENAI),
    "gpt-4.1": Window(1_047_576, OPENAI),
    "gpt-4.1-mini": Window(1_047_576, OPENAI),
    "gpt-4.1-nano": Window(1_047_576, OPENAI),
    "gpt-4.5-preview": Window(128_000, OPENAI),
    "o1": Window(200_000, OPENAI),
    "o1-mini": Window(128_000, OPENAI),
    "o1-preview": Window(128_000, OPENAI),
    "o1-pro": Window(200_000, OPENAI),
    "o3": Window(200_000, OPENAI),
    "o3-mini": Window(200_000, OPENAI),
    "o3-pro": Window(200_000, OPENAI),
    "o3-deep-research": Window(200_000, OPENAI),
    "o4-mini": Window(200_000, OPENAI),
    "o4-mini-deep-research": Window(200_000, OPENAI),
    "codex-mini-latest": Window(200_000, OPENAI),
    "gpt-5": Window(400_000, OPENAI),
    "gpt-5-mini": Window(400_000, OPENAI),
    "gpt-5-nano": Window(400_000, OPENAI),
    "gpt-5-pro": Window(400_000, OPENAI),
    "gpt-5-codex": Window(400_000, OPENAI),
    "gpt-5-chat-latest": Window(128_000, OPENAI),
    "gpt-5.1": Window(400_000, OPENAI),
    "gpt-5.1-codex": Window(400_000, OPENAI),
    "gpt-5.1-codex-mini": Window(400_000, OPENAI),
    "gpt-5.1-codex-max": Window(400_000, OPENAI),
    "gpt-5.1-chat-latest": Window(128_000, OPENAI),
    "gpt-5.2": Window(400_000, OPENAI),
    "gpt-5.2-pro": Window(400_000, OPENAI),
    "gpt-5.2-codex": Window(400_000, OPENAI),
    "gpt-5.2-chat-latest": Window(128_000, OPENAI),
    "gpt-5.3-codex": Window(400_000, OPENAI),
    "gpt-5.3-codex-spark": Window(128_000, OPENAI),
    "gpt-5.4": Window(1_050_000, OPENAI),
    "gpt-5.4-pro": Window(1_050_000, OPENAI),
    "gpt-5.4-mini": Window(400_000, OPENAI),
    "gpt-5.4-nano": Window(400_000, OPENAI),
    "gpt-5.5": Window(1_050_000, OPENAI),
    "gpt-5.5-pro": Window(1_050_000, OPENAI),
    "claude-*": Window(200_000, ANTHROPIC),
    "claude-2.0": Window(100_000, ANTHROPIC),
    "claude-instant-1.2": Window(100_000, ANTHROPIC),
    "claude-opus-4-6": Window(1_000_000, ANTHROPIC_1M),
    "claude-opus-4-7": Window(1_000_000, ANTHROPIC_1M),
    "claude-opus-4-8": Window(1_000_000, ANTHROPIC_1M),
    "claude-sonnet-4-6": Window(1_000_000, ANTHROPIC_1M),
    "claude-opus-5*": Window(1_000_000, ANTHROPIC_1M),
    "claude-sonnet-5*": Window(1_000_000, ANTHROPIC_1M),
    "claude-haiku-5*": Window(1_000_000, ANTHROPIC_1M),
    "claude-fable-*": Window(1_000_000, ANTHROPIC_1M),
    "claude-mythos-*": Window(1_000_000, ANTHROPIC_1M),
    "gemini-1.5-pro": Window(2_097_152, GOOGLE),
    "gemini-1.5-flash": Window(1_048_576, GOOGLE),
    "gemini-2.0-flash": Window(1_048_576, GOOGLE),
    "gemini-2.5-pro": Window(1_048_576, GOOGLE),
    "gemini-2.5-flash": Window(1_048_576, GOOGLE),
    "gemini-2.5-flash-lite": Window(1_048_576, GOOGLE),
    "gemini-3-pro": Window(1_048_576, GOOGLE),
    "gemini-3-flash": Window(1_048_576, GOOGLE),
    "gemini-3.1-pro": Window(1_048_576, GOOGLE),
}


def matches(name: str, model: str) -> bool:
    if name.endswith("*"):
        return model.startswith(name[:-1])
    return model == name or model.startswith(name + "-")


def find_window(model: str, table: Mapping[str, Window] = KNOWN) -> tuple[str, Window] | None:
    """The entry of ``table`` for ``model`` (longest matching name), or None."""
    bare = model_name(model)
    found = [(name, w) for name, w in table.items() if matches(model_name(name), bare)]
    if not found:
        return None
    return max(found, key=lambda entry: len(entry[0].rstrip("*")))


def check_windows(table: Mapping[str, Any], where: str) -> dict[str, Window]:
    """A ``[model_windows]`` table (``name = tokens``) as entries sourced to ``where``."""
    entries: dict[str, Window] = {}
    for name, tokens in table.items():
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 < tokens <= MAX_BUDGET:
            raise InvalidInput(
                f"{where} {name}: a window is a positive number of tokens, not {tokens!r}",
                field=name,
            )
        entries[name] = Window(tokens, where)
    return entries


def flag_windows(specs: Iterable[str], where: str = "serve --model-window") -> dict[str, Window]:
    """``NAME=TOKENS`` flags (``claude-opus-5=500000``) as entries sourced to ``where``."""
    table: dict[str, Any] = {}
    for spec in specs:
        name, sep, tokens = spec.partition("=")
        if not sep or not name.strip() or not tokens.strip().isdigit():
            raise InvalidInput(
                f"{where} takes NAME=TOKENS (gpt-4o=128000), not {spec!r}", field="model_window"
            )
        table[name.strip()] = int(tokens.strip())
    try:
        return check_windows(table, where)
    except InvalidInput as exc:
        raise InvalidInput(exc.reason, field="model_window") from None


def room(
    model: str,
    *,
    answer: int | None = None,
    windows: Mapping[str, Window] | None = None,
    measured: float | None = None,
    answer_field: str = "answer",
) -> Room | None:
    """The budget of a prompt for ``model``: its window (``windows`` first, then the known
    ones) less ``answer`` (else ``ANSWER_RESERVE``, at most a quarter of the window); a
    Claude model's divided by its vocabulary's factor, or by ``measured`` (a factor from
    its ``count_tokens``) where that is higher. None for a model in neither table; an
    ``answer`` that fills the window is an ``InvalidInput`` naming ``answer_field``."""
    found = None if windows is None else find_window(model, windows)
    given = found is not None
    if found is None:
        found = find_window(model, KNOWN)
    if found is None:
        return None
    window = found[1]
    reserve = answer if answer is not None else min(ANSWER_RESERVE, window.tokens // 4)
    if reserve >= window.tokens:
        raise InvalidInput(
            f"{answer_field} {reserve} leaves no room for a prompt in the {window.tokens}-token "
            f"window of {model!r}",
            field=answer_field,
        )
    budget = window.tokens - reserve
    vocab = vocabulary(model)
    if vocab is None:
        return Room(budget, window.tokens, reserve, window.source, given, None, None)
    factor, counted = vocab.factor, "estimate"
    if measured is not None and measured > factor:
        factor, counted = measured, "count_tokens"
    scaled = max(1, math.floor(budget / factor))
    return Room(scaled, window.tokens, reserve, window.source, given, factor, counted)
