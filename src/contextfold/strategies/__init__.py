"""Strategies, triggers and pipelines: the ways a view folds its log.

::

    from contextfold.strategies import ObservationMasking, ExtractiveSummary, OverBudget, Pipeline
    pipeline = Pipeline([ObservationMasking(keep_last=3), ExtractiveSummary(trigger=OverBudget())])

Each built-in is registered by name (``register_strategy``), as a third party's
would be, so a view configured with it can be stored and rebuilt anywhere.
"""

from contextfold.strategies.base import Job, Strategy, ViewState
from contextfold.strategies.extractive import ExtractiveSummary
from contextfold.strategies.goal_batch import GoalBatchCompaction
from contextfold.strategies.keep_recent import KeepRecent
from contextfold.strategies.koog import CODE_AGENT_CONCEPTS, Concept, RetrieveFacts, WholeHistory
from contextfold.strategies.masking import ObservationMasking
from contextfold.strategies.pipeline import Pipeline
from contextfold.strategies.presets import (
    DEFAULT_PRESET,
    PresetInfo,
    default_preset,
    describe_presets,
    get_preset,
    preset_names,
    register_preset,
)
from contextfold.strategies.provider_compaction import ProviderCompaction
from contextfold.strategies.registry import register_strategy, register_type
from contextfold.strategies.rolling import RollingCompactor
from contextfold.strategies.round_compressor import RoundCompressor
from contextfold.strategies.task_state import TaskStateSummary
from contextfold.strategies.threshold import ThresholdSummarization
from contextfold.strategies.token_budget import TokenBudget
from contextfold.strategies.tool_calls import ToolCallSummarization
from contextfold.strategies.triggers import (
    Always,
    Characters,
    MessageCount,
    Never,
    OverBudget,
    Predicate,
    Rounds,
    Tokens,
    Trigger,
    UnfoldedRounds,
)

__all__ = [
    "CODE_AGENT_CONCEPTS",
    "DEFAULT_PRESET",
    "Always",
    "Characters",
    "Concept",
    "ExtractiveSummary",
    "GoalBatchCompaction",
    "Job",
    "KeepRecent",
    "MessageCount",
    "Never",
    "ObservationMasking",
    "OverBudget",
    "Pipeline",
    "Predicate",
    "PresetInfo",
    "ProviderCompaction",
    "RetrieveFacts",
    "RollingCompactor",
    "RoundCompressor",
    "Rounds",
    "Strategy",
    "TaskStateSummary",
    "ThresholdSummarization",
    "TokenBudget",
    "Tokens",
    "ToolCallSummarization",
    "Trigger",
    "UnfoldedRounds",
    "ViewState",
    "WholeHistory",
    "default_preset",
    "describe_presets",
    "get_preset",
    "preset_names",
    "register_preset",
    "register_strategy",
    "register_type",
]
