"""The last resort before render's cut: fold what would be cut, so nothing goes without a trace.

When a view's own strategies leave it above its high-water mark (seed
presets fold on rounds and thresholds, not on the view's budget), render would
drop whole units behind a bare "N messages left out" marker. ``Rescue`` folds
the oldest units instead, down to the low-water mark, into a TL;DR where they
were, made by the view's model (the engine falls back to the extractive
stand-in if that fails). The latest user message and the newest unit stay
verbatim; the fold is split around the first when it lies inside the range.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from contextfold.core.folds import Fold
from contextfold.core.messages import Message
from contextfold.core.tokens import TokenCounter
from contextfold.llm.base import LLM
from contextfold.strategies.base import Job, ViewState, job_for, one_message_fold
from contextfold.strategies.checked import summarize_checked
from contextfold.strategies.templates import fill, load_template
from contextfold.strategies.transcript import material, transcript

HEADER = (
    "[Folded to fit the token budget: a summary of seq {start}-{end}; the log keeps them whole]"
)
MIN_FOLD_TOKENS = 64
MIN_SAVING = 2
"""A rescue runs only to fold at least this many times what its fold will cost."""


@dataclass
class Rescue:
    """Fold the oldest units of a view above its high-water mark down to its low-water mark.

    ``share`` is the part of the budget one rescue fold may take.
    """

    share: float = 0.1
    prompt: str | Path | None = None
    name: str = "rescue"

    def plan(self, state: ViewState) -> Job | None:
        if state.budget is None or state.tokens <= state.budget * state.high_water:
            return None
        fold_tokens = max(int(state.budget * self.share), MIN_FOLD_TOKENS)
        target = state.low_mark(state.budget)
        units = state.units[:-1]  # the newest unit may still be waiting for results
        user = next(
            (i for i in range(len(state.entries) - 1, -1, -1) if state.entries[i].role == "user"),
            None,
        )
        rest = state.tokens
        last = None
        for first, end in units:
            if rest + fold_tokens <= target:
                break
            rest -= sum(e.tokens for e in state.entries[first : end + 1])
            last = end
        if last is None:
            return None
        spans = [(0, last)]
        if user is not None and user <= last:
            spans = [s for s in ((0, user - 1), (user + 1, last)) if s[0] <= s[1]]
        folded = sum(e.tokens for i, j in spans for e in state.entries[i : j + 1])
        if folded < MIN_SAVING * fold_tokens:
            return None  # what is left is mostly folds already: the cut and clip take the rest

        # Spans are relative to the job's first entry, which is entry 0.
        return job_for(self.name, state, 0, last, spans=spans, fold_tokens=fold_tokens)

    def run(self, job: Job, llm: LLM, counter: TokenCounter) -> Sequence[Fold]:
        folds = []
        spans: list[tuple[int, int]] = job.params["spans"]
        room = max(job.params["fold_tokens"] // len(spans), MIN_FOLD_TOKENS)
        for i, j in spans:
            entries = job.entries[i : j + 1]
            history = transcript(entries)
            checked = summarize_checked(
                llm,
                [
                    {
                        "role": "user",
                        "content": fill(
                            load_template("rescue", self.prompt),
                            history=material(history),
                            words=str(room * 3 // 4),
                        ),
                    }
                ],
                source=history,
                max_tokens=room,
                pin_chars=room,
            )
            start, end = entries[0].start, entries[-1].end
            message: Message = {
                "role": "user",
                "content": f"{HEADER.format(start=start, end=end)}\n{checked.text}",
            }
            span_job = Job(job.strategy, job.view, job.version, start, end, entries, job.params)
            folds.append(
                one_message_fold(
                    span_job,
                    self.name,
                    message,
                    counter,
                    kind="summary",
                    data={"pinned": list(checked.pinned), "attempts": checked.attempts},
                    usage=checked.usage.to_dict(),
                )
            )
        return folds
