"""Replay one conversation into a RAM ``Memory`` and measure each preset x budget.

The messages are appended in order; at a sample of turns (evenly spaced, the
last one the end of the conversation) every view is compacted as a runner
would and its prompt rendered and timed. The figures that need the whole
conversation (tokens after, folds, answer recall) are read at the end.
Budgets in percent are of the full conversation's tokens, so early turns may
fit without folding, as they would in real use.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextfold.core.errors import BudgetError, InvalidInput
from contextfold.evaluation.budgets import Budget
from contextfold.evaluation.inputs import Conversation
from contextfold.evaluation.retention import answer_keys, prompt_words, recall
from contextfold.llm.offline import OFFLINE
from contextfold.memory.session import Memory

StepCallback = Callable[[], None]
"""Called once per sampled turn of a conversation (for a progress bar)."""


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
    render_seconds: list[float] = field(default_factory=list)
    recalls: list[float] = field(default_factory=list)


@dataclass
class ConversationResult:
    """The full conversation's figures and one ``ArmResult`` per preset x budget."""

    id: str
    messages: int
    tokens: int
    full_recalls: list[float]
    arms: list[ArmResult]


def _count_usage(arm: ArmResult, usage: Mapping[str, Any] | None) -> None:
    if usage is None:
        return
    calls = int(usage.get("calls", 0))
    if usage.get("model") == OFFLINE:
        arm.stand_in_calls += calls
        return
    arm.model_calls += calls
    arm.model_tokens += int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))


def sample_turns(messages: int, samples: int) -> list[int]:
    """Up to ``samples`` prefix lengths spread evenly over the conversation, ending at it."""
    cuts = {max(1, -(-messages * k // samples)) for k in range(1, samples + 1)}
    return sorted(cuts)


def replay(
    conversation: Conversation,
    presets: Sequence[str],
    budgets: Sequence[Budget],
    *,
    samples: int = 10,
    encoding: str = "o200k_base",
    on_step: StepCallback | None = None,
) -> ConversationResult:
    """Replay ``conversation`` through every preset x budget; see the module docstring."""
    memory = Memory(encoding=encoding)
    whole = memory.session("full")
    whole.extend(conversation.messages)
    full_view = whole.view("full")
    full_tokens = full_view.state().tokens
    keys = answer_keys(conversation.messages, conversation.questions)
    full_words = prompt_words(full_view.render())
    full_recalls = [recall(k, full_words) for k in keys]

    session = memory.session("replay")
    arms: list[ArmResult] = []
    views = []
    for preset in presets:
        for budget in budgets:
            tokens = budget.for_conversation(full_tokens)
            arm = ArmResult(preset, budget.label, tokens)
            arms.append(arm)
            views.append(session.view(f"{preset}@{budget.label}", preset=preset, budget=tokens))
    logged = 0
    for cut in sample_turns(len(conversation.messages), samples):
        session.extend(conversation.messages[logged:cut])
        logged = cut
        for arm, view in zip(arms, views, strict=True):
            try:
                report = view.compact()
            except BudgetError as exc:
                raise InvalidInput(
                    f"conversation {conversation.id!r}, preset {arm.preset!r}, "
                    f"budget {arm.budget}: {exc}",
                    field="budgets",
                ) from exc
            arm.folds_made += len(report.folds)
            for fold in report.folds:
                _count_usage(arm, fold.usage)
            start = time.perf_counter()
            rendered = view.render_report()
            arm.render_seconds.append(time.perf_counter() - start)
            if cut == len(conversation.messages):
                arm.tokens_after = rendered.tokens
                arm.folds = len(view.folds())
                seen = prompt_words(rendered.messages)
                arm.recalls = [recall(k, seen) for k in keys]
        if on_step is not None:
            on_step()
    return ConversationResult(
        conversation.id, len(conversation.messages), full_tokens, full_recalls, arms
    )
