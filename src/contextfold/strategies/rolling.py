"""Rolling compactor (seed 000, TaskWeaver's compaction redesign).

One summary fold per view, always starting at round 1. Once more than
``threshold`` rounds come after it, everything but the last ``retain_recent``
rounds is folded again: the new fold is made from the previous fold plus the
rounds that became eligible, covers it whole and supersedes it, so the view
holds a single ``CompactedMessage(start_index=1, end_index=N)`` at any time.

The model reads what the seed's ``_do_compaction`` builds: ``[Previous Summary
(Rounds 1-K)]:`` and its text, then ``Round i: <user query>`` with each post
under it, each cut to ``post_chars`` characters (the seed's 200). Only closed
rounds are folded, never the round in progress, and rounds never split a tool
unit. The fold's data keeps ``start_index``, ``end_index`` and ``summary`` so
TaskWeaver's ``CompactedMessage`` can be rebuilt from it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from contextfold.core.entries import Entry
from contextfold.core.errors import InvalidInput
from contextfold.core.folds import Fold
from contextfold.core.messages import Message, text_of
from contextfold.core.tokens import TokenCounter
from contextfold.core.units import round_spans
from contextfold.llm.base import LLM, Completion
from contextfold.strategies.answers import prose_problem
from contextfold.strategies.base import Job, ViewState, job_for, one_message_fold
from contextfold.strategies.checked import summarize_checked
from contextfold.strategies.templates import fill, load_template
from contextfold.strategies.transcript import material, message_block, transcript
from contextfold.strategies.triggers import Trigger, UnfoldedRounds

TEMPLATES = {"planner": "rolling", "code": "rolling_code"}
# The headers the model reads ("[Previous Summary (Rounds 1-K)]:") and the fold adds.
_COPIED_HEADER = re.compile(
    r"\A\s*\[(?:Conversation History Summary|Previous Summary)[^\]\n]*\]:?[ \t]*\n?"
)


@dataclass
class RollingCompactor:
    """Keep one rolling summary of rounds ``1..N``; the newest rounds stay verbatim.

    The fold renders as a system message, as the seed's
    ``CompactedMessage.to_system_message`` does: it always starts at round 1,
    so it sits right after the system prompt, where every provider takes system
    text. ``kind`` picks the seed's planner or code-interpreter prompt;
    ``prompt`` (a path or the template text, with a ``{content}`` field)
    overrides it. ``trigger`` replaces "more than ``threshold`` rounds after
    the fold".
    """

    threshold: int = 10
    retain_recent: int = 3
    kind: Literal["planner", "code"] = "planner"
    prompt: str | Path | None = None
    max_tokens: int = 1024
    post_chars: int | None = 200
    attempts: int = 3
    trigger: Trigger | None = None
    name: str = "rolling"

    def __post_init__(self) -> None:
        if self.kind not in TEMPLATES:
            raise InvalidInput(f"kind must be planner or code, not {self.kind!r}", field="kind")

    def plan(self, state: ViewState) -> Job | None:
        trigger = self.trigger if self.trigger is not None else UnfoldedRounds(self.threshold)
        if not trigger(state):
            return None
        unfolded = state.unfolded_rounds
        eligible = []
        for r in unfolded[: len(unfolded) - max(self.retain_recent, 0)]:
            if not r.closed:
                break
            eligible.append(r)
        if not eligible:
            return None
        return job_for(self.name, state, 0, eligible[-1].last)

    def run(self, job: Job, llm: LLM, counter: TokenCounter) -> Sequence[Fold]:
        previous = _previous(job.entries)
        done = rounds_covered(previous.fold) if previous and previous.fold else 0
        content, end = self._content(job.entries, previous, done)
        template = load_template(TEMPLATES[self.kind], self.prompt)
        messages: list[Message] = [{"role": "user", "content": fill(template, content=content)}]
        raw = [e for e in job.entries if e.fold is None or e.fold.kind == "masked"]
        checked = summarize_checked(
            llm,
            messages,
            source=transcript(raw),
            max_tokens=self.max_tokens,
            attempts=self.attempts,
            accept=_accept,
            tokens_before=job.tokens_before,
            counter=counter,
        )
        summary = without_header(checked.text)
        text = f"[Conversation History Summary (Rounds 1-{end})]\n{summary}"
        message: Message = {"role": "system", "content": text}
        return [
            one_message_fold(
                job,
                self.name,
                message,
                counter,
                kind="summary",
                data={
                    "start_index": 1,
                    "end_index": end,
                    "summary": summary,
                    "rounds": [1, end],
                    "previous_end_index": done,
                    "pinned": list(checked.pinned),
                    "attempts": checked.attempts,
                },
                usage=checked.usage.to_dict(),
            )
        ]

    def _content(
        self, entries: Sequence[Entry], previous: Entry | None, done: int
    ) -> tuple[str, int]:
        """The model's input as the seed builds it, and the last round number it covers."""
        parts: list[str] = []
        if previous is not None and previous.fold is not None:
            parts.append(
                f"[Previous Summary (Rounds 1-{done})]:\n{previous_summary(previous.fold)}"
            )
        names: dict[str, str] = {}
        number = done
        for r in round_spans(entries):
            span = [e for e in entries[r.first : r.last + 1] if e is not previous]
            if r.has_user:
                number += 1
                parts.append(f"Round {number}: {text_of(span[0].messages[0])}")
                span = span[1:]
            for entry in span:
                parts.extend(self._post(entry, names))
        return material("\n\n".join(parts)), number

    def _post(self, entry: Entry, names: dict[str, str]) -> list[str]:
        if entry.fold is not None:
            return [f"  {self._clip(entry.fold.text)}"]
        return [f"  {self._clip(message_block(m, names))}" for m in entry.messages]

    def _clip(self, text: str) -> str:
        if self.post_chars is None or len(text) <= self.post_chars:
            return text
        return text[: self.post_chars] + "…"


def _accept(completion: Completion) -> str | None:
    """What the rolling fold needs: prose once a copied header is taken off (the fold adds its
    own), so an answer opening with one is used, not asked for again at a whole prompt's cost."""
    rest = without_header(completion.text)
    if not rest:
        return "the answer is only a summary header"
    return prose_problem(replace(completion, text=rest))


def without_header(text: str) -> str:
    """``text`` without the summary headers it opens with (copied from the prompt)."""
    while (match := _COPIED_HEADER.match(text)) is not None and match.end() > 0:
        text = text[match.end() :]
    return text.strip()


def _previous(entries: Sequence[Entry]) -> Entry | None:
    """The summary fold the range opens with, if any: the one being rolled forward."""
    first = entries[0] if entries else None
    if first is not None and first.fold is not None and first.fold.kind != "masked":
        return first
    return None


def rounds_covered(fold: Fold) -> int:
    """How many rounds a leading summary fold stands for (0 when it does not say)."""
    data: Mapping[str, Any] = fold.data
    end = data.get("end_index")
    if isinstance(end, int):
        return end
    span = data.get("rounds")
    if isinstance(span, list) and len(span) == 2 and all(isinstance(n, int) for n in span):
        return int(span[1])
    return 0


def previous_summary(fold: Fold) -> str:
    """A rolling fold's summary, or any other fold's text."""
    summary = fold.data.get("summary")
    return summary if isinstance(summary, str) else fold.text
