"""Tool-call summarization (seed 001, ADR-0018/0040): old tool units become ``[SUMMARIZED]``.

The last ``keep_recent`` raw tool units stay verbatim. Older ones are folded
in batches: a batch is a contiguous run of up to ``batch_size`` tool units and
the assistant text between them. It never crosses a user message, a fold or a
recent unit, and never splits a unit, so a prompt never holds an orphan result.
Assistant text before the first unit or after the last one stays raw (a
turn's final answer stays readable; goal batches take it in later).

A batch is folded when it is full, when nothing can join it any more (a user
message or a fold ends it), or when the view is over budget; a run that the
agent may still extend waits, so a busy turn costs one model call per
``batch_size`` units instead of one per unit. At most ``keep_recent +
batch_size - 1`` raw tool units stay verbatim, fewer when over budget.

The fold is one ``assistant`` message, ``[SUMMARIZED]`` and the model's
sections: it is the agent's own recalled experience, written in the
first-person episodic framing of ADR-0040 (``episodic_system.txt``). Its data
says ``summarized: true`` and ``summary_type: "tool_calls"``, which is how the
threshold and goal-batch strategies recognise it.

The ``[SUMMARIZED]`` helpers shared by the three ADR-0041 strategies live here,
where the tag is first made.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextfold.core.entries import Entry
from contextfold.core.errors import InvalidInput
from contextfold.core.folds import Fold
from contextfold.core.messages import Message, text_of
from contextfold.core.tokens import TokenCounter
from contextfold.llm.base import LLM
from contextfold.strategies.base import Job, ViewState, job_for, one_message_fold
from contextfold.strategies.checked import Checked, summarize_checked
from contextfold.strategies.templates import fill, load_template
from contextfold.strategies.transcript import material, message_block, transcript
from contextfold.strategies.triggers import Always, Trigger

SUMMARIZED = "[SUMMARIZED]"
SUMMARY_TYPES = ("tool_calls", "threshold")
EPISODIC_SYSTEM = "episodic_system"
GOAL_CHARS = 2000


@dataclass
class ToolCallSummarization:
    """Fold old tool units, ``batch_size`` at a time, into first-person ``[SUMMARIZED]`` folds.

    ``prompt`` and ``system_prompt`` override the templates ``tool_calls`` and
    ``episodic_system`` (a file path or the text itself); ``trigger`` gates
    planning (default: always look).
    """

    keep_recent: int = 4
    batch_size: int = 5
    max_tokens: int = 800
    prompt: str | Path | None = None
    system_prompt: str | Path | None = None
    trigger: Trigger = field(default_factory=Always)
    name: str = "tool_calls"

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise InvalidInput("batch_size must be at least 1", field="batch_size")
        self._prompts()

    def plan(self, state: ViewState) -> Job | None:
        if not self.trigger(state):
            return None
        entries, units = state.entries, state.units
        tools = [k for k, (i, j) in enumerate(units) if is_raw_tool_unit(entries[i : j + 1])]
        eligible = tools[: max(len(tools) - max(self.keep_recent, 0), 0)]
        if not eligible:
            return None
        is_tool, is_eligible = set(tools), set(eligible)

        def text_at(k: int) -> bool:
            return is_plain_text(entries[units[k][0] : units[k][1] + 1])

        first = eligible[0]
        last, count, k = first, 1, first + 1
        while k < len(units) and count < self.batch_size:
            if k in is_eligible:
                last, count = k, count + 1
            elif not text_at(k):
                break
            k += 1
        after = last + 1
        while after < len(units) and text_at(after):
            after += 1
        # Only a recent tool unit or the end of the view can still extend the run.
        closed = after < len(units) and after not in is_tool
        if count < self.batch_size and not closed and not state.over_budget:
            return None
        return job_for(
            self.name,
            state,
            units[first][0],
            units[last][1],
            goal=user_goal(entries, units[first][0]),
            tool_units=count,
        )

    def run(self, job: Job, llm: LLM, counter: TokenCounter) -> Sequence[Fold]:
        system, template = self._prompts()
        calls = [
            call
            for e in job.entries
            for call in (e.messages[0].get("tool_calls") or ())
            if e.messages[0]["role"] == "assistant"
        ]
        prompt = fill(
            template,
            goal=job.params.get("goal") or "(not in view)",
            count=len(calls),
            operations=material(operations(job.entries)),
        )
        checked = summarize_checked(
            llm,
            episodic_prompt(system, prompt),
            source=transcript(job.entries),
            max_tokens=self.max_tokens,
        )
        data = {
            "summary_type": "tool_calls",
            "tool_units": job.params.get("tool_units", 0),
            "tool_calls": len(calls),
            "tools": sorted({str(c["function"]["name"]) for c in calls}),
        }
        return [summarized_fold(job, self.name, checked, data, counter)]

    def _prompts(self) -> tuple[str, str]:
        return episodic_prompts(
            "tool_calls", self.prompt, self.system_prompt, "operations", goal="", count=0
        )


def is_raw_tool_unit(unit: Sequence[Entry]) -> bool:
    """An assistant call with its results, none of them folded yet."""
    return (
        len(unit) > 1
        and all(e.fold is None for e in unit)
        and bool(unit[0].message and unit[0].message.get("tool_calls"))
    )


def is_plain_text(unit: Sequence[Entry]) -> bool:
    """One raw assistant message without tool calls: reasoning or an answer."""
    if len(unit) != 1 or unit[0].message is None:
        return False
    msg = unit[0].message
    return msg["role"] == "assistant" and not msg.get("tool_calls")


def is_summarized(entry: Entry, types: Sequence[str] = SUMMARY_TYPES) -> bool:
    """A ``[SUMMARIZED]`` fold of one of ``types`` (by its data, not its text)."""
    fold = entry.fold
    return (
        fold is not None
        and fold.data.get("summarized") is True
        and fold.data.get("summary_type") in types
    )


def user_goal(entries: Sequence[Entry], before: int) -> str:
    """The nearest raw user message before index ``before``: what the folded work served."""
    for entry in reversed(entries[:before]):
        if entry.role == "user":
            text = text_of(entry.messages[0]).strip()
            if len(text) > GOAL_CHARS:
                text = text[: GOAL_CHARS - 1] + "…"
            return text
    return ""


def operations(entries: Sequence[Entry]) -> str:
    """Raw messages as a transcript, each tool unit numbered ``--- Operation n ---``."""
    names: dict[str, str] = {}
    blocks: list[str] = []
    number = 0
    for entry in entries:
        msg = entry.messages[0]
        block = message_block(msg, names)
        if msg["role"] == "assistant" and msg.get("tool_calls"):
            number += 1
            block = f"--- Operation {number} ---\n{block}"
        blocks.append(block)
    return "\n\n".join(blocks)


def episodic_prompts(
    name: str,
    prompt: str | Path | None,
    system_prompt: str | Path | None,
    material_field: str,
    **fields: object,
) -> tuple[str, str]:
    """The system text and the user template; a template without the material is refused.

    Called at construction too, so a bad override fails before any model call.
    """
    template = load_template(name, prompt)
    used = {f for _, f, _, _ in string.Formatter().parse(template) if f}
    if material_field not in used:
        raise InvalidInput(
            f"prompt template must hold {{{material_field}}}, where the history goes",
            field="prompt",
        )
    fill(template, **{material_field: ""}, **fields)
    return load_template(EPISODIC_SYSTEM, system_prompt).strip(), template


def episodic_prompt(system: str, prompt: str) -> list[Message]:
    return [{"role": "system", "content": system}, {"role": "user", "content": prompt.strip()}]


def summarized_fold(
    job: Job, strategy: str, checked: Checked, data: Mapping[str, Any], counter: TokenCounter
) -> Fold:
    """One ``[SUMMARIZED]`` assistant message over the job's range."""
    text = f"{SUMMARIZED}\n{checked.text}"
    message: Message = {"role": "assistant", "content": text}
    return one_message_fold(
        job,
        strategy,
        message,
        counter,
        kind="summary",
        data={"summarized": True, **data, "pinned": list(checked.pinned)},
        usage=checked.usage.to_dict(),
    )
