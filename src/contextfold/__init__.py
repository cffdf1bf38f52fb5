"""contextfold: keep an LLM chat or agent inside its context window.

The raw conversation is an append-only log; each view folds old parts into
summaries, facts and placeholders, and ``render`` gives every model call a
prompt that fits its budget.
"""

from contextfold.core.artifacts import extract_artifacts, missing_artifacts
from contextfold.core.convert import from_anthropic, to_anthropic
from contextfold.core.entries import Entry
from contextfold.core.errors import (
    BudgetError,
    ContextfoldError,
    FoldConflict,
    InvalidInput,
    ModelError,
    NotFound,
    StoreError,
)
from contextfold.core.events import Event
from contextfold.core.folds import Fold
from contextfold.core.log import LoggedMessage
from contextfold.core.messages import Message, validate_messages
from contextfold.core.render import Rendered, render
from contextfold.core.tokens import TokenCounter, get_counter
from contextfold.llm import LLM, Completion, Usage, get_model, register_provider
from contextfold.llm.offline import OfflineModel
from contextfold.memory.compact import CompactResult, compact_messages
from contextfold.memory.session import Memory, Session
from contextfold.memory.view import CompactionReport, View
from contextfold.runtime import AsyncioRunner, InlineRunner, Runner, Stats, ThreadRunner
from contextfold.store import RAMStore, SQLiteStore, Store
from contextfold.strategies.base import Job, Strategy, ViewState
from contextfold.strategies.checked import Checked, SummaryRejected, summarize_checked
from contextfold.strategies.extractive import ExtractiveSummary
from contextfold.strategies.goal_batch import GoalBatchCompaction
from contextfold.strategies.keep_recent import KeepRecent
from contextfold.strategies.koog import CODE_AGENT_CONCEPTS, Concept, RetrieveFacts, WholeHistory
from contextfold.strategies.masking import ObservationMasking
from contextfold.strategies.pipeline import Pipeline
from contextfold.strategies.presets import get_preset, preset_names, register_preset
from contextfold.strategies.rolling import RollingCompactor
from contextfold.strategies.round_compressor import RoundCompressor
from contextfold.strategies.threshold import ThresholdSummarization
from contextfold.strategies.token_budget import TokenBudget
from contextfold.strategies.tool_calls import ToolCallSummarization
from contextfold.strategies.triggers import (
    Always,
    Characters,
    Messages,
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
    "LLM",
    "Always",
    "AsyncioRunner",
    "BudgetError",
    "Characters",
    "Checked",
    "CompactResult",
    "CompactionReport",
    "Completion",
    "Concept",
    "ContextfoldError",
    "Entry",
    "Event",
    "ExtractiveSummary",
    "Fold",
    "FoldConflict",
    "GoalBatchCompaction",
    "InlineRunner",
    "InvalidInput",
    "Job",
    "KeepRecent",
    "LoggedMessage",
    "Memory",
    "Message",
    "Messages",
    "ModelError",
    "Never",
    "NotFound",
    "ObservationMasking",
    "OfflineModel",
    "OverBudget",
    "Pipeline",
    "Predicate",
    "RAMStore",
    "Rendered",
    "RetrieveFacts",
    "RollingCompactor",
    "RoundCompressor",
    "Rounds",
    "Runner",
    "SQLiteStore",
    "Session",
    "Stats",
    "Store",
    "StoreError",
    "Strategy",
    "SummaryRejected",
    "ThreadRunner",
    "ThresholdSummarization",
    "TokenBudget",
    "TokenCounter",
    "Tokens",
    "ToolCallSummarization",
    "Trigger",
    "UnfoldedRounds",
    "Usage",
    "View",
    "ViewState",
    "WholeHistory",
    "compact_messages",
    "extract_artifacts",
    "from_anthropic",
    "get_counter",
    "get_model",
    "get_preset",
    "missing_artifacts",
    "preset_names",
    "register_preset",
    "register_provider",
    "render",
    "summarize_checked",
    "to_anthropic",
    "validate_messages",
]
