"""Hypothesis strategies for random valid conversations in OpenAI chat format.

A conversation is a system prompt, then turns: a user message and the agent's
steps after it, each step either plain assistant text or a tool unit (an
assistant message with one to three parallel tool calls, then one result for
each, in any order). Call ids come from a small pool, so later units reuse the
ids of earlier ones, as real agent logs do. Contents run from empty to
thousands of tokens, in ASCII and in other scripts; names and ``meta`` are
optional. Every message is in the normalised form ``validate_messages``
returns, so the log must hand back exactly what was appended.

``budgets`` draws a budget from below what must always be rendered (the
system prompt and the latest user message) to above the whole conversation.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

Message = dict[str, Any]

WORDS = (
    "the loader reads src/io/reader.py and fails on line 42",
    "ValueError: invalid literal for int() with base 10: 'x'",
    "deploy to https://ci.example.com/run/981 after the 3 tests pass",
    "user_id 281 booked flight HAT170 on 2024-05-16",
    "we must never touch the production database",
    "refactor the cache so that it expires entries after 30 s",
    "ok",
    "Grüße aus München: naïve café, Ωmega, 東京 の 天気, मौसम, 🚀 launch",
    "def handler(event):\n    return {'status': 200}\n",
    "",
)
TOOL_NAMES = ("read_file", "run_tests", "grep", "search_flights", "bash")
NAMES = ("Planner", "CodeInterpreter", "agent_2", "user-a")
CALL_IDS = tuple(f"call_{i}" for i in range(6))  # a small pool: ids are reused

_text_piece = st.one_of(
    st.sampled_from(WORDS),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=12),
)


@st.composite
def texts(draw: st.DrawFn, *, min_size: int = 0) -> str:
    """A content string: empty, a phrase, or a long run of phrases (up to ~700 tokens)."""
    pieces = draw(st.lists(_text_piece, min_size=min_size, max_size=4))
    text = " ".join(pieces)
    if draw(st.integers(0, 11)) == 0:  # now and then a long tool output or paste
        text = (text + " " + draw(st.sampled_from(WORDS[:6]))) * draw(st.integers(10, 40))
    return text


@st.composite
def contents(draw: st.DrawFn, *, role: str) -> str | list[dict[str, Any]]:
    """A string, or (sometimes) a list of parts; only user messages carry images."""
    if draw(st.integers(0, 7)) != 0:
        return draw(texts(min_size=1 if role == "user" else 0))
    parts: list[dict[str, Any]] = [
        {"type": "text", "text": t} for t in draw(st.lists(texts(), min_size=1, max_size=3))
    ]
    if role == "user" and draw(st.booleans()):
        parts.append({"type": "image_url", "image_url": {"url": "https://example.com/a.png"}})
    return parts


@st.composite
def extras(draw: st.DrawFn, message: Message, *, named: bool = True) -> Message:
    """Add an optional ``name`` and ``meta`` to a message."""
    if named and draw(st.integers(0, 4)) == 0:
        message["name"] = draw(st.sampled_from(NAMES))
    if draw(st.integers(0, 5)) == 0:
        message["meta"] = {"source": draw(st.sampled_from(("web", "cli"))), "n": 1}
    return message


@st.composite
def tool_unit(draw: st.DrawFn) -> list[Message]:
    """An assistant message with parallel calls, then a result for each call."""
    ids = draw(st.lists(st.sampled_from(CALL_IDS), min_size=1, max_size=3, unique=True))
    calls = [
        {
            "id": call_id,
            "type": "function",
            "function": {
                "name": draw(st.sampled_from(TOOL_NAMES)),
                "arguments": draw(st.sampled_from(('{"path": "src/io/reader.py"}', "{}", ""))),
            },
        }
        for call_id in ids
    ]
    text = draw(st.one_of(st.none(), texts()))
    call: Message = draw(
        extras({"role": "assistant", "content": text, "tool_calls": calls}, named=True)
    )
    answered = draw(st.permutations(ids))
    results = [
        draw(
            extras(
                {"role": "tool", "tool_call_id": call_id, "content": draw(contents(role="tool"))},
                named=False,
            )
        )
        for call_id in answered
    ]
    return [call, *results]


@st.composite
def turn(draw: st.DrawFn) -> list[Message]:
    """A user message and the agent's steps after it (a round, maybe still open)."""
    messages = [draw(extras({"role": "user", "content": draw(contents(role="user"))}))]
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            messages.extend(draw(tool_unit()))
        else:
            text = draw(contents(role="assistant"))
            messages.append(draw(extras({"role": "assistant", "content": text})))
    return messages


@dataclass(frozen=True)
class Conversation:
    """A system prompt and what follows it, and where the appends are split."""

    system: str
    messages: list[Message]
    splits: tuple[int, ...]  # batch boundaries, ascending, inside (0, len(messages))

    def __repr__(self) -> str:
        """Short enough to read in a failure: long texts are cut to their opening."""
        return f"Conversation(system={_short(self.system)}, messages={_short(self.messages)}, splits={self.splits})"

    def batches(self) -> list[list[Message]]:
        edges = [0, *self.splits, len(self.messages)]
        return [self.messages[a:b] for a, b in itertools.pairwise(edges)]

    def latest_user(self) -> Message:
        return next(m for m in reversed(self.messages) if m["role"] == "user")


def _short(value: Any) -> str:
    if isinstance(value, str):
        return repr(value) if len(value) <= 80 else f"{value[:60]!r}...({len(value)} chars)"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_short(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_short(v) for v in value) + "]"
    return repr(value)


@st.composite
def conversations(draw: st.DrawFn, *, max_turns: int = 6) -> Conversation:
    """A valid conversation, appended in one to three batches."""
    system = draw(texts(min_size=1)) or "You are a careful coding agent."
    messages: list[Message] = []
    for _ in range(draw(st.integers(1, max_turns))):
        messages.extend(draw(turn()))
    cuts = draw(st.lists(st.integers(1, max(len(messages) - 1, 1)), max_size=2, unique=True))
    splits = tuple(sorted(c for c in cuts if 0 < c < len(messages)))
    return Conversation(system, messages, splits)


def budgets(floor: int, whole: int) -> st.SearchStrategy[int]:
    """From below ``floor`` (what must always be rendered) to above ``whole`` (everything)."""
    top = max(whole, floor) + 200
    return st.one_of(
        st.integers(max(floor // 2, 1), top),
        st.integers(max(floor - 3, 1), floor + 3),  # the edge, where off-by-one errors live
        st.integers(floor, floor + max((whole - floor) // 3, 1)),  # tight: folds must work
    )
