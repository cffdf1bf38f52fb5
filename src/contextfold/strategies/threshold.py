"""Threshold summarization (seed 001, ADR-0040): old assistant blocks become ``[SUMMARIZED]``.

An assistant block is a maximal run of raw messages between user messages
that holds no user message: the agent's reasoning, its tool units whole, and
its answers. Folds end a block too, so user messages and existing
``[SUMMARIZED]`` folds are never summarized again (ADR-0041's "implicit
floor": what is left once this strategy has nothing to act on).

When the view passes its threshold (``threshold_tokens`` when given, else
``threshold`` times the budget; never without either), the oldest block
outside the newest ``keep_recent`` is folded, one block a job, and the
pipeline re-plans: blocks are folded oldest first while the view stays above
the threshold. Blocks under ``min_tokens`` stay as they are: a turn's
one-line answer would cost as much summarized, plus a model call (a goal
batch takes such plain text in whole). Each block becomes one first-person
``assistant`` message, ``[SUMMARIZED]`` and the model's sections, with data
``summarized: true`` and ``summary_type: "threshold"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from contextfold.core.entries import Entry
from contextfold.core.folds import Fold
from contextfold.core.tokens import TokenCounter
from contextfold.llm.base import LLM
from contextfold.strategies.base import Job, ViewState, job_for
from contextfold.strategies.checked import summarize_checked
from contextfold.strategies.templates import fill
from contextfold.strategies.tool_calls import (
    episodic_prompt,
    episodic_prompts,
    summarized_fold,
    user_goal,
)
from contextfold.strategies.transcript import material, transcript
from contextfold.strategies.triggers import Trigger


@dataclass
class ThresholdSummarization:
    """Above the threshold, fold old assistant blocks (oldest first) into ``[SUMMARIZED]``.

    ``trigger``, when given, replaces the threshold test. ``prompt`` and
    ``system_prompt`` override the templates ``threshold`` and
    ``episodic_system`` (a file path or the text itself).
    """

    threshold: float = 0.7
    threshold_tokens: int | None = None
    keep_recent: int = 2
    min_tokens: int = 100
    max_tokens: int = 1000
    prompt: str | Path | None = None
    system_prompt: str | Path | None = None
    trigger: Trigger | None = None
    name: str = "threshold"

    def __post_init__(self) -> None:
        self._prompts()

    def plan(self, state: ViewState) -> Job | None:
        if not self.over_threshold(state):
            return None
        blocks = assistant_blocks(state.entries, state.units)
        old = blocks[: max(len(blocks) - max(self.keep_recent, 0), 0)]
        foldable = [
            (i, j)
            for i, j in old
            if sum(e.tokens for e in state.entries[i : j + 1]) >= self.min_tokens
        ]
        if not foldable:
            return None
        first, last = foldable[0]
        return job_for(self.name, state, first, last, goal=user_goal(state.entries, first))

    def over_threshold(self, state: ViewState) -> bool:
        """The trigger when one is set, else tokens above the absolute or relative threshold."""
        if self.trigger is not None:
            return self.trigger(state)
        if self.threshold_tokens is not None:
            return state.tokens > self.threshold_tokens
        return state.budget is not None and state.tokens > self.threshold * state.budget

    def run(self, job: Job, llm: LLM, counter: TokenCounter) -> Sequence[Fold]:
        system, template = self._prompts()
        history = transcript(job.entries)
        prompt = fill(
            template, goal=job.params.get("goal") or "(not in view)", messages=material(history)
        )
        checked = summarize_checked(
            llm,
            episodic_prompt(system, prompt),
            source=history,
            max_tokens=self.max_tokens,
        )
        data = {"summary_type": "threshold", "messages": len(job.entries)}
        return [summarized_fold(job, self.name, checked, data, counter)]

    def _prompts(self) -> tuple[str, str]:
        return episodic_prompts("threshold", self.prompt, self.system_prompt, "messages", goal="")


def assistant_blocks(
    entries: Sequence[Entry], units: Sequence[tuple[int, int]]
) -> list[tuple[int, int]]:
    """Maximal runs of whole units that are all raw and hold no user message (entry indices)."""
    blocks: list[tuple[int, int]] = []
    start: int | None = None
    for i, j in units:
        unit = entries[i : j + 1]
        if all(e.fold is None and e.role != "user" for e in unit):
            if start is None:
                start = i
            continue
        if start is not None:
            blocks.append((start, i - 1))
            start = None
    if start is not None and units:
        blocks.append((start, units[-1][1]))
    return blocks
