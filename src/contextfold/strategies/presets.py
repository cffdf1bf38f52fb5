"""Named setups, and the built-ins registered as a third party's would be.

A preset is a function returning a ``Pipeline``; options are passed through, so
``get_preset("offline", keep_last=3)`` tunes the masking step. Each is
registered with a one-line description and whether its strategies call a model
(``describe_presets``): the one source that ``contextfold presets``, the docs
and the page read. ``DEFAULT_PRESET`` is what a view gets when it is created
without a preset or a pipeline, in the library, the service and the proxy.
The bottom of this module registers every built-in strategy, trigger and
preset by name, so a view stored with them can be rebuilt in any process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.strategies import triggers
from contextfold.strategies.extractive import ExtractiveSummary
from contextfold.strategies.goal_batch import GoalBatchCompaction
from contextfold.strategies.keep_recent import KeepRecent
from contextfold.strategies.koog import (
    Concept,
    RetrieveFacts,
    WholeHistory,
    code_agent,
    retrieve_facts,
)
from contextfold.strategies.masking import ObservationMasking
from contextfold.strategies.pipeline import Pipeline
from contextfold.strategies.provider_compaction import TYPE_NAME, ProviderCompaction
from contextfold.strategies.registry import register_strategy, register_type
from contextfold.strategies.rolling import RollingCompactor
from contextfold.strategies.round_compressor import RoundCompressor
from contextfold.strategies.task_state import TaskStateSummary
from contextfold.strategies.threshold import ThresholdSummarization
from contextfold.strategies.token_budget import TokenBudget, token_budget
from contextfold.strategies.tool_calls import ToolCallSummarization
from contextfold.strategies.triggers import OverBudget
from contextfold.strategies.working_set import Kind

PresetFactory = Callable[..., Pipeline]
DEFAULT_PRESET = "offline"
"""The preset of a view created without ``preset=`` or ``pipeline=``: folds with no model."""
AGENT_PRESET = "task-state"
"""The preset of an agent's view with a model, when none is named (``default_preset``)."""
CHAT_PRESET = "chat"
"""The preset of a chat's view with a model, when none is named (``default_preset``)."""


@dataclass(frozen=True)
class PresetInfo:
    """What a user reads about a preset before choosing it."""

    name: str
    description: str
    model: bool
    """Its strategies call a model (the offline stand-in when none is configured)."""


_PRESETS: dict[str, tuple[PresetFactory, PresetInfo]] = {}


def register_preset(
    name: str, factory: PresetFactory, *, description: str | None = None, model: bool = True
) -> None:
    """Make ``factory`` available as ``get_preset(name)`` and ``--preset name``.

    ``description`` defaults to the first line of the factory's docstring;
    ``model`` says whether its strategies call a model (say False only when none does).
    """
    text = description if description is not None else (factory.__doc__ or "").strip()
    _PRESETS[name] = (factory, PresetInfo(name, text.splitlines()[0] if text else "", model))


def describe_presets() -> list[PresetInfo]:
    """Every registered preset, by name, with its description and whether it calls a model."""
    return [_PRESETS[name][1] for name in preset_names()]


def check_preset(name: str) -> None:
    """Refuse a name no preset is registered under, naming the ones that are."""
    if name not in _PRESETS:
        raise InvalidInput(
            f"unknown preset {name!r} (expected one of {', '.join(preset_names())})", field="preset"
        )


def get_preset(name: str, **options: Any) -> Pipeline:
    check_preset(name)
    factory, _ = _PRESETS[name]
    try:
        return factory(**options)
    except TypeError as exc:
        raise InvalidInput(f"preset {name!r}: {exc}", field="preset") from exc


def preset_names() -> list[str]:
    return sorted(_PRESETS)


def default_preset(*, model: bool, agent: bool) -> str:
    """The preset a view gets when its creator names none.

    Without a model, ``offline``. With one, an agent (tools, tool calls, an
    agent framework) gets ``task-state``, which keeps what it was doing, and a
    chat gets ``chat``, which recalls what was said. ``Memory.view()`` alone
    keeps ``DEFAULT_PRESET``; the proxy and the agent adapters choose here.
    """
    if not model:
        return DEFAULT_PRESET
    return AGENT_PRESET if agent else CHAT_PRESET


def offline(
    *,
    keep_last: int = 5,
    exclude_tools: tuple[str, ...] = (),
    kind: Kind | None = None,
    recent_share: float | None = None,
    **extractive: Any,
) -> Pipeline:
    """The default: mask old tool output, then fold old rounds extractively, and recall
    what was folded away (``contextfold.memory.recall``). No model.

    The newest rounds stay verbatim, tool results whole (``strategies.working_set``):
    ``recent_share`` of the room, else the share of the view's ``kind`` (``"chat"`` or
    ``"agent"``; read from the view when not given: tool calls make it an agent's)."""
    return Pipeline(
        [
            ObservationMasking(
                keep_last=keep_last,
                exclude_tools=exclude_tools,
                trigger=OverBudget(),
                working_set=True,
                kind=kind,
                recent_share=recent_share,
            ),
            ExtractiveSummary(kind=kind, recent_share=recent_share, **extractive),
        ],
        name="offline",
        recall=True,
    )


def task_state(
    *, keep_last: int = 5, exclude_tools: tuple[str, ...] = (), **options: Any
) -> Pipeline:
    """An agent's setup: mask old tool output, keep one task state of the folded work
    (``TaskStateSummary``), and recall what was folded."""
    return Pipeline(
        [
            ObservationMasking(
                keep_last=keep_last, exclude_tools=exclude_tools, trigger=OverBudget()
            ),
            TaskStateSummary(**options),
        ],
        name="task-state",
        recall=True,
    )


def chat(**options: Any) -> Pipeline:
    """The token budget of the chat-backend memory plan, recalling from the log."""
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
    "task-state": TaskStateSummary,
    "retrieve-facts": RetrieveFacts,
    TYPE_NAME: ProviderCompaction,
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

register_preset(
    "offline",
    offline,
    description="Masks old tool output, folds old rounds into an extractive summary, recalls "
    "what was folded.",
    model=False,
)
register_preset(
    "keep-recent",
    keep_recent,
    description="Drops the oldest messages until the prompt fits: the baseline.",
    model=False,
)
register_preset(
    "disabled",
    disabled,
    description="Never folds; render's last-resort cut keeps the prompt within the budget.",
    model=False,
)
register_preset(
    "round-compressor",
    single(RoundCompressor, "round-compressor"),
    description="TaskWeaver prompt compression: old rounds become a JSON summary (deprecated).",
)
register_preset(
    "rolling",
    single(RollingCompactor, "rolling"),
    description="The TaskWeaver compactor design: one rolling summary of all but the newest "
    "rounds.",
)
register_preset(
    "tool-calls",
    single(ToolCallSummarization, "tool-calls"),
    description="Old tool calls and their results, a batch at a time, become [SUMMARIZED] folds.",
)
register_preset(
    "threshold",
    single(ThresholdSummarization, "threshold"),
    description="Above a threshold, old assistant blocks become [SUMMARIZED] folds.",
)
register_preset(
    "goal-batch",
    single(GoalBatchCompaction, "goal-batch"),
    description="ADR-0041 goal batches: runs of old complete turns become one [GOAL BATCH].",
)
register_preset(
    "adr-0041",
    adr_0041,
    description="ADR-0041's three tiers: tool calls, then threshold, then goal batches.",
)
register_preset(
    "token-budget",
    token_budget,
    description="The chat-backend memory plan: important data plus a growing summary.",
)
register_preset(
    "whole-history",
    single(WholeHistory, "whole-history"),
    description="Koog-style history compression: all but the last messages become one TL;DR.",
)
register_preset(
    "retrieve-facts",
    retrieve_facts,
    description="Koog-style retrieve-facts: old messages become answers to concept questions.",
)
register_preset(
    "code-agent",
    code_agent,
    description="Koog's code-agent setup: retrieve-facts on the five code-agent concepts.",
)
register_preset(
    "taskweaver",
    single(RollingCompactor, "taskweaver"),
    description="The TaskWeaver compactor design under its own name (the rolling compactor).",
)
register_preset(
    "task-state",
    task_state,
    description="An agent's task state (files, decisions, errors, next step), merged fold by fold.",
)
register_preset(
    "chat",
    chat,
    description="The token budget, recalling from the log: a chat asks about its past.",
)
