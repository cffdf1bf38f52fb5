"""contextfold: keep an LLM chat or agent inside its context window.

The raw conversation is an append-only log; each view folds old parts into
summaries, facts and placeholders, and ``render`` gives every model call a
prompt that fits its budget.

This is the curated face of the package: what a user needs to open sessions,
configure and render views, run compaction in the background and handle its
errors. Strategies and triggers are in ``contextfold.strategies``; the layers
underneath (``core``, ``llm``, ``store``, ``memory``, ``runtime``) are importable
too, for those who extend them.
"""

from contextfold.core.branches import Branch
from contextfold.core.errors import (
    BudgetError,
    ContextfoldError,
    FoldConflict,
    InvalidInput,
    MissingExtra,
    ModelError,
    NotFound,
    StoreError,
    ViewConflict,
)
from contextfold.core.events import Event
from contextfold.core.folds import Fold
from contextfold.core.render import Rendered, render
from contextfold.core.tokens import TokenCounter, get_counter
from contextfold.formats.anthropic import to_anthropic
from contextfold.formats.anthropic_read import from_anthropic
from contextfold.formats.checks import check_prompt, prompt_faults
from contextfold.formats.fault import PromptFault
from contextfold.llm import LLM, Completion, Usage, get_model, register_provider
from contextfold.llm.budget import JobLimits, JobStopped
from contextfold.memory.config import ViewConfig
from contextfold.memory.cycle import CompactionReport
from contextfold.memory.matching import Recorded
from contextfold.memory.one_shot import CompactResult, compact_messages
from contextfold.memory.recall_tools import RecallTools
from contextfold.memory.session import Memory, Session
from contextfold.memory.view import View
from contextfold.runtime import (
    AsyncioRunner,
    Cooldown,
    InlineRunner,
    ProcessRunner,
    Stats,
    ThreadRunner,
)
from contextfold.store import Store, open_store, register_store
from contextfold.strategies import get_preset, preset_names, register_preset, register_strategy

__all__ = [
    "LLM",
    "AsyncioRunner",
    "Branch",
    "BudgetError",
    "CompactResult",
    "CompactionReport",
    "Completion",
    "ContextfoldError",
    "Cooldown",
    "Event",
    "Fold",
    "FoldConflict",
    "InlineRunner",
    "InvalidInput",
    "JobLimits",
    "JobStopped",
    "Memory",
    "MissingExtra",
    "ModelError",
    "NotFound",
    "ProcessRunner",
    "PromptFault",
    "RecallTools",
    "Recorded",
    "Rendered",
    "Session",
    "Stats",
    "Store",
    "StoreError",
    "ThreadRunner",
    "TokenCounter",
    "Usage",
    "View",
    "ViewConfig",
    "ViewConflict",
    "check_prompt",
    "compact_messages",
    "from_anthropic",
    "get_counter",
    "get_model",
    "get_preset",
    "open_store",
    "preset_names",
    "prompt_faults",
    "register_preset",
    "register_provider",
    "register_store",
    "register_strategy",
    "render",
    "to_anthropic",
]
