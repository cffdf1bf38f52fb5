"""Observation masking: old tool results become a one-line placeholder.

The cheapest fold there is (the "observation masking" baseline of agent
context-management studies): the assistant's call stays as it was, each result
is replaced by a line naming the tool, its arguments (abridged) and the size
removed. The last ``keep_last`` tool units stay verbatim; when a budget is set
and the view is still above its low-water mark, newer ones are masked too,
down to ``min_keep``. With ``working_set`` (the ``offline`` preset), no unit
of the view's working set (``strategies.working_set``: the newest rounds an
``ExtractiveSummary`` of the same ``kind`` and ``recent_share`` keeps
verbatim) is masked: an agent continues from those rounds' results.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from contextfold.core.entries import Entry
from contextfold.core.folds import Fold, labelled
from contextfold.core.messages import Message
from contextfold.core.tokens import TokenCounter
from contextfold.core.units import call_for
from contextfold.llm.base import LLM
from contextfold.strategies.base import Job, ViewState, job_for
from contextfold.strategies.triggers import Always, Trigger
from contextfold.strategies.working_set import Kind, check, kind_and_share, working_set_start

ARGS_CHARS = 80


@dataclass
class ObservationMasking:
    light: ClassVar[bool] = True  # cheap: never worth a trip to another process
    keep_last: int = 5
    min_keep: int = 1
    exclude_tools: Sequence[str] = ()
    trigger: Trigger = field(default_factory=Always)
    name: str = "masking"
    working_set: bool = False
    kind: Kind | None = None
    recent_share: float | None = None

    def __post_init__(self) -> None:
        check(self.kind, self.recent_share)

    def plan(self, state: ViewState) -> Job | None:
        if not self.trigger(state):
            return None
        units = [(i, j) for i, j in state.units if _is_raw_tool_unit(state.entries[i : j + 1])]
        keep = max(self.keep_last, 0)
        spared = self._spared_from(state)
        eligible = [u for u in units[: max(len(units) - keep, 0)] if u[0] < spared]
        worth = [(u, self._worth(state, u)) for u in eligible]
        chosen = [u for u, saving in worth if saving > 0]
        if state.budget is not None:
            over = state.tokens - state.low_mark(state.budget)
            newer = units[max(len(units) - keep, 0) : max(len(units) - self.min_keep, 0)]
            extra = [u for u in newer if u[0] < spared]
            saved = sum(saving for _, saving in worth if saving > 0)
            for u in extra:
                if saved >= over:
                    break
                saving = self._worth(state, u)
                if saving > 0:
                    chosen.append(u)
                    saved += saving
        if not chosen:
            return None
        first, last = chosen[0][0], chosen[-1][1]
        spans = [(i - first, j - first) for i, j in chosen]
        return job_for(self.name, state, first, last, spans=spans)

    def run(self, job: Job, llm: LLM, counter: TokenCounter) -> Sequence[Fold]:
        folds = []
        for i, j in job.params["spans"]:
            unit = job.entries[i : j + 1]
            masked = [self._mask(e.messages[0], unit) for e in unit]
            placeholders = [m["content"] for m in masked if m["role"] == "tool"]
            # Each placeholder names the unit's range, so a model can ask for the output.
            messages = tuple(
                labelled(m, unit[0].start, unit[-1].end) if m["role"] == "tool" else m
                for m in masked
            )
            folds.append(
                Fold(
                    view=job.view,
                    start=unit[0].start,
                    end=unit[-1].end,
                    kind="masked",
                    text="\n".join(placeholders),
                    messages=messages,
                    strategy=self.name,
                    tokens_before=sum(e.tokens for e in unit),
                    tokens_after=sum(counter.message(m) for m in messages),
                    data={"masked_seqs": [e.start for e in unit if e.role == "tool"]},
                )
            )
        return folds

    def _spared_from(self, state: ViewState) -> int:
        """The first entry no unit is masked from: the working set's, with ``working_set``."""
        if not self.working_set:
            return len(state.entries)
        _, share = kind_and_share(state, self.kind, self.recent_share)
        return working_set_start(state, share, keep_rounds=1)

    def _worth(self, state: ViewState, span: tuple[int, int]) -> int:
        """Tokens masking the unit saves; 0 for a unit of an excluded tool."""
        unit = state.entries[span[0] : span[1] + 1]
        if any(_tool_name(e, unit) in self.exclude_tools for e in unit if e.role == "tool"):
            return 0
        return self._saving(state, span)

    def _saving(self, state: ViewState, span: tuple[int, int]) -> int:
        unit = state.entries[span[0] : span[1] + 1]
        return sum(
            e.tokens - state.counter.message(self._mask(e.messages[0], unit))
            for e in unit
            if e.role == "tool"
        )

    def _mask(self, message: Message, unit: Sequence[Entry]) -> Message:
        if message["role"] != "tool":
            return message
        call = _call_for(message, unit)
        name = call["function"]["name"] if call else "tool"
        args = _abridge(call["function"].get("arguments", "")) if call else ""
        content = message.get("content")
        size = len(content) if isinstance(content, str) else len(str(content))
        masked: Message = {
            "role": "tool",
            "tool_call_id": message["tool_call_id"],
            "content": f"[masked: output of {name}({args}), {size} characters, kept in the log]",
        }
        return masked


def _is_raw_tool_unit(unit: Sequence[Entry]) -> bool:
    return (
        len(unit) > 1
        and all(e.fold is None for e in unit)
        and bool(unit[0].message and unit[0].message.get("tool_calls"))
    )


def _call_for(message: Message, unit: Sequence[Entry]) -> Mapping[str, Any] | None:
    """The call ``message`` answers, among the messages before it in its unit."""
    before = []
    for e in unit:
        if e.message is message:
            break
        if e.message is not None:
            before.append(e.message)
    return call_for(message, before)


def _tool_name(entry: Entry, unit: Sequence[Entry]) -> str:
    call = _call_for(entry.messages[0], unit)
    return str(call["function"]["name"]) if call else ""


def _abridge(args: str) -> str:
    flat = " ".join(args.split())
    return flat if len(flat) <= ARGS_CHARS else flat[: ARGS_CHARS - 1] + "…"
