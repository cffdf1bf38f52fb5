"""Replay one conversation into a RAM ``Memory`` and measure each preset x budget.

The messages are appended in order; at a sample of turns (evenly spaced, the
last one the end of the conversation) every view is compacted as a runner
would and its prompt rendered and timed, and its tokens are kept beside the
full context's (the prompt tokens per turn). The figures that need the whole
conversation (tokens after, folds, answer recall, QA accuracy) are read at
the end. Budgets in percent are of the full conversation's tokens, so early
turns may fit without folding, as they would in real use.

A question is scored (and judged) on the prompt it would be answered from:
for a view that recalls (``offline`` and ``chat`` by default), the final view
rendered again with the question as the query, in its budget less the
question's tokens, since in use the question is the latest user message and
comes out of the same budget; for any other view, its final prompt. A budget
too small for the question too scores the final prompt.

With ``llm`` the views' strategies call it (each arm through its own
``MeteredModel``, so every call is counted, a failed job's too); without it
they run on the offline stand-in, whose calls are counted apart as paid by
no one. ``overshoot_tokens`` is how far over its budget the folded view was at
a sampled turn, before render's last-resort cut: what the strategies alone
failed to fold.

An arm that cannot be run on a conversation at some sampled turn (its budget
is under the system prompt plus the latest user message, which every prompt
must hold: a short chat at a share budget, or a long first message) skips the
whole conversation, with the reason in ``ArmResult.skipped``: the pooled
figures leave it out (its earlier turns too), and one short chat no longer
stops a whole run.

Questions and probes are asked after the replay (``grading``), of the prompts
it hands back: ``ConversationResult.prompts`` (what each arm answers a question
from) and ``full_prompt``; ``folded`` is how many messages come before the
shortest raw tail an arm ends with, the part probes are made from.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextfold.core.errors import BudgetError
from contextfold.core.messages import Message
from contextfold.evaluation.budgets import Budget
from contextfold.evaluation.metered import MeteredModel
from contextfold.evaluation.retention import keyed_questions, prompt_words, recall
from contextfold.llm.base import LLM
from contextfold.llm.offline import OFFLINE
from contextfold.memory.conversation_file import FileConversation
from contextfold.memory.session import Memory
from contextfold.memory.view import View

StepCallback = Callable[[], None]
"""Called once per sampled turn and once per graded question (for a progress bar)."""

Asked = Callable[[Mapping[str, Any]], list[Message]]
"""The prompt an arm answers a question (``{"question": ...}``) from."""

BUDGET_TOO_SMALL = "budget under system prompt + last user message"
"""Why an arm skips a conversation when its budget is below what every render must hold."""


@dataclass
class ArmResult:
    """One preset at one budget over one conversation."""

    preset: str
    budget: str
    budget_tokens: int
    tokens_after: int = 0
    folds: int = 0
    folds_made: int = 0
    model_calls: int = 0
    model_tokens: int = 0
    stand_in_calls: int = 0
    """Calls to the offline stand-in (a rescue summary, say): no model was paid."""
    failed_jobs: int = 0
    overshoot_tokens: int = 0
    cut_renders: int = 0
    """Sampled renders that had to leave out or clip messages to fit the budget."""
    render_seconds: list[float] = field(default_factory=list)
    turn_tokens: list[int] = field(default_factory=list)
    """Prompt tokens rendered at each sampled turn."""
    recalls: list[float] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)
    """The judge's verdict on each graded question (empty without a judge)."""
    skipped: str | None = None
    """Why this arm could not be measured on the conversation (None: it was)."""
    raw_from: int = 0
    """0-based index of the first message of the raw run that ends the final prompt."""

    @property
    def name(self) -> str:
        return f"{self.preset}@{self.budget}"


@dataclass
class ConversationResult:
    """The full conversation's figures and one ``ArmResult`` per preset x budget."""

    id: str
    messages: int
    tokens: int
    full_recalls: list[float]
    arms: list[ArmResult]
    turns: list[int] = field(default_factory=list)
    """The sampled turns: how many messages were logged at each."""
    full_turn_tokens: list[int] = field(default_factory=list)
    """The full context's tokens at each sampled turn."""
    full_correct: list[bool] = field(default_factory=list)
    title: str | None = None
    folded: int = 0
    """Messages before the shortest raw tail an arm ends with (what at least one arm had to
    fold): what probes are made from."""
    audit: list[dict[str, Any]] = field(default_factory=list)
    """Every answer and verdict on a question or probe (``grading``), failures included."""
    full_prompt: list[Message] = field(default_factory=list)
    prompts: list[Asked | None] = field(default_factory=list)
    """Each arm's ``Asked`` (None: skipped); not kept in the results file."""


def _count_stand_in(arm: ArmResult, usage: Mapping[str, Any] | None) -> None:
    if usage is not None and usage.get("model") == OFFLINE:
        arm.stand_in_calls += int(usage.get("calls", 0))


def sample_turns(messages: int, samples: int) -> list[int]:
    """Up to ``samples`` prefix lengths spread evenly over the conversation, ending at it."""
    cuts = {max(1, -(-messages * k // samples)) for k in range(1, samples + 1)}
    return sorted(cuts)


def replay(
    conversation: FileConversation,
    presets: Sequence[str],
    budgets: Sequence[Budget],
    *,
    samples: int = 10,
    encoding: str = "o200k_base",
    llm: LLM | None = None,
    on_step: StepCallback | None = None,
) -> ConversationResult:
    """Replay ``conversation`` through every preset x budget; see the module docstring."""
    memory = Memory(encoding=encoding)
    whole = memory.session("full")
    whole.extend(conversation.messages)
    full_view = whole.view("full")
    full_tokens = full_view.state().tokens
    keyed = keyed_questions(conversation.messages, conversation.questions)
    full_prompt = full_view.render()
    full_words = prompt_words(full_prompt)
    result = ConversationResult(
        conversation.id,
        len(conversation.messages),
        full_tokens,
        [recall(k, full_words) for _, k in keyed],
        [],
        title=conversation.title,
        full_prompt=full_prompt,
    )

    growing = memory.session("growing")
    growing_view = growing.view("full")
    session = memory.session("replay")
    meters: list[MeteredModel | None] = []
    views = []
    for preset in presets:
        for budget in budgets:
            tokens = budget.for_conversation(full_tokens)
            result.arms.append(ArmResult(preset, budget.label, tokens))
            meter = None if llm is None else MeteredModel(llm)
            meters.append(meter)
            name = f"{preset}@{budget.label}"
            views.append(session.view(name, preset=preset, budget=tokens, llm=meter))
    prompts: list[Asked | None] = [None] * len(views)
    logged = 0
    for cut in sample_turns(len(conversation.messages), samples):
        session.extend(conversation.messages[logged:cut])
        growing.extend(conversation.messages[logged:cut])
        logged = cut
        result.turns.append(cut)
        result.full_turn_tokens.append(growing_view.render_report().tokens)
        for i, (arm, view) in enumerate(zip(result.arms, views, strict=True)):
            if arm.skipped is None:
                prompts[i] = _sample(
                    arm, view, final=cut == len(conversation.messages), keyed=keyed, logged=cut
                )
        if on_step is not None:
            on_step()
    for arm, meter in zip(result.arms, meters, strict=True):
        if meter is not None:
            arm.model_calls, arm.model_tokens = meter.calls, meter.tokens
    result.prompts = prompts
    measured = [arm.raw_from for arm in result.arms if arm.skipped is None]
    result.folded = max(measured, default=0)
    return result


def _sample(
    arm: ArmResult,
    view: View,
    *,
    final: bool,
    keyed: Sequence[tuple[Mapping[str, Any], set[str]]],
    logged: int,
) -> Asked | None:
    """Compact and render ``view`` at one sampled turn into ``arm``; at the ``final`` turn,
    score the questions and return what each is asked of. A budget too small to render
    at all marks the arm skipped."""
    try:
        report = view.compact()
        start = time.perf_counter()
        rendered = view.render_report()
        seconds = time.perf_counter() - start
    except BudgetError:
        arm.skipped = BUDGET_TOO_SMALL
        return None
    arm.folds_made += len(report.folds)
    arm.failed_jobs += len(report.failed)
    arm.overshoot_tokens = max(arm.overshoot_tokens, report.tokens_after - arm.budget_tokens)
    for fold in report.folds:
        _count_stand_in(arm, fold.usage)
    arm.render_seconds.append(seconds)
    arm.turn_tokens.append(rendered.tokens)
    arm.cut_renders += bool(rendered.omitted or rendered.clipped)
    if not final:
        return None
    arm.tokens_after = rendered.tokens
    arm.folds = len(view.folds())
    arm.raw_from = _raw_from(rendered.shown, logged)
    asked = _asker(view, rendered.messages, arm.budget_tokens)
    arm.recalls = [recall(k, prompt_words(asked(q))) for q, k in keyed]
    return asked


def _raw_from(shown: Sequence[int], last: int) -> int:
    """The 0-based index where the run of raw messages ending the prompt starts (seqs
    count from 1 in a log replayed in order)."""
    seqs = set(shown)
    first = last + 1
    while first - 1 in seqs:
        first -= 1
    return first - 1


def asked_prompt(view: View, question: str, budget: int) -> list[Message] | None:
    """The prompt a recalling ``view`` gives ``question`` as the latest user message: the
    question as the query, its tokens out of ``budget``; None when the budget cannot
    hold the question too."""
    room = budget - view.session.counter.message({"role": "user", "content": question})
    try:
        return view.render_report(room, query=question).messages if room > 0 else None
    except BudgetError:
        return None


def _asker(view: View, final: list[Message], budget: int) -> Asked:
    """The prompt each question is answered from (see the module docstring)."""
    if view.config.recall_settings is None:
        return lambda question: final
    return lambda question: asked_prompt(view, str(question["question"]), budget) or final
