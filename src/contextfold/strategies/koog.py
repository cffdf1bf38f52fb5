"""Koog-style history compression (seed 004): a whole-history TL;DR, or retrieved facts.

Both fire when the view has more than ``max_messages`` messages or
``max_characters`` characters, or when a user predicate says so, and fold
everything but the last ``keep_last`` messages (the boundary moves back to the
start of a tool unit, so a unit is never split). The latest user message, the
task being worked on, is never folded: when it lies in that range, the range
is split around it and each side gets its own fold (an agent run's one task,
followed by a hundred steps, keeps its task verbatim).

- ``WholeHistory`` folds the range into one TL;DR a side, in place. The next cycle's
  range starts with that TL;DR, so the model folds it in and the new one
  supersedes it.
- ``RetrieveFacts`` asks the model its concept questions in one call (JSON:
  a string per ``single`` concept, a list of strings per ``multiple`` one).
  Koog replaces the history with the answers, so a cycle commits two folds
  together: a facts fold with the answers, rendered after the system prompt,
  and a one-line in-place marker where the folded messages were (one a side). The next
  cycle shows the model the previous answers with the messages folded since.

``CODE_AGENT_CONCEPTS`` are the seed's five concepts for code agents.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from contextfold.core.entries import Entry
from contextfold.core.errors import InvalidInput
from contextfold.core.folds import Fold
from contextfold.core.messages import Message
from contextfold.core.tokens import TokenCounter
from contextfold.llm.base import LLM, Completion
from contextfold.strategies.answers import prose_problem
from contextfold.strategies.base import Job, ViewState, job_for, one_message_fold, sub_job
from contextfold.strategies.checked import summarize_checked, with_pins
from contextfold.strategies.lenient import Least
from contextfold.strategies.pipeline import Pipeline
from contextfold.strategies.templates import fill, load_template
from contextfold.strategies.transcript import material, transcript
from contextfold.strategies.triggers import Characters, MessageCount, Predicate, Trigger

FactType = Literal["single", "multiple"]
TLDR_HEADER = "[TL;DR of the earlier conversation]"
FACTS_HEADER = "[Preserved facts from the earlier conversation]"
EARLIER_FACTS = "Facts retrieved earlier:"


@dataclass(frozen=True)
class Concept:
    """A question whose answer must survive compression: one fact, or a list of them."""

    id: str
    question: str
    fact_type: FactType = "single"

    def __post_init__(self) -> None:
        if not self.id.strip():
            raise InvalidInput("a concept needs an id", field="id")
        if self.fact_type not in ("single", "multiple"):
            raise InvalidInput(
                f"fact_type is 'single' or 'multiple', not {self.fact_type!r}", field="fact_type"
            )

    @property
    def label(self) -> str:
        """The id as a heading: ``errors-and-fixes`` reads ``Errors and fixes``."""
        words = self.id.replace("_", "-").split("-")
        return " ".join(w for w in words if w).capitalize()


CODE_AGENT_CONCEPTS: tuple[Concept, ...] = (
    Concept(
        "project-structure",
        "What is the project structure? List main directories, key files, and technologies used.",
        "multiple",
    ),
    Concept(
        "important-achievements",
        "What has been accomplished so far? List completed tasks, implemented features, "
        "and files created or modified.",
        "multiple",
    ),
    Concept(
        "current-context",
        "What is being worked on right now? Describe the current task, its state, "
        "and the next step.",
        "single",
    ),
    Concept(
        "errors-and-fixes",
        "What errors occurred and how were they fixed? List each error with its cause "
        "and fix, and say which are still unresolved.",
        "multiple",
    ),
    Concept(
        "user-requirements",
        "What did the user ask for? List the requirements, constraints, and preferences "
        "the user stated.",
        "multiple",
    ),
)


def koog_trigger(
    max_messages: int, max_characters: int, predicate: Callable[[ViewState], bool] | None
) -> Trigger:
    """The seed's trigger: more messages, or more characters, than allowed, or the predicate."""
    trigger: Trigger = MessageCount(max_messages) | Characters(max_characters)
    return trigger | Predicate(predicate) if predicate is not None else trigger


def plan_keep_last(
    strategy: str,
    state: ViewState,
    keep_last: int,
    own: Callable[[Entry], bool],
    **params: Any,
) -> Job | None:
    """A job over all entries before the last ``keep_last`` messages, moved back to a unit start.

    The latest user message (the task being worked on) is never folded: when
    it lies in that range, the range is split around it, as the rescue does,
    into ``params["spans"]`` (entry index ranges relative to the job, one fold
    each). A span that is only the strategy's own previous fold (``own``) has
    nothing new and is left out; None when no span is left.
    """
    kept = 0
    start = len(state.entries)
    for first, last in reversed(state.units):
        if kept >= keep_last:
            break
        kept += sum(len(e.messages) for e in state.entries[first : last + 1])
        start = first
    spans = [(0, start - 1)]
    user = state.latest_user
    if user is not None and user < start:
        # The unit holding it, which is the message alone unless a log put it inside a tool unit.
        first, last = next((a, b) for a, b in state.units if a <= user <= b)
        spans = [(0, first - 1), (last + 1, start - 1)]
    spans = [(a, b) for a, b in spans if a <= b and not (a == b and own(state.entries[a]))]
    if not spans:
        return None
    base = spans[0][0]
    relative = [(a - base, b - base) for a, b in spans]
    return job_for(strategy, state, base, spans[-1][1], spans=relative, **params)


def span_jobs(job: Job) -> list[Job]:
    """The job's parts that ``plan_keep_last`` split around the latest user message."""
    return [sub_job(job, a, b) for a, b in job.params["spans"]]


def folded_count(entries: Sequence[Entry], own: Callable[[Entry], bool]) -> int:
    """Log messages the entries stand for; the strategy's own earlier fold knows its count."""
    total = 0
    for entry in entries:
        fold = entry.fold
        if fold is None:
            total += 1
        elif own(entry):
            total += int(fold.data["messages_folded"])
        else:
            total += fold.end - fold.start + 1
    return total


@dataclass
class WholeHistory:
    """Fold all but the last ``keep_last`` messages into one TL;DR, superseding the previous one."""

    max_messages: int = 200
    max_characters: int = 200_000
    predicate: Callable[[ViewState], bool] | None = None
    keep_last: int = 10
    prompt: str | Path | None = None
    max_tokens: int = 1024
    trigger: Trigger | None = None
    name: str = "whole-history"

    def plan(self, state: ViewState) -> Job | None:
        trigger = (
            self.trigger
            if self.trigger is not None
            else koog_trigger(self.max_messages, self.max_characters, self.predicate)
        )
        if not trigger(state):
            return None
        return plan_keep_last(self.name, state, self.keep_last, self._own)

    def run(self, job: Job, llm: LLM, counter: TokenCounter) -> Sequence[Fold]:
        return [self._tldr(part, llm, counter) for part in span_jobs(job)]

    def _tldr(self, part: Job, llm: LLM, counter: TokenCounter) -> Fold:
        history = transcript(part.entries)
        checked = summarize_checked(
            llm,
            _ask(fill(load_template("koog_tldr", self.prompt), history=material(history))),
            source=history,
            max_tokens=self.max_tokens,
            accept=prose_problem,
            tokens_before=part.tokens_before,
            counter=counter,
        )
        message: Message = {"role": "user", "content": f"{TLDR_HEADER}\n{checked.text}"}
        return one_message_fold(
            part,
            self.name,
            message,
            counter,
            kind="summary",
            data={
                "messages_folded": folded_count(part.entries, self._own),
                "pinned": list(checked.pinned),
            },
            usage=checked.usage.to_dict(),
        )

    def _own(self, entry: Entry) -> bool:
        return entry.fold is not None and entry.fold.strategy == self.name


@dataclass
class RetrieveFacts:
    """Replace all but the last ``keep_last`` messages with answers to concept questions."""

    concepts: Sequence[Concept]
    max_messages: int = 200
    max_characters: int = 200_000
    predicate: Callable[[ViewState], bool] | None = None
    keep_last: int = 10
    prompt: str | Path | None = None
    max_tokens: int = 1024
    trigger: Trigger | None = None
    name: str = "retrieve-facts"

    def __post_init__(self) -> None:
        self.concepts = tuple(self.concepts)
        ids = [c.id for c in self.concepts]
        if not ids:
            raise InvalidInput("retrieve facts needs at least one concept", field="concepts")
        if len(set(ids)) != len(ids):
            raise InvalidInput(f"concept ids must be unique: {ids}", field="concepts")

    @property
    def schema(self) -> Mapping[str, Any]:
        """One property a concept: a string, or a list of strings."""
        return {
            "type": "object",
            "properties": {
                c.id: {"type": "string"}
                if c.fact_type == "single"
                else {"type": "array", "items": {"type": "string"}}
                for c in self.concepts
            },
            "required": [c.id for c in self.concepts],
            "additionalProperties": False,
        }

    @property
    def _least(self) -> Least:
        """The facts can do with the first concept's answer; the others then say nothing."""
        first = self.concepts[0]
        return Least(
            first.id,
            f"Answer only this question: {first.question}",
            {c.id: "" if c.fact_type == "single" else [] for c in self.concepts},
        )

    def plan(self, state: ViewState) -> Job | None:
        trigger = (
            self.trigger
            if self.trigger is not None
            else koog_trigger(self.max_messages, self.max_characters, self.predicate)
        )
        if not trigger(state):
            return None
        facts = state.facts if state.facts and state.facts.strategy == self.name else None
        return plan_keep_last(
            self.name,
            state,
            self.keep_last,
            self._own,
            previous_facts=facts.text if facts else None,
            previous_facts_tokens=facts.tokens_after if facts else 0,
        )

    def run(self, job: Job, llm: LLM, counter: TokenCounter) -> Sequence[Fold]:
        previous: str | None = job.params["previous_facts"]
        parts = span_jobs(job)
        # The marker of our previous cycle says nothing; the facts it points to do.
        history = transcript([e for p in parts for e in p.entries if not self._own(e)])
        if previous:
            history = f"{EARLIER_FACTS}\n{previous}\n\n{history}"
        questions = "\n".join(
            f"- {c.id} ({'one fact' if c.fact_type == 'single' else 'list of facts'}): {c.question}"
            for c in self.concepts
        )
        checked = summarize_checked(
            llm,
            _ask(
                fill(
                    load_template("koog_facts", self.prompt),
                    questions=questions,
                    history=material(history),
                )
            ),
            source=history,
            max_tokens=self.max_tokens,
            schema=self.schema,
            accept=self._problem,
            tokens_before=sum(p.tokens_before for p in parts) + job.params["previous_facts_tokens"],
            counter=counter,
            least=self._least,
        )
        answers = {c.id: _answer(c, checked.data[c.id]) for c in self.concepts}
        text = with_pins(facts_text(self.concepts, answers), checked.pinned)
        counts = [folded_count(p.entries, self._own) for p in parts]
        pinned = list(checked.pinned)
        facts = one_message_fold(
            job,
            self.name,
            {"role": "user", "content": text},
            counter,
            kind="facts",
            tokens_before=job.params["previous_facts_tokens"],
            placement="facts",
            data={"facts": answers, "messages_folded": sum(counts), "pinned": pinned},
            usage=checked.usage.to_dict(),
        )
        markers = [
            one_message_fold(
                part,
                self.name,
                {
                    "role": "system",
                    "content": f"[{count} earlier messages compressed into the retrieved facts above]",
                },
                counter,
                kind="facts_marker",
                data={"messages_folded": count, "pinned": pinned},
            )
            for part, count in zip(parts, counts, strict=True)
        ]
        return [facts, *markers]

    def _own(self, entry: Entry) -> bool:
        return entry.fold is not None and entry.fold.strategy == self.name

    def _problem(self, completion: Completion) -> str | None:
        """Why the answers are unusable: a concept missing or of the wrong type, or all empty."""
        data = completion.data
        for concept in self.concepts:
            value = data.get(concept.id)
            if isinstance(value, str) or (
                isinstance(value, list) and all(isinstance(v, str) for v in value)
            ):
                continue
            return f"concept {concept.id!r} needs a string or a list of strings"
        if not any(_answer(c, data[c.id]) for c in self.concepts):
            # Koog falls back to no compression when no fact was found.
            return "no concept has an answer"
        return None


def _answer(concept: Concept, value: str | list[str]) -> str | list[str]:
    """An answer in its concept's shape, blanks dropped; a one-item answer is taken either way."""
    items = [value] if isinstance(value, str) else value
    items = [s.strip() for s in items if s.strip()]
    if concept.fact_type == "multiple":
        return items
    return "; ".join(items)


def facts_text(concepts: Sequence[Concept], answers: Mapping[str, str | list[str]]) -> str:
    """The answers as the model reads them: a heading a concept, a bullet a fact."""
    lines = [FACTS_HEADER]
    for concept in concepts:
        answer = answers[concept.id]
        if isinstance(answer, str):
            shown = answer.replace("\n", "\n  ") or "(nothing recorded)"
            lines.append(f"- {concept.label}: {shown}")
            continue
        lines.append(f"- {concept.label}:" + ("" if answer else " (nothing recorded)"))
        lines.extend(f"  - {fact}" for fact in answer)
    return "\n".join(lines)


def _ask(prompt: str) -> list[Message]:
    return [{"role": "user", "content": prompt}]


def whole_history(**options: Any) -> Pipeline:
    """Koog's whole-history TL;DR: the last 10 messages verbatim once past 200 messages or 200K characters."""
    return Pipeline([WholeHistory(**options)], name="whole-history")


def retrieve_facts(concepts: Sequence[Concept] = CODE_AGENT_CONCEPTS, **options: Any) -> Pipeline:
    """Koog's retrieve-facts compression, with the code-agent concepts unless others are given."""
    return Pipeline([RetrieveFacts(concepts, **options)], name="retrieve-facts")


def code_agent(**options: Any) -> Pipeline:
    """Koog's code-agent configuration: retrieve facts on the five code-agent concepts."""
    return Pipeline(
        [RetrieveFacts(CODE_AGENT_CONCEPTS, **options)],
        name="code-agent",
    )
