"""Read the conversations to evaluate: a conversation file, or a ChatGPT data export.

Every file is read by the one conversation-file reader
(``contextfold.memory.conversation_file``): a list of messages or an object with
``messages`` and optional ``questions``, one per file or one a line, or a
ChatGPT export, its ``conversations.json`` (a list of conversations with a
``mapping``) or the export's ``.zip`` (``memory.chatgpt_export``; each
conversation's current branch is evaluated). Errors name the line and the
field; nothing is read in part.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from contextfold.memory.conversation_file import FileConversation, open_conversations


@dataclass(frozen=True)
class Inputs:
    """What was read: the conversations, the file's format, and what was left out by reason."""

    conversations: list[FileConversation]
    format: str
    skipped: dict[str, int] = field(default_factory=dict)


def load_conversations(path: str | Path, *, limit: int | None = None) -> Inputs:
    """The conversations of ``path`` (the first ``limit`` of a JSONL file or an export)."""
    read = open_conversations(Path(path))
    skipped: Counter[str] = Counter()
    found = read.conversations(limit=limit, skipped=skipped)
    return Inputs(found, read.format, dict(sorted(skipped.items())))
