"""The strategy protocol: ``plan`` is cheap and pure, ``run`` does the work.

``plan`` looks at a ``ViewState`` (counts and boundaries) and returns a ``Job`` or
None; it runs on every append. ``run`` turns a job into folds and writes
nothing: the caller commits them at the fold-set version the job was planned at,
so a job overtaken by another commit is refused instead of applied.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Protocol, runtime_checkable

from contextfold.core.entries import Entry
from contextfold.core.folds import Fold, Placement, labelled, range_label
from contextfold.core.log import LoggedMessage
from contextfold.core.messages import Message, text_of
from contextfold.core.tokens import REPLY_PRIMING, TokenCounter
from contextfold.core.units import RoundSpan, round_spans, unit_spans, waits_for_results
from contextfold.llm.base import LLM

HIGH_WATER = 0.9
LOW_WATER = 0.7


@dataclass(frozen=True)
class ViewState:
    """A view as a strategy sees it: system prompt, active folds, live messages.

    Hysteresis is the engine's: a strategy that fires on a level (the budget,
    a token threshold, a count) folds the view down to ``low_water`` of that
    level, so the next cycle comes only after the view has grown back by the
    difference. Budget-driven strategies fire at ``high_water`` of the budget,
    early enough that a background fold lands before the prompt is cut. Both
    marks are shares of the room beside the system prompt (``high_mark``,
    ``low_mark``).
    """

    session_id: str
    view: str
    version: int
    system: tuple[LoggedMessage, ...]
    entries: tuple[Entry, ...]
    facts: Fold | None
    counter: TokenCounter
    budget: int | None = None
    high_water: float = HIGH_WATER
    low_water: float = LOW_WATER
    folding: bool = False

    @cached_property
    def tokens(self) -> int:
        """Prompt tokens if everything were rendered unclipped."""
        facts = self.facts.tokens_after if self.facts else 0
        return (
            REPLY_PRIMING
            + sum(m.tokens for m in self.system)
            + facts
            + sum(e.tokens for e in self.entries)
        )

    @cached_property
    def message_count(self) -> int:
        """Rendered messages, system prompt included."""
        facts = len(self.facts.messages) if self.facts else 0
        return len(self.system) + facts + sum(len(e.messages) for e in self.entries)

    @cached_property
    def characters(self) -> int:
        return sum(len(text_of(m)) for e in self.entries for m in e.messages)

    @cached_property
    def units(self) -> list[tuple[int, int]]:
        return unit_spans(self.entries)

    @cached_property
    def waiting(self) -> int | None:
        """Index of the newest unit's first entry while its call still waits for results
        (a tool running, an approval the user has not given), else None: never folded,
        since a fold over it would leave the results to come without their call."""
        if not self.entries:
            return None
        first, last = self.units[-1]
        raw = [e.messages[0] for e in self.entries[first : last + 1] if e.fold is None]
        return first if len(raw) == last - first + 1 and waits_for_results(raw) else None

    @cached_property
    def rounds(self) -> list[RoundSpan]:
        return round_spans(self.entries)

    @cached_property
    def unfolded_rounds(self) -> list[RoundSpan]:
        """Rounds after the last summary fold whose entries are all raw messages or masks."""
        last_summary = max(
            (
                i
                for i, e in enumerate(self.entries)
                if e.fold is not None and e.fold.kind != "masked"
            ),
            default=-1,
        )
        return [r for r in self.rounds if r.first > last_summary and r.has_user]

    @property
    def over_budget(self) -> bool:
        return self.budget is not None and self.tokens > self.budget

    @cached_property
    def latest_user(self) -> int | None:
        """Index of the latest raw user message among the entries: the request being answered."""
        entries = self.entries
        return next((i for i in range(len(entries) - 1, -1, -1) if entries[i].role == "user"), None)

    @cached_property
    def fixed(self) -> int:
        """Tokens no fold can take away: the system prompt and the reply priming."""
        return REPLY_PRIMING + sum(m.tokens for m in self.system)

    def mark(self, level: int, share: float) -> int:
        """``share`` of the room beside the system prompt under ``level``: the one water-mark
        formula, behind ``high_mark``, ``low_mark`` and any deeper mark a strategy folds to.

        The marks are shares of the room the conversation has beside the system
        prompt, not of the whole level: with a long system prompt, a share of
        the budget could lie below the prompt itself and never be reached.
        """
        if level <= self.fixed:
            return level
        return self.fixed + int((level - self.fixed) * share)

    def high_mark(self, level: int) -> int:
        """Where a cycle fires for ``level``: ``high_water`` of the room beside the system prompt."""
        return self.mark(level, self.high_water)

    def low_mark(self, level: int) -> int:
        """Tokens a cycle that fired at ``level`` folds the view down to (``low_water``)."""
        return self.mark(level, self.low_water)

    @property
    def above_high_water(self) -> bool:
        """Whether budget-driven strategies fire: above the high mark, or, once a cycle
        has committed a fold (``folding``), above the low mark it folds down to."""
        if self.budget is None:
            return False
        mark = self.low_mark(self.budget) if self.folding else self.high_mark(self.budget)
        return self.tokens > mark


@dataclass(frozen=True)
class Job:
    """What a strategy decided to fold: ``entries`` cover seq ``start..end``."""

    strategy: str
    view: str
    version: int
    start: int
    end: int
    entries: tuple[Entry, ...]
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def tokens_before(self) -> int:
        return sum(e.tokens for e in self.entries)


@runtime_checkable
class Strategy(Protocol):
    """One way of folding. ``llm`` is always a model: the view's, or the offline stand-in."""

    name: str

    def plan(self, state: ViewState) -> Job | None: ...

    def run(self, job: Job, llm: LLM, counter: TokenCounter) -> Sequence[Fold]: ...


def one_message_fold(
    job: Job,
    strategy: str,
    message: Message,
    counter: TokenCounter,
    *,
    kind: str,
    tokens_before: int | None = None,
    placement: Placement = "in_place",
    data: Mapping[str, Any] | None = None,
    usage: Mapping[str, Any] | None = None,
) -> Fold:
    """A fold over the job's range that renders as ``message``, labelled with its range
    (``[folded: seq 12-40]``, ``core.folds.labelled``) so a model can ask for it.

    Its text is the message's content without the label, and its ``tokens_after``
    the labelled message's count, which is what render adds up for it.
    """
    shown = labelled(message, job.start, job.end)
    return Fold(
        view=job.view,
        start=job.start,
        end=job.end,
        kind=kind,
        text=str(message["content"]),
        messages=(shown,),
        strategy=strategy,
        tokens_before=job.tokens_before if tokens_before is None else tokens_before,
        tokens_after=counter.message(shown),
        placement=placement,
        data=data or {},
        usage=usage,
    )


def label_tokens(job: Job, counter: TokenCounter) -> int:
    """What the range label (``core.folds.labelled``) adds to a fold's message over the
    job's range: the room a strategy sizing its fold to a target leaves for it."""
    return counter.text("\n" + range_label(job.start, job.end))


def keep_start(state: ViewState, room: int, *, keep_user: bool = True) -> int:
    """Index of the first entry a fold leaves verbatim: the newest whole units within ``room``.

    The last unit and (with ``keep_user``) the latest user message are kept
    even past it: the first may be a call still waiting for its results, the
    second is the request the next answer is for. A strategy whose fold quotes
    that request verbatim says ``keep_user=False``.
    """
    units = state.units
    keep = units[-1][0]
    used = 0
    for first, last in reversed(units):
        used += sum(e.tokens for e in state.entries[first : last + 1])
        if used > room:
            break
        keep = first
    user = state.latest_user if keep_user else None
    if user is not None and user < keep:
        keep = next(first for first, last in units if first <= user <= last)
    return keep


def job_for(strategy: str, state: ViewState, first: int, last: int, **params: Any) -> Job | None:
    """A job over entries ``first..last`` (indices, inclusive) of ``state``; None when
    they reach a call still waiting for its results (``ViewState.waiting``): every
    strategy chooses its range here, so none folds one, and it folds once they came."""
    if state.waiting is not None and last >= state.waiting:
        return None
    entries = state.entries[first : last + 1]
    return Job(
        strategy, state.view, state.version, entries[0].start, entries[-1].end, entries, params
    )


def sub_job(job: Job, first: int, last: int) -> Job:
    """The part of ``job`` over its entries ``first..last`` (indices, inclusive).

    A job that folds several ranges in one model call makes each fold over
    its own part, so the entries between the parts stay as they are.
    """
    entries = job.entries[first : last + 1]
    return replace(job, start=entries[0].start, end=entries[-1].end, entries=entries)
