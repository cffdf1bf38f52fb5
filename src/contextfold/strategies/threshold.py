"""Threshold summarization (seed 001, ADR-0040): old assistant blocks become ``[SUMMARIZED]``.

An assistant block is a maximal run of raw messages between user messages
that holds no user message: the agent's reasoning, its tool units whole, and
its answers. Folds end a block too, so user messages and existing
``[SUMMARIZED]`` folds are never summarized again (ADR-0041's "implicit
floor": what is left once this strategy has nothing to act on).

When the view passes its threshold (``threshold_tokens`` when given, else
``threshold`` times the budget; never without either), the oldest blocks
outside the newest ``keep_recent`` are folded, oldest first, as many as it
takes to bring the view down to the low-water mark of the threshold
(``ViewState.low_mark``), in one model call that reads at most the
threshold's tokens. Each block still becomes its own fold (user messages stay
between them), and the answer is one JSON object with a summary a block
(``summarize_groups``). When the blocks there are hold neither that much nor
the gap between the threshold and its low mark, the next block would still
fit the call, and folding them would not bring a view over ``high_water`` of
its budget back under it, it waits for more: a view
whose floor stays above the threshold would otherwise pay a call for every
block as it ages. Blocks under ``min_tokens`` stay as they are: a turn's
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
from contextfold.strategies.templates import fill
from contextfold.strategies.tool_calls import (
    episodic_prompts,
    group_material,
    relieves,
    summarize_groups,
    user_goal,
)
from contextfold.strategies.transcript import transcript
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
        level = self.level(state)
        if self.trigger is not None:
            fired = self.trigger(state)
        else:
            fired = level is not None and state.tokens > level
        if not fired:
            return None
        blocks = assistant_blocks(state.entries, state.units)
        old = blocks[: max(len(blocks) - max(self.keep_recent, 0), 0)]
        foldable = [
            (i, j, tokens)
            for i, j in old
            if (tokens := sum(e.tokens for e in state.entries[i : j + 1])) >= self.min_tokens
        ]
        if not foldable:
            return None
        batch = foldable[:1]
        if level is not None:
            low = state.low_mark(level)
            need = state.tokens - low
            total, full = foldable[0][2], False
            for block in foldable[1:]:
                full = total + block[2] > level
                if full or total >= need:
                    break
                batch.append(block)
                total += block[2]
            if not (full or total >= min(need, level - low) or relieves(state, total)):
                return None
        first = batch[0][0]
        return job_for(
            self.name,
            state,
            first,
            batch[-1][1],
            groups=[(i - first, j - first, user_goal(state.entries, i)) for i, j, _ in batch],
        )

    def level(self, state: ViewState) -> int | None:
        """The token count it fires above: absolute, relative to the budget, or None (never)."""
        if self.threshold_tokens is not None:
            return self.threshold_tokens
        if state.budget is not None:
            return int(self.threshold * state.budget)
        return None

    def run(self, job: Job, llm: LLM, counter: TokenCounter) -> Sequence[Fold]:
        system, template = self._prompts()
        groups: list[tuple[int, int, str]] = job.params["groups"]
        prompt = fill(
            template,
            groups=len(groups),
            messages=group_material(
                "User Request",
                [(goal, transcript(job.entries[first : last + 1])) for first, last, goal in groups],
            ),
        )
        return summarize_groups(
            job,
            self.name,
            llm,
            counter,
            system=system,
            prompt=prompt,
            groups=[(first, last) for first, last, _ in groups],
            data=[
                {"summary_type": "threshold", "messages": last - first + 1}
                for first, last, _ in groups
            ],
            max_tokens=self.max_tokens,
        )

    def _prompts(self) -> tuple[str, str]:
        return episodic_prompts("threshold", self.prompt, self.system_prompt, "messages", groups=0)


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
