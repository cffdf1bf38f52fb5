"""The hooks of TaskWeaver's compaction redesign (seed 000), on contextfold.

Code written against the seed runs as written::

    memory = Memory("session-1")
    compactor = ContextCompactor(
        config=CompactorConfig(threshold=10, retain_recent=3,
                               prompt_template_path="planner_compaction_prompt.txt"),
        llm_api=get_model("openai:gpt-4o-mini"),
        rounds_getter=lambda: memory.conversation.rounds,
    )
    memory.register_compaction_provider("Planner", compactor)
    compactor.start()
    ...
    rounds, compaction = memory.get_role_rounds("Planner")
    # [system] + [compaction.to_system_message()] + rounds[compaction.end_index:]

How it maps onto contextfold (see ``rounds``, ``compactor``, ``memory``):

- ``Memory`` wraps a contextfold ``Session``: one TaskWeaver round is one
  contextfold round (its query a user message, each post an assistant message
  named after its sender). ``conversation.rounds`` is never modified by
  compaction; the log is never edited.
- each ``ContextCompactor`` folds its own ``View`` (named after its role, with
  its role's filter, prompt and model) with ``RollingCompactor`` on a
  background ``ThreadRunner``; views of one memory share the log and never see
  each other's folds. ``CompactedMessage`` indices are 1-based round numbers.
- ``load_config`` reads the seed's ``compaction.*`` and
  ``<role>.compaction_prompt_path`` keys from JSON or TOML.
"""

from contextfold.integrations.taskweaver.compactor import (
    CompactedMessage,
    CompactionProvider,
    CompactorConfig,
    ContextCompactor,
    read_prompt,
)
from contextfold.integrations.taskweaver.config import CompactionSettings, load_config
from contextfold.integrations.taskweaver.memory import Memory, TaskWeaverConversation
from contextfold.integrations.taskweaver.rounds import Post, Round, RoundLog

__all__ = [
    "CompactedMessage",
    "CompactionProvider",
    "CompactionSettings",
    "CompactorConfig",
    "ContextCompactor",
    "Memory",
    "Post",
    "Round",
    "RoundLog",
    "TaskWeaverConversation",
    "load_config",
    "read_prompt",
]
