"""Keep-recent: the plain trimming baseline, for comparison.

Once the view is over its budget, drops the oldest whole units until it fits
and leaves one marker in their place: plain trimming, with none of the
engine's hysteresis, because it is the baseline the other presets are
measured against, the way most chat libraries trim. It never drops the latest user message or anything
after it. This is what most chat libraries do; contextfold's presets are
measured against it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from contextfold.core.folds import Fold
from contextfold.core.tokens import TokenCounter
from contextfold.llm.base import LLM
from contextfold.strategies.base import Job, ViewState, job_for, one_message_fold
from contextfold.strategies.triggers import OverBudget, Trigger


@dataclass
class KeepRecent:
    light: ClassVar[bool] = True  # cheap: never worth a trip to another process
    trigger: Trigger = field(default_factory=lambda: OverBudget(1.0))
    name: str = "keep-recent"

    def plan(self, state: ViewState) -> Job | None:
        if state.budget is None or not self.trigger(state):
            return None
        entries = state.entries
        stop = len(state.entries) if state.latest_user is None else state.latest_user
        over = state.tokens - state.budget + MARKER_TOKENS
        cut = -1
        saved = 0
        for i, j in state.units:
            if j >= stop or saved >= over:
                break
            saved += sum(e.tokens for e in entries[i : j + 1])
            cut = j
        already_trimmed = (
            cut == 0 and entries[0].fold is not None and entries[0].fold.kind == "trimmed"
        )
        if cut < 0 or already_trimmed:
            return None
        return job_for(self.name, state, 0, cut)

    def run(self, job: Job, llm: LLM, counter: TokenCounter) -> Sequence[Fold]:
        count = job.end - job.start + 1
        text = f"[{count} earlier messages left out]"
        message = {"role": "system", "content": text}
        return [
            one_message_fold(
                job,
                self.name,
                message,
                counter,
                kind="trimmed",
            )
        ]


MARKER_TOKENS = 16
