"""contextfold: keep an LLM chat or agent inside its context window.

The raw conversation is an append-only log; each view folds old parts into
summaries, facts and placeholders, and ``render`` gives every model call a
prompt that fits its budget.
"""

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
from contextfold.store import MemoryStore, Store
from contextfold.strategies.base import Job, Strategy, ViewState
from contextfold.strategies.keep_recent import KeepRecent
from contextfold.strategies.masking import ObservationMasking
from contextfold.strategies.pipeline import Pipeline
from contextfold.strategies.presets import get_preset, preset_names, register_preset
from contextfold.tokens import TokenCounter, get_counter

__all__ = [
    "BudgetError",
    "CompactionReport",
    "ContextfoldError",
    "Entry",
    "Fold",
    "FoldConflict",
    "InvalidInput",
    "Job",
    "KeepRecent",
    "LoggedMessage",
    "Memory",
    "MemoryStore",
    "Message",
    "ModelError",
    "NotFound",
    "ObservationMasking",
    "Pipeline",
    "Rendered",
    "Session",
    "Store",
    "StoreError",
    "Strategy",
    "TokenCounter",
    "View",
    "ViewState",
    "get_counter",
    "get_preset",
    "preset_names",
    "register_preset",
    "render",
    "validate_messages",
]
