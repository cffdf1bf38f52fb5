"""Goal-batch compaction (seed 001, ADR-0041): old complete turns become one ``[GOAL BATCH]``.

Tool-call and threshold summarization leave a floor they cannot go below:
every user message plus every ``[SUMMARIZED]`` fold. This third tier folds
whole goal arcs of old turns into one six-section fold, proactively (on age
and count, not on tokens).

- A **turn** starts at a raw user message and runs to the next one. It is
  **complete** when it holds at least one ``[SUMMARIZED]`` fold of the
  tool-call or threshold strategy and otherwise only plain assistant text (a
  reply without tool calls, such as the turn's final answer, which real turns
  end with). Raw tool units, other folds or other roles leave a turn
  incomplete: it may still be in progress, or hold detail nothing has
  summarized yet.
- A turn is **old** when at least ``min_turns_old_threshold`` rendered messages
  of the view follow its last entry (a fold counts as the messages it renders,
  one for every summary fold). A turn the boundary cuts is not old: turns are
  never split.
- A fold covers a contiguous range of the log, so a batch is a run of
  consecutive old complete turns; an incomplete turn or an earlier
  ``[GOAL BATCH]`` ends a run. The strategy folds the first
  ``max_turns_per_batch`` turns of the oldest run in one model call once
  the run has that many. A run that something ended (an incomplete turn or
  a goal batch after it) cannot grow, and is folded once it has
  ``min_turns_to_compact`` turns. A run that ends only because the next turn
  is not old yet waits for it: turns grow old one at a time, and folding
  each run at its minimum would pay the prompt (as long as three short turns
  are) for every three of them. Earlier goal batches are never compacted
  again (ADR-0041 has no further tier).

Checked compaction pins what the answer dropped from the turns as the model
saw them, less the ``Pinned`` lists of the ``[SUMMARIZED]`` folds: those are
the lower tier's safety net for tool output. The model sees them and keeps what
matters in Key Artifacts; pinning them again would carry every path and
identifier of every old tool output into every goal batch, and the floor this
tier exists to remove would come back as pins.

The model answers JSON with the six sections as strings (``SCHEMA``), so an
empty section is omitted reliably and ``data["sections"]`` keeps them; the
prompt is ADR-0041's, with one paragraph asking for that JSON. The fold is one
``assistant`` message (the agent's recalled experience, like ``[SUMMARIZED]``)
reading ``[GOAL BATCH]`` then ``## Goal Arc`` and the other non-empty
sections. Its data holds ``summarized: true``, ``summary_type: "goal_batch"``,
``turn_count`` and ``tokens_saved``, which the ``committed`` event's fold
carries; ``run`` also logs them to the ``contextfold`` logger.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextfold.core.entries import Entry
from contextfold.core.errors import InvalidInput
from contextfold.core.folds import Fold, labelled
from contextfold.core.messages import Message
from contextfold.core.tokens import TokenCounter
from contextfold.llm.base import LLM, Completion
from contextfold.strategies.base import Job, ViewState, job_for, one_message_fold
from contextfold.strategies.checked import summarize_checked, with_pins, without_pins
from contextfold.strategies.lenient import Least
from contextfold.strategies.templates import fill
from contextfold.strategies.tool_calls import (
    SUMMARIZED,
    episodic_prompt,
    episodic_prompts,
    is_plain_text,
    is_summarized,
)
from contextfold.strategies.transcript import material, message_block
from contextfold.strategies.triggers import Always, Trigger

log = logging.getLogger("contextfold")

GOAL_BATCH = "[GOAL BATCH]"
SECTIONS: tuple[tuple[str, str], ...] = (
    ("goal_arc", "Goal Arc"),
    ("human_direction", "Human Direction"),
    ("what_was_achieved", "What Was Achieved"),
    ("dead_ends", "Dead Ends"),
    ("lasting_constraints", "Lasting Constraints"),
    ("key_artifacts", "Key Artifacts"),
)
SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {key: {"type": "string"} for key, _ in SECTIONS},
    "required": [key for key, _ in SECTIONS],
    "additionalProperties": False,
}

LEAST = Least(
    "goal_arc",
    "Write only the Goal Arc: what the user wanted across these turns, what was done, "
    "and how it ended.",
    {key: "" for key, _ in SECTIONS},
)
"""A goal batch can do with its Goal Arc alone; the other sections are then empty."""


@dataclass(frozen=True)
class Turn:
    """A turn's span over entries (inclusive) and whether it may be compacted."""

    first: int
    last: int
    complete: bool


@dataclass
class GoalBatchCompaction:
    """Fold runs of old complete turns into ``[GOAL BATCH]`` folds, ADR-0041's defaults.

    ``prompt`` and ``system_prompt`` override the templates ``goal_batch`` and
    ``episodic_system`` (a file path or the text itself); ``trigger`` gates
    planning (default: always look, since firing is on age and count).

    ``plain_turns`` (default True) also counts a turn whose replies are only
    plain assistant text as complete. ADR-0040's threshold step summarizes
    every assistant block, but ours leaves blocks under its ``min_tokens``
    raw (summarizing a one-line reply gains nothing); without this, short
    chat turns would never be compacted and would form the very floor ADR-0041
    removes. ``False`` keeps the ADR's letter: a ``[SUMMARIZED]`` block is needed.
    """

    min_turns_old_threshold: int = 20
    min_turns_to_compact: int = 3
    max_turns_per_batch: int = 6
    max_tokens: int = 1200
    plain_turns: bool = True
    prompt: str | Path | None = None
    system_prompt: str | Path | None = None
    trigger: Trigger = field(default_factory=Always)
    name: str = "goal_batch"

    def __post_init__(self) -> None:
        if self.min_turns_to_compact < 1:
            raise InvalidInput(
                "min_turns_to_compact must be at least 1", field="min_turns_to_compact"
            )
        if self.max_turns_per_batch < self.min_turns_to_compact:
            raise InvalidInput(
                "max_turns_per_batch must be at least min_turns_to_compact",
                field="max_turns_per_batch",
            )
        self._prompts()

    def plan(self, state: ViewState) -> Job | None:
        if not self.trigger(state):
            return None
        entries = state.entries
        boundary = old_boundary(entries, self.min_turns_old_threshold)
        run: list[Turn] = []
        ended = False
        for turn in turns(entries, plain_turns=self.plain_turns):
            if turn.last >= boundary:
                break
            if turn.complete and run and turn.first == run[-1].last + 1:
                run.append(turn)
            elif len(run) >= self.min_turns_to_compact:
                ended = True
                break
            else:
                run = [turn] if turn.complete else []
        # A run the next turn to grow old may still extend waits until it fills a batch.
        if len(run) < (self.min_turns_to_compact if ended else self.max_turns_per_batch):
            return None
        batch = run[: self.max_turns_per_batch]
        return job_for(
            self.name,
            state,
            batch[0].first,
            batch[-1].last,
            turns=[(t.first - batch[0].first, t.last - batch[0].first) for t in batch],
        )

    def run(self, job: Job, llm: LLM, counter: TokenCounter) -> Sequence[Fold]:
        system, template = self._prompts()
        spans: list[tuple[int, int]] = job.params["turns"]
        history = turns_text(job.entries, spans)
        checked = summarize_checked(
            llm,
            episodic_prompt(system, fill(template, turns=material(history))),
            source=turns_text(job.entries, spans, pins=False),
            max_tokens=self.max_tokens,
            schema=SCHEMA,
            accept=_accept,
            tokens_before=job.tokens_before,
            counter=counter,
            least=LEAST,
        )
        sections = sections_of(checked.data) or {}
        body = "\n\n".join(f"## {title}\n{text}" for title, text in sections.items())
        text = with_pins(f"{GOAL_BATCH}\n{body}", checked.pinned)
        message: Message = {"role": "assistant", "content": text}
        tokens_after = counter.message(labelled(message, job.start, job.end))
        saved = job.tokens_before - tokens_after
        log.info(
            "goal batch %s: %d turns compacted (seq %d..%d), %d -> %d tokens, %d saved",
            job.view,
            len(spans),
            job.start,
            job.end,
            job.tokens_before,
            tokens_after,
            saved,
        )
        return [
            one_message_fold(
                job,
                self.name,
                message,
                counter,
                kind="goal_batch",
                data={
                    "summarized": True,
                    "summary_type": "goal_batch",
                    "turn_count": len(spans),
                    "tokens_saved": saved,
                    "user_seqs": [job.entries[first].start for first, _ in spans],
                    "sections": sections,
                    "pinned": list(checked.pinned),
                },
                usage=checked.usage.to_dict(),
            )
        ]

    def _prompts(self) -> tuple[str, str]:
        return episodic_prompts("goal_batch", self.prompt, self.system_prompt, "turns")


def is_goal_batch(entry: Entry) -> bool:
    return entry.fold is not None and entry.fold.data.get("summary_type") == "goal_batch"


def turns(entries: Sequence[Entry], *, plain_turns: bool = False) -> list[Turn]:
    """Every turn of the view, oldest first; entries before the first user message
    and earlier goal batches belong to none.

    A turn is complete when its replies are ``[SUMMARIZED]`` folds and plain
    assistant text, with at least one fold, or (``plain_turns``) at least one reply.
    """
    out: list[Turn] = []
    first: int | None = None

    def close(last: int) -> None:
        if first is not None:
            body = entries[first + 1 : last + 1]
            needed = bool(body) if plain_turns else any(is_summarized(e) for e in body)
            complete = needed and all(is_summarized(e) or is_plain_text([e]) for e in body)
            out.append(Turn(first, last, complete))

    for i, entry in enumerate(entries):
        if entry.role == "user" or is_goal_batch(entry):
            close(i - 1)
            first = i if entry.role == "user" else None
    close(len(entries) - 1)
    return out


def old_boundary(entries: Sequence[Entry], threshold: int) -> int:
    """How many leading entries are old: at least ``threshold`` rendered messages follow each."""
    after = 0
    for i in range(len(entries) - 1, -1, -1):
        if after >= threshold:
            return i + 1
        after += len(entries[i].messages)
    return 0


def turns_text(
    entries: Sequence[Entry], spans: Sequence[tuple[int, int]], *, pins: bool = True
) -> str:
    """The turns as ADR-0041 shows them: ``--- Turn n ---``, ``[user]:``, ``[SUMMARIZED]:``.

    ``pins=False`` leaves out the summaries' pinned lists: the source that the
    goal batch's own pins are checked against (see the module docstring).
    """
    names: dict[str, str] = {}
    blocks: list[str] = []
    for n, (first, last) in enumerate(spans, start=1):
        lines = [f"--- Turn {n} ---"]
        for entry in entries[first : last + 1]:
            if entry.fold is not None:
                summary = entry.fold.text.removeprefix(SUMMARIZED).strip()
                if not pins:
                    summary = without_pins(summary)
                lines.append(f"{SUMMARIZED}: {summary}")
            else:
                lines.append(message_block(entry.messages[0], names))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def sections_of(data: Any) -> dict[str, str] | None:
    """The non-empty sections by title, in ADR order; None when a section is not text."""
    if not isinstance(data, Mapping):
        return None
    out: dict[str, str] = {}
    for key, title in SECTIONS:
        value = data.get(key) or ""
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = "\n".join(f"- {v}" for v in value if v.strip())
        if not isinstance(value, str):
            return None
        text = value.strip().removeprefix(f"## {title}").strip()
        if text:
            out[title] = text
    return out


def _accept(completion: Completion) -> str | None:
    """What a goal batch needs: its six sections as text (the schema requires each), a goal arc."""
    sections = sections_of(completion.data)
    if sections is None:
        return "a [GOAL BATCH] section is not text"
    if "Goal Arc" not in sections:
        return "the [GOAL BATCH] Goal Arc section is empty"
    return None
