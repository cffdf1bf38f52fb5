"""Shared by the replay benchmarks: the shared agent runs, replayed one message a turn.

Each run (tau-bench and OpenHands) is appended one message at a time to a view
compacting inline after each append, and the view's prompt is rendered after
each: what an agent would send if it called its model then. The budget is the
system prompt, which no preset may fold, plus a third of the conversation
beside it (a third of the whole run would not hold tau-bench's 1,250-token
policy in short runs); where the largest user message needs more, the budget
is raised to it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from _common import conversations

from contextfold import CompactionReport, Memory, TokenCounter


def agent_runs(quick: bool) -> list[dict[str, Any]]:
    """The shared agent runs: tau-bench (20 when ``quick``, else 100) and OpenHands."""
    rows = list(conversations("taubench_airline_dev", 20 if quick else 100))
    return rows + list(conversations("openhands_example"))


def budget_of(messages: list[dict[str, Any]], counter: TokenCounter) -> tuple[int, bool]:
    """The system prompt and a third of the rest, or what the largest user message needs;
    and whether it had to be raised so."""
    system = sum(counter.message(m) for m in messages if m["role"] == "system")
    user = max((counter.message(m) for m in messages if m["role"] == "user"), default=0)
    rest = counter.messages(messages) - system
    third = system + rest // 3
    need = system + user + 256
    return max(third, need), third < need


@dataclass(frozen=True)
class Turn:
    """One replayed turn: the prompt after the append, and what compaction did before it."""

    prompt: list[dict[str, Any]]
    compacted: CompactionReport


def replay(
    messages: list[dict[str, Any]], preset: str, budget: int | None, **view: Any
) -> Iterator[Turn]:
    """The turns of one run through a fresh view (``view``: more of its settings)."""
    session = Memory().session("bench")
    folded = session.view("v", preset=preset, budget=budget, **view)
    for message in messages:
        session.append(message)
        report = folded.compact()
        yield Turn(folded.render(), report)
