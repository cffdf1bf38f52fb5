"""Named setups, and the built-ins registered as a third party's would be.

A preset is a function returning a ``Pipeline``; options are passed through, so
``get_preset("offline", keep_last=3)`` tunes the masking step. The bottom of
this module registers every built-in strategy, trigger and preset by name, so
a view stored with them can be rebuilt in any process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.strategies import triggers
from contextfold.strategies.extractive import ExtractiveSummary
from contextfold.strategies.goal_batch import GoalBatchCompaction
from contextfold.strategies.keep_recent import KeepRecent
from contextfold.strategies.koog import (
    CODE_AGENT_CONCEPTS,
    Concept,
    RetrieveFacts,
    WholeHistory,
    code_agent,
)
from contextfold.strategies.masking import ObservationMasking
from contextfold.strategies.pipeline import Pipeline
from contextfold.strategies.registry import register_strategy, register_type
from contextfold.strategies.rolling import RollingCompactor
from contextfold.strategies.round_compressor import RoundCompressor
from contextfold.strategies.threshold import ThresholdSummarization
from contextfold.strategies.token_budget import TokenBudget, token_budget
from contextfold.strategies.tool_calls import ToolCallSummarization
from contextfold.strategies.triggers import OverBudget

PresetFactory = Callable[..., Pipeline]
_PRESETS: dict[str, PresetFactory] = {}


def register_preset(name: str, factory: PresetFactory) -> None:
    """Make ``factory`` available as ``get_preset(name)`` and ``--preset name``."""
    _PRESETS[name] = factory


def get_preset(name: str, **options: Any) -> Pipeline:
    try:
        factory = _PRESETS[name]
    except KeyError:
        raise InvalidInput(
            f"unknown preset {name!r} (expected one of {', '.join(preset_names())})", field="preset"
        ) from None
    try:
        return factory(**options)
    except TypeError as exc:
        raise InvalidInput(f"preset {name!r}: {exc}", field="preset") from exc


def preset_names() -> list[str]:
    return sorted(_PRESETS)


def offline(
    *, keep_last: int = 5, exclude_tools: tuple[str, ...] = (), **extractive: Any
) -> Pipeline:
    """The default: mask old tool output, then fold old rounds extractively, and recall
    what was folded away (``contextfold.memory.recall``). No model."""
    return Pipeline(
        [
            ObservationMasking(
                keep_last=keep_last, exclude_tools=exclude_tools, trigger=OverBudget()
            ),
            ExtractiveSummary(**extractive),
        ],
        name="offline",
        recall=True,
    )


def chat(**options: Any) -> Pipeline:
    """The seed-003 token budget, recalling from the log: a chat asks about its past."""
    return Pipeline(token_budget(**options).strategies, name="token-budget", recall=True)


def keep_recent() -> Pipeline:
    """Drop the oldest messages until the prompt fits: the baseline."""
    return Pipeline([KeepRecent()], name="keep-recent")


def disabled() -> Pipeline:
    """Never folds; render's last-resort cut still keeps the prompt within budget."""
    return Pipeline([], name="disabled")


def single(strategy: Callable[..., Any], name: str) -> PresetFactory:
    """A preset of one strategy, its options passed through."""

    def factory(**options: Any) -> Pipeline:
        return Pipeline([strategy(**options)], name=name)

    factory.__doc__ = f"{strategy.__name__} alone."
    return factory


def adr_0041(
    *,
    tool_calls: dict[str, Any] | None = None,
    threshold: dict[str, Any] | None = None,
    goal_batch: dict[str, Any] | None = None,
) -> Pipeline:
    """ADR-0041's order: tool calls, then threshold, then goal batches (options per step)."""
    return Pipeline(
        [
            ToolCallSummarization(**(tool_calls or {})),
            ThresholdSummarization(**(threshold or {})),
            GoalBatchCompaction(**(goal_batch or {})),
        ],
        name="adr-0041",
    )


def retrieve_facts(**options: Any) -> Pipeline:
    """Koog's retrieve-facts, with the code-agent concepts unless ``concepts`` is given."""
    options.setdefault("concepts", CODE_AGENT_CONCEPTS)
    return Pipeline([RetrieveFacts(**options)], name="retrieve-facts")


for _type_name, _cls in {
    "masking": ObservationMasking,
    "extractive": ExtractiveSummary,
    "keep-recent": KeepRecent,
    "round-compressor": RoundCompressor,
    "rolling": RollingCompactor,
    "tool-calls": ToolCallSummarization,
    "threshold": ThresholdSummarization,
    "goal-batch": GoalBatchCompaction,
    "token-budget": TokenBudget,
    "whole-history": WholeHistory,
    "retrieve-facts": RetrieveFacts,
}.items():
    register_strategy(_type_name, _cls)
for _tag, _trigger in {
    "tokens": triggers.Tokens,
    "messages": triggers.MessageCount,
    "characters": triggers.Characters,
    "rounds": triggers.Rounds,
    "unfolded-rounds": triggers.UnfoldedRounds,
    "over-budget": triggers.OverBudget,
    "always": triggers.Always,
    "never": triggers.Never,
    "any": triggers.AnyOf,
    "all": triggers.AllOf,
}.items():
    register_type(_tag, _trigger)
register_type("concept", Concept)

register_preset("offline", offline)
register_preset("keep-recent", keep_recent)
register_preset("disabled", disabled)
register_preset("round-compressor", single(RoundCompressor, "round-compressor"))
register_preset("rolling", single(RollingCompactor, "rolling"))
register_preset("tool-calls", single(ToolCallSummarization, "tool-calls"))
register_preset("threshold", single(ThresholdSummarization, "threshold"))
register_preset("goal-batch", single(GoalBatchCompaction, "goal-batch"))
register_preset("adr-0041", adr_0041)
register_preset("token-budget", token_budget)
register_preset("whole-history", single(WholeHistory, "whole-history"))
register_preset("retrieve-facts", retrieve_facts)
register_preset("code-agent", code_agent)
register_preset("taskweaver", single(RollingCompactor, "taskweaver"))
register_preset("chat", chat)
