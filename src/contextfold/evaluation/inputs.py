"""Read the conversations to evaluate: a conversation file, or a ChatGPT data export.

JSON and JSONL files are read by the one conversation-file reader
(``contextfold.memory.conversation_file``: a list of messages or an object with
``messages`` and optional ``questions``, one per file or one a line). A
ChatGPT export is its ``conversations.json`` (a list of conversations with a
``mapping``) or the export's ``.zip`` (``chatgpt``). Errors name the line and
the field; nothing is read in part.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from contextfold.evaluation.chatgpt import export_conversations, is_export, read_export_zip
from contextfold.memory.conversation_file import (
    FileConversation,
    conversation_of,
    open_conversations,
)


@dataclass(frozen=True)
class Inputs:
    """What was read: the conversations, the file's format, and what was left out by reason."""

    conversations: list[FileConversation]
    format: str
    skipped: dict[str, int] = field(default_factory=dict)


def load_conversations(path: str | Path, *, limit: int | None = None) -> Inputs:
    """The conversations of ``path`` (the first ``limit`` of a JSONL file or an export)."""
    p = Path(path)
    if p.suffix == ".zip":
        return _from_export(read_export_zip(p), f"{p}", limit)
    read = open_conversations(p)
    if read.lines is None and is_export(read.document):
        return _from_export(read.document, str(p), limit)
    return Inputs(read.conversations(limit=limit), read.format)


def _from_export(data: Any, where: str, limit: int | None) -> Inputs:
    skipped: Counter[str] = Counter()
    found = export_conversations(data, where, skipped)
    conversations = []
    for i, exported in enumerate(found[:limit]):
        place = f"{where}, conversation {exported.id!r}"
        conversation = conversation_of(exported.messages, place, f"conversations[{i}]", place)
        conversations.append(replace(conversation, id=exported.id, title=exported.title))
    return Inputs(conversations, "ChatGPT export", dict(sorted(skipped.items())))
