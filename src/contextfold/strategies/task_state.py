"""Task-state summary: one anchored, sectioned state of the agent's work, merged fold by fold.

After a compaction an agent must still know what it was doing: the user's
requirements, the files it touched, what it decided and why, the errors it
already fixed, the next step. ``TaskStateSummary`` keeps these as one fold at
the head of the folded part, under fixed anchors (``task_sections.ANCHORS``).

Each cycle the model reads the previous state and only the messages folded
since, and answers with updates; the code merges them into the state
(``task_sections.merged``), so what an earlier fold kept survives an answer
that leaves it out. The new fold covers the previous one and the new range,
and supersedes it, as the rolling compactor's does.

It fires like the token budget: above ``high_water`` of the view's budget (or
``threshold_tokens``), and folds the view down to the low mark, keeping the
newest units verbatim. The user's latest messages in the folded range are
quoted verbatim in the intent section, within ``user_share`` of the room: a
fold covers one contiguous range, so they cannot stay behind as raw messages
inside it. The request being worked on (the latest user message) is never
folded: when it lies in the range, the state takes what precedes it and a
marker the agent's work since; when it opens the range (an agent run: one
task, then many steps), the state follows it.

Small models are expected: the JSON asked for may come back partial, fenced,
inside prose, as headed prose or as plain prose (``task_sections.parse_answer``).
An answer the judge rejects or that holds no section is asked for again once,
with less: fewer sections, plain lines, the newest part of the range. The
conversation's language is detected (``extract.language``) and the model told
to write the sections' contents in it; the anchors stay English.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from contextfold.core.entries import Entry
from contextfold.core.errors import InvalidInput
from contextfold.core.folds import Fold
from contextfold.core.messages import Message, text_of
from contextfold.core.tokens import TokenCounter
from contextfold.extract.artifacts import missing_artifacts
from contextfold.extract.language import detect_language, language_name
from contextfold.llm.base import LLM, Completion, Usage
from contextfold.strategies.answers import Expected, error_wording, material_of, strings
from contextfold.strategies.base import (
    Job,
    ViewState,
    job_for,
    keep_start,
    one_message_fold,
    sub_job,
)
from contextfold.strategies.checked import (
    CheckedAnswer,
    SummaryRejected,
    must_keep_facts,
    summarize_checked,
)
from contextfold.strategies.task_sections import (
    StateUpdate,
    TaskState,
    json_object,
    merged,
    parse_answer,
    rendered,
    state_within,
)
from contextfold.strategies.templates import fill, load_template
from contextfold.strategies.transcript import material, message_block, transcript
from contextfold.strategies.triggers import Trigger

KIND = "task_state"
MARKER_KIND = "task_state_marker"
MARKER = "[The work done on this request is folded into the task state above.]"
"""What stands for the agent's work since the latest request when the state precedes it."""
UNBUDGETED_LEVEL = 3000
"""The level a view with neither a budget nor ``threshold_tokens`` fires at (the token
budget's)."""
MIN_STATE_TOKENS = 128
SHORT_TOOL_CHARS = 400
"""Tool output shown per result in the shorter request of a retry."""
_LIST = {"type": "array", "items": {"type": "string"}}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "intent": {**_LIST, "x-extract": "requests"},
        "artifacts": {**_LIST, "x-extract": "touched"},
        "decisions": {**_LIST, "x-extract": "reasons"},
        "errors": {**_LIST, "x-extract": "errors"},
        "open_items": {**_LIST, "x-extract": "open"},
        "done": {**_LIST, "x-extract": "none"},
        "next_step": {"type": "string", "x-extract": "statement"},
    },
}
"""The JSON asked for. ``x-extract`` tells the offline stand-in what fills each section."""
_PINNED_KINDS = {"path": "artifacts", "url": "artifacts", "ticket": "artifacts", "error": "errors"}
"""Must-keep items of the folded range the state needs, and the section each goes in."""


@dataclass
class TaskStateSummary:
    """Fold all but the newest units into one task state, merged with the previous one.

    ``state_share`` of the room beside the system prompt (at most
    ``max_tokens``) is what the state may take, ``user_share`` what the user's
    verbatim words may take beside it. ``prompt`` and ``short_prompt`` override
    the two requests (fields ``previous_state``, ``new_messages``, ``language``,
    ``words``); ``trigger`` replaces the level test.
    """

    threshold_tokens: int | None = None
    state_share: float = 0.2
    user_share: float = 0.15
    max_tokens: int = 1500
    prompt: str | Path | None = None
    short_prompt: str | Path | None = None
    trigger: Trigger | None = None
    name: str = "task-state"

    def __post_init__(self) -> None:
        for name in ("state_share", "user_share"):
            share = getattr(self, name)
            if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share < 1:
                raise InvalidInput(f"{name} must be a share from 0 to below 1", field=name)
        if self.state_share + self.user_share >= 1:
            raise InvalidInput("state_share and user_share must leave room", field="user_share")

    def levels(self, state: ViewState) -> tuple[int, int, int]:
        """The level (budget or threshold), the tokens the view fires above, and its low mark."""
        if self.threshold_tokens is None and state.budget is not None:
            level = state.budget
            return level, state.high_mark(level), state.low_mark(level)
        level = UNBUDGETED_LEVEL if self.threshold_tokens is None else self.threshold_tokens
        return level, level, state.low_mark(level)

    def plan(self, state: ViewState) -> Job | None:
        level, fire, low = self.levels(state)
        fired = self.trigger(state) if self.trigger is not None else state.tokens > fire
        if not state.entries or not fired:
            return None
        room = max(level - state.fixed, 0)
        state_tokens = max(min(self.max_tokens, int(room * self.state_share)), MIN_STATE_TOKENS)
        user_tokens = int(room * self.user_share)
        own = [i for i, e in enumerate(state.entries) if _own(e, self.name)]
        # Beside the new state: the system prompt, facts, and the request, which stays.
        user = state.latest_user
        beside = state.tokens - sum(e.tokens for e in state.entries)
        beside += state.entries[user].tokens if user is not None else 0
        keep = keep_start(state, low - beside - state_tokens - user_tokens, keep_user=False)
        spans = _spans(user, keep)
        fresh = [
            i
            for first, last in spans
            for i in range(first, last + 1)
            if not _own(state.entries[i], self.name)
        ]
        if not spans or not fresh:
            return None
        previous = next(
            (f for i in own if i < keep and (f := state.entries[i].fold) and f.kind == KIND), None
        )
        return job_for(
            self.name,
            state,
            0,
            keep - 1,
            spans=spans,
            previous=dict(previous.data["state"]) if previous is not None else None,
            state_tokens=state_tokens,
            user_tokens=user_tokens,
        )

    def run(self, job: Job, llm: LLM, counter: TokenCounter) -> Sequence[Fold]:
        previous_data = job.params["previous"]
        previous = TaskState.from_data(previous_data) if previous_data else TaskState()
        spans: list[tuple[int, int]] = [tuple(s) for s in job.params["spans"]]
        # What the model reads: every entry of the job but this strategy's own folds, the
        # latest user request (which stays verbatim) among them.
        new = [e for e in job.entries if not _own(e, self.name)]
        folded = [e for first, last in spans for e in job.entries[first : last + 1]]
        language = detect_language(_said(previous, new))
        state_tokens: int = job.params["state_tokens"]
        answer, request = self._ask(job, new, previous, language, state_tokens, llm, counter)
        update = parse_answer(answer.text, language)
        state = merged(previous, update)
        state, pinned = _pinned(state, new)
        state, dropped = state_within(state, state_tokens, counter.text)
        fresh_folded = [e for e in folded if not _own(e, self.name)]
        state = replace(
            state,
            user_words=_user_words(previous, fresh_folded, job.params["user_tokens"], counter),
        )
        message: Message = {"role": "user", "content": rendered(state)}
        data = {
            "state": state.to_data(),
            "language": language,
            "request": request,
            "attempts": answer.attempts,
            "pinned": pinned,
            "items_dropped": dropped,
        }
        first, last = spans[0]
        folds = [
            one_message_fold(
                sub_job(job, first, last),
                self.name,
                message,
                counter,
                kind=KIND,
                data=data,
                usage=answer.usage.to_dict(),
            )
        ]
        for first, last in spans[1:]:
            part = sub_job(job, first, last)
            note: Message = {"role": "assistant", "content": MARKER}
            folds.append(one_message_fold(part, self.name, note, counter, kind=MARKER_KIND))
        return folds

    def _ask(
        self,
        job: Job,
        new: Sequence[Entry],
        previous: TaskState,
        language: str,
        state_tokens: int,
        llm: LLM,
        counter: TokenCounter,
    ) -> tuple[CheckedAnswer, str]:
        """The accepted answer and which request got it: the full one, else once the shorter."""
        name = language_name(language)
        words = str(state_tokens * 3 // 4)
        full = fill(
            load_template("task_state", self.prompt),
            previous_state=material(rendered(previous)),
            new_messages=material(transcript(new)),
            language=name,
            words=words,
        )
        source = transcript(job.entries)

        def ask(prompt: str, schema: dict[str, Any] | None) -> CheckedAnswer:
            return summarize_checked(
                llm,
                [{"role": "user", "content": prompt}],
                source=source,
                max_tokens=state_tokens,
                ask_schema=schema,
                attempts=1,
                pin=False,
                accept=_accept(language, prompt),
                tokens_before=job.tokens_before,
                counter=counter,
            )

        try:
            return ask(full, SCHEMA), "full"
        except SummaryRejected as first:
            short = fill(
                load_template("task_state_short", self.short_prompt),
                new_messages=material(_newest(new, len(full) // 2)),
                language=name,
                words=str(state_tokens * 3 // 8),
            )
            try:
                answer = ask(short, None)
            except SummaryRejected as second:
                usage = _total(first.usage, second.usage)
                raise SummaryRejected([*first.reasons, *second.reasons], usage) from None
            return replace(answer, usage=_total(first.usage, answer.usage) or answer.usage), "short"


def _accept(language: str, prompt: str) -> Callable[[Completion], str | None]:
    """The task state's check: the answer holds a section, and, when it is JSON, its values
    read as prose pass the judge's wording rule (the judge reads a JSON answer as its text
    here, since prose is accepted too)."""
    expected = Expected(material_of([{"role": "user", "content": prompt}]), 0, len)

    def accept(completion: Completion) -> str | None:
        data = json_object(completion.text)
        if data is not None:
            wording = error_wording("\n".join(strings(data)), lambda: expected.material_words)
            if wording is not None:
                return wording
        if parse_answer(completion.text, language).empty:
            return "answer holds no section of the task state"
        return None

    return accept


def _own(entry: Entry, strategy: str) -> bool:
    """Whether ``entry`` is a fold this strategy made: a state, or the marker beside one."""
    fold = entry.fold
    return fold is not None and fold.strategy == strategy and fold.kind in (KIND, MARKER_KIND)


def _spans(user: int | None, keep: int) -> list[tuple[int, int]]:
    """The ranges folded below entry ``keep``: the state's first, then the marker's.

    The latest user request (entry ``user``) is never folded (render shows it).
    When it lies in the range, the state takes what precedes it and a marker
    the agent's work since; a request that opens the range has the state after it.
    """
    if user is None or user >= keep:
        return [(0, keep - 1)] if keep > 0 else []
    before = [(0, user - 1)] if user > 0 else []
    after = [(user + 1, keep - 1)] if user + 1 < keep else []
    return [*before, *after]


def _pinned(state: TaskState, new: Sequence[Entry]) -> tuple[TaskState, list[str]]:
    """``state`` with the folded range's paths, URLs and error lines it lacks, and those items.

    Paths and URLs are taken from what the user and the agent said and called
    (a masked unit's call too), not from tool output (a directory listing is
    not work done) nor from other folds' text (a clipped preview); error lines
    from the whole range.
    """
    names: dict[str, str] = {}
    talk = "\n\n".join(
        message_block(m, names)
        for e in new
        if e.fold is None or e.fold.kind == "masked"
        for m in e.messages
        if m["role"] != "tool"
    )
    errors = [f for f in must_keep_facts(transcript(new)) if f.kind == "error"]
    facts = [f for f in [*must_keep_facts(talk), *errors] if f.kind in _PINNED_KINDS]
    missing = set(missing_artifacts([f.text for f in facts], rendered(state)))
    added: dict[str, list[str]] = {}
    for fact in facts:
        if fact.text in missing:
            added.setdefault(_PINNED_KINDS[fact.kind], []).append(fact.text)
    pinned = list(dict.fromkeys(item for items in added.values() for item in items))
    return merged(state, StateUpdate(added)), pinned


def _said(previous: TaskState, new: Sequence[Entry]) -> str:
    """What the user and the agent wrote: the text a language is told from."""
    said = [text_of(m) for e in new if e.fold is None for m in e.messages if m["role"] != "tool"]
    return "\n".join([*previous.user_words, *said])


def _user_words(
    previous: TaskState, new: Sequence[Entry], tokens: int, counter: TokenCounter
) -> tuple[str, ...]:
    """The latest user messages, verbatim and newest last, within ``tokens``."""
    said = [
        text_of(m).strip()
        for e in new
        if e.fold is None
        for m in e.messages
        if m["role"] == "user" and text_of(m).strip()
    ]
    kept: list[str] = []
    used = 0
    for words in reversed([*previous.user_words, *said]):
        cost = counter.text(words) + 2
        if used + cost > tokens:
            if not kept and tokens > 0:  # the latest alone is too long: its opening
                kept.append(words[: tokens * 3] + " [...]")
            break
        kept.append(words)
        used += cost
    return tuple(reversed(kept))


def _newest(entries: Sequence[Entry], chars: int) -> str:
    """The transcript of the newest entries within ``chars``, tool output cut short."""
    blocks: list[str] = []
    used = 0
    for entry in reversed(entries):
        block = transcript([entry], tool_chars=SHORT_TOOL_CHARS)
        if blocks and used + len(block) > chars:
            break
        blocks.append(block)
        used += len(block) + 2
    return "\n\n".join(reversed(blocks))


def _total(first: Usage | None, second: Usage | None) -> Usage | None:
    if first is None or second is None:
        return first or second
    return first + second
