"""contextfold: keep an LLM chat or agent inside its context window.

The raw conversation is an append-only log; each view folds old parts into
summaries, facts and placeholders, and ``render`` gives every model call a
prompt that fits its budget.
"""

from contextfold.artifacts import extract_artifacts, missing_artifacts
from contextfold.compact import CompactResult, compact_messages
from contextfold.convert import from_anthropic, to_anthropic
from contextfold.entries import Entry
from contextfold.errors import (
    BudgetError,
    ContextfoldError,
    FoldConflict,
    InvalidInput,
    ModelError,
    NotFound,
    StoreError,
)
from contextfold.folds import Fold
from contextfold.log import LoggedMessage
from contextfold.messages import Message, validate_messages
from contextfold.render import Rendered, render
from contextfold.session import CompactionReport, Memory, Session, View
from contextfold.store import MemoryStore, SQLiteStore, Store
from contextfold.strategies.base import Job, Strategy, ViewState
from contextfold.strategies.extractive import ExtractiveSummary
from contextfold.strategies.keep_recent import KeepRecent
from contextfold.strategies.masking import ObservationMasking
from contextfold.strategies.pipeline import Pipeline
from contextfold.strategies.presets import get_preset, preset_names, register_preset
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
from contextfold.tokens import TokenCounter, get_counter

__all__ = [
    "Always",
    "BudgetError",
    "Characters",
    "CompactResult",
    "CompactionReport",
    "ContextfoldError",
    "Entry",
    "ExtractiveSummary",
    "Fold",
    "FoldConflict",
    "InvalidInput",
    "Job",
    "KeepRecent",
    "LoggedMessage",
    "Memory",
    "MemoryStore",
    "Message",
    "Messages",
    "ModelError",
    "Never",
    "NotFound",
    "ObservationMasking",
    "OverBudget",
    "Pipeline",
    "Predicate",
    "Rendered",
    "Rounds",
    "SQLiteStore",
    "Session",
    "Store",
    "StoreError",
    "Strategy",
    "TokenCounter",
    "Tokens",
    "Trigger",
    "UnfoldedRounds",
    "View",
    "ViewState",
    "compact_messages",
    "extract_artifacts",
    "from_anthropic",
    "get_counter",
    "get_preset",
    "missing_artifacts",
    "preset_names",
    "register_preset",
    "render",
    "to_anthropic",
    "validate_messages",
]
