"""The last resort before render's cut: fold what would be cut, so nothing goes without a trace.

When a view's own strategies leave it over its budget (seed presets fold on
rounds and thresholds, not on the view's budget), render would drop whole
units behind a bare "N messages left out" marker. ``Rescue`` folds the oldest
units instead, in a deep step (``depth`` of the room is left), into a TL;DR where they
were, made by the view's model (the engine falls back to the extractive
stand-in if that fails). The latest user message and the newest unit stay
verbatim; the fold is split around the first when it lies inside the range.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contextfold.core.entries import Entry
from contextfold.core.folds import Fold, unlabelled
from contextfold.core.messages import Message, text_of
from contextfold.core.tokens import TokenCounter
from contextfold.llm.base import LLM
from contextfold.strategies.answers import prose_problem
from contextfold.strategies.base import Job, ViewState, job_for, one_message_fold
from contextfold.strategies.checked import summarize_checked
from contextfold.strategies.templates import fill, load_template
from contextfold.strategies.transcript import material, transcript

HEADER = (
    "[Folded to fit the token budget: a summary of seq {start}-{end}; the log keeps them whole]"
)
MIN_FOLD_TOKENS = 64
MIN_SAVING = 2
DIGEST_CHARS = 80
"""A rescue runs only to fold at least this many times what its fold will cost."""


@dataclass
class Rescue:
    """Fold the oldest units of a view over its budget, in one deep step.

    ``share`` is the part of the room beside the system prompt one rescue fold
    may take, and ``depth`` the part of that room a rescue leaves: each call
    re-reads the previous rescue summary and the prompt, so it folds in deep,
    rare steps (below the view's low-water mark) to spread that over much new.
    Folds it takes in are read without their pinned lists, which are carried
    over instead (``checked.without_pins``).
    """

    share: float = 0.1
    depth: float = 0.2
    prompt: str | Path | None = None
    name: str = "rescue"

    def plan(self, state: ViewState) -> Job | None:
        if state.budget is None or state.tokens <= state.budget:
            return None  # only what render would cut
        fold_tokens = max(int((state.budget - state.fixed) * self.share), MIN_FOLD_TOKENS)
        target = state.mark(state.budget, min(self.depth, state.low_water))
        units = state.units[:-1]  # the newest unit may still be waiting for results
        user = state.latest_user
        rest = state.tokens
        last = None
        for first, end in units:
            if rest + fold_tokens <= target:
                break
            # The latest user message stays verbatim: it saves nothing.
            rest -= sum(state.entries[i].tokens for i in range(first, end + 1) if i != user)
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
        return [self._fold(job, entries, room, llm, counter) for entries, room in _spans(job)]

    def digest(self, job: Job, counter: TokenCounter) -> Sequence[Fold]:
        """Without any usable summary: each message's opening words, so the trace remains."""
        folds = []
        for entries, room in _spans(job):
            lines = []
            for entry in entries:
                for message in map(unlabelled, entry.messages):
                    first = " ".join(text_of(message).split())[:DIGEST_CHARS]
                    lines.append(f"{message.get('name') or message['role']}: {first}")
            text = "\n".join(lines)[: room * 4]
            folds.append(_as_fold(self.name, job, entries, text, counter, {"digest": True}, None))
        return folds

    def _fold(
        self, job: Job, entries: Sequence[Entry], room: int, llm: LLM, counter: TokenCounter
    ) -> Fold:
        # Earlier folds are read without their pinned lists, which are carried over:
        # what the answer leaves out of them is pinned again from the whole transcript.
        checked = summarize_checked(
            llm,
            [
                {
                    "role": "user",
                    "content": fill(
                        load_template("rescue", self.prompt),
                        history=material(transcript(entries, pins=False)),
                        words=str(room * 3 // 4),
                    ),
                }
            ],
            source=transcript(entries),
            max_tokens=room,
            pin_chars=room,
            accept=prose_problem,
            tokens_before=sum(e.tokens for e in entries),
            counter=counter,
        )
        data = {"pinned": list(checked.pinned), "attempts": checked.attempts}
        return _as_fold(
            self.name, job, entries, checked.text, counter, data, checked.usage.to_dict()
        )


def _spans(job: Job) -> list[tuple[Sequence[Entry], int]]:
    """Each span's entries and the tokens its fold may take."""
    spans: list[tuple[int, int]] = job.params["spans"]
    room = max(job.params["fold_tokens"] // len(spans), MIN_FOLD_TOKENS)
    return [(job.entries[i : j + 1], room) for i, j in spans]


def _as_fold(
    strategy: str,
    job: Job,
    entries: Sequence[Entry],
    text: str,
    counter: TokenCounter,
    data: Mapping[str, Any],
    usage: Mapping[str, Any] | None,
) -> Fold:
    start, end = entries[0].start, entries[-1].end
    message: Message = {"role": "user", "content": f"{HEADER.format(start=start, end=end)}\n{text}"}
    span_job = Job(job.strategy, job.view, job.version, start, end, tuple(entries), job.params)
    return one_message_fold(
        span_job, strategy, message, counter, kind="summary", data=data, usage=usage
    )
