"""Tool-call summarization (seed 001, ADR-0018/0040): old tool units become ``[SUMMARIZED]``.

The last ``keep_recent`` raw tool units stay verbatim. Older ones are folded
in batches of ``batch_size`` units, oldest first, one model call a batch. A
batch may reach across turns, but no fold does: the batch's units are grouped
into runs, each a contiguous run of tool units and the assistant text between
them that never crosses a user message, a fold or a recent unit, and each run
becomes its own ``[SUMMARIZED]`` fold. So a prompt never holds an orphan
result, user messages stay where they were (goal batches need them), and
assistant text before a run's first unit or after its last one stays raw (a
turn's final answer stays readable; goal batches take it in later).

A batch is folded when it is full: ``batch_size`` units that hold at least
``batch_tokens`` tokens; small units (a lookup and its short JSON answer)
are taken in more at a time until they do. Below ``high_water`` of the budget a
partial batch waits, and above it a partial batch is folded only when it
holds enough to matter: the tokens that bring the view back under the high
water, or the gap between the two water marks. Either way each call's fixed cost
(the episodic framing and the prompt, about 470 tokens) is spread over many
units, where folding each turn's one or two units as they closed cost a call
apiece, and five short units a call still spent a third of it on the prompt.
Below the high water, at most ``keep_recent`` raw tool units stay verbatim
beside a partial batch (fewer than ``batch_size`` units or ``batch_tokens``
tokens).

The model answers one JSON object, ``group_1``, ``group_2``, ... holding each
run's sections (``summarize_groups``). Each fold is one ``assistant``
message, ``[SUMMARIZED]`` and its run's sections: it is the agent's own
recalled experience, written in the first-person episodic framing of ADR-0040
(``episodic_system.txt``). Its data says ``summarized: true`` and
``summary_type: "tool_calls"``, which is how the threshold and goal-batch
strategies recognise it.

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
from contextfold.llm.base import LLM, Completion
from contextfold.strategies.base import Job, ViewState, job_for, one_message_fold, sub_job
from contextfold.strategies.checked import answer_chars, pins, summarize_checked, with_pins
from contextfold.strategies.lenient import Least
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
    batch_tokens: int = 4000
    max_tokens: int = 800
    prompt: str | Path | None = None
    system_prompt: str | Path | None = None
    trigger: Trigger = field(default_factory=Always)
    name: str = "tool_calls"

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise InvalidInput("batch_size must be at least 1", field="batch_size")
        if self.batch_tokens < 0:
            raise InvalidInput("batch_tokens must not be negative", field="batch_tokens")
        self._prompts()

    def plan(self, state: ViewState) -> Job | None:
        if not self.trigger(state):
            return None
        entries, units = state.entries, state.units
        tools = [k for k, (i, j) in enumerate(units) if is_raw_tool_unit(entries[i : j + 1])]
        eligible = tools[: max(len(tools) - max(self.keep_recent, 0), 0)]
        batch: list[int] = []
        tokens = 0
        for k in eligible:
            if len(batch) >= self.batch_size and tokens >= self.batch_tokens:
                break
            batch.append(k)
            tokens += sum(e.tokens for e in entries[units[k][0] : units[k][1] + 1])
        if not batch:
            return None
        full = len(batch) >= self.batch_size and tokens >= self.batch_tokens
        if not full and not worth_folding(state, tokens):
            return None
        runs: list[list[int]] = []
        for k in batch:
            joins = runs and all(
                is_plain_text(entries[units[m][0] : units[m][1] + 1])
                for m in range(runs[-1][-1] + 1, k)
            )
            if joins:
                runs[-1].append(k)
            else:
                runs.append([k])
        first = units[runs[0][0]][0]
        return job_for(
            self.name,
            state,
            first,
            units[runs[-1][-1]][1],
            groups=[
                (
                    units[run[0]][0] - first,
                    units[run[-1]][1] - first,
                    user_goal(entries, units[run[0]][0]),
                    len(run),
                )
                for run in runs
            ],
        )

    def run(self, job: Job, llm: LLM, counter: TokenCounter) -> Sequence[Fold]:
        system, template = self._prompts()
        groups: list[tuple[int, int, str, int]] = job.params["groups"]
        calls = [_calls(job.entries[first : last + 1]) for first, last, _, _ in groups]
        prompt = fill(
            template,
            count=sum(len(c) for c in calls),
            groups=len(groups),
            operations=group_material(
                "User Goal",
                [
                    (goal, operations(job.entries[first : last + 1]))
                    for first, last, goal, _ in groups
                ],
            ),
        )
        return summarize_groups(
            job,
            self.name,
            llm,
            counter,
            system=system,
            prompt=prompt,
            groups=[(first, last) for first, last, _, _ in groups],
            data=[
                {
                    "summary_type": "tool_calls",
                    "tool_units": units,
                    "tool_calls": len(c),
                    "tools": sorted({str(call["function"]["name"]) for call in c}),
                }
                for (_, _, _, units), c in zip(groups, calls, strict=True)
            ],
            max_tokens=self.max_tokens,
        )

    def _prompts(self) -> tuple[str, str]:
        return episodic_prompts(
            "tool_calls", self.prompt, self.system_prompt, "operations", count=0, groups=0
        )


def _calls(entries: Sequence[Entry]) -> list[Mapping[str, Any]]:
    return [
        call
        for e in entries
        for call in (e.messages[0].get("tool_calls") or ())
        if e.messages[0]["role"] == "assistant"
    ]


def worth_folding(state: ViewState, tokens: int) -> bool:
    """Whether folding ``tokens`` of raw messages now is worth a model call of its own.

    Only above ``high_water`` of the budget, and only when they bring the
    view back under it or hold the gap between the water marks, so a view
    that cannot get under its budget is not folded a turn at a time.
    """
    if state.budget is None or not state.above_high_water:
        return False
    high = state.high_mark(state.budget)
    return relieves(state, tokens) or tokens >= high - state.low_mark(state.budget)


def relieves(state: ViewState, tokens: int) -> bool:
    """Whether folding ``tokens`` brings a view above ``high_water`` of its budget under it."""
    if state.budget is None:
        return False
    high = state.high_mark(state.budget)
    return state.tokens > high and state.tokens - tokens <= high


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


def group_material(goal_title: str, groups: Sequence[tuple[str, str]]) -> str:
    """Groups for one prompt: ``=== Group n ===``, the goal under ``goal_title``, the material."""
    return "\n\n".join(
        f"=== Group {n} ===\n## {goal_title}\n{goal or '(not in view)'}\n\n{material(text)}"
        for n, (goal, text) in enumerate(groups, start=1)
    )


def group_keys(count: int) -> list[str]:
    return [f"group_{n}" for n in range(1, count + 1)]


def summarize_groups(
    job: Job,
    strategy: str,
    llm: LLM,
    counter: TokenCounter,
    *,
    system: str,
    prompt: str,
    groups: Sequence[tuple[int, int]],
    data: Sequence[Mapping[str, Any]],
    max_tokens: int,
) -> list[Fold]:
    """One model call for every group of ``job``, one ``[SUMMARIZED]`` fold each.

    ``groups`` are entry ranges of the job (inclusive). The answer is one JSON
    object, ``group_1`` ... holding each group's summary of up to
    ``max_tokens``; each is checked and pinned against its own messages, and
    the call's usage sits on the first fold, so a commit counts it once. The
    groups answered are folded (``group_1`` at least); the rest stay as they
    are for a later job. An unusable answer is asked again for Group 1 alone,
    in prose.
    """
    keys = group_keys(len(groups))
    checked = summarize_checked(
        llm,
        episodic_prompt(system, prompt),
        source=transcript(job.entries),
        max_tokens=max_tokens * len(groups),
        schema={
            "type": "object",
            "properties": {key: {"type": "string"} for key in keys},
            "required": keys,
            "additionalProperties": False,
        },
        pin=False,
        accept=lambda completion: _groups_problem(completion, keys),
        tokens_before=job.tokens_before,
        counter=counter,
        least=Least(
            keys[0], "Write only Group 1's summary." if len(keys) > 1 else "Write only the summary."
        ),
    )
    folds: list[Fold] = []
    for (first, last), key, extra in zip(groups, keys, data, strict=True):
        text = _group_text(checked.data, key)
        if not text:
            continue
        part = sub_job(job, first, last)
        pinned, _ = pins(transcript(part.entries), text, answer_chars(max_tokens))
        folds.append(
            summarized_fold(
                part,
                strategy,
                with_pins(text, pinned),
                pinned,
                extra,
                counter,
                usage=None if folds else checked.usage.to_dict(),
            )
        )
    return folds


def _groups_problem(completion: Completion, keys: Sequence[str]) -> str | None:
    """Why a grouped answer is unusable: no summary text for the first group."""
    if not _group_text(completion.data, keys[0]):
        return f"answer has no summary text for {keys[0]}"
    return None


def _group_text(data: Mapping[str, Any], key: str) -> str:
    """One group's summary; empty when the answer left the group out."""
    value = data.get(key)
    return value.strip() if isinstance(value, str) else ""


def summarized_fold(
    job: Job,
    strategy: str,
    text: str,
    pinned: Sequence[str],
    data: Mapping[str, Any],
    counter: TokenCounter,
    *,
    usage: Mapping[str, Any] | None,
) -> Fold:
    """One ``[SUMMARIZED]`` assistant message over the job's range."""
    message: Message = {"role": "assistant", "content": f"{SUMMARIZED}\n{text}"}
    return one_message_fold(
        job,
        strategy,
        message,
        counter,
        kind="summary",
        data={"summarized": True, **data, "pinned": list(pinned)},
        usage=usage,
    )
