"""Conversations read from a file: the one reader behind ``contextfold compact`` and ``eval``.

A file holds JSON or JSONL, or is a ChatGPT data export (its
``conversations.json``, or the export's ``.zip``; ``memory.chatgpt_export``),
whose conversations keep their whole tree of branches (``tree``). A JSON file
is one conversation; a JSONL file (or a ``.json`` file whose first line is a
whole JSON value followed by more) is one conversation a line, blank lines
skipped. Each conversation, whole file or
line, is a list of messages or an object with a ``messages`` list and
optionally an ``id`` and ``questions`` (``{"question": ..., "answer": ...,
"category"?: ...}``, the ``../shared/data`` layout; a question without a gold
answer is skipped). Every error is an ``InvalidInput`` naming the file and the
line and column, or the line, message index and field; nothing is read in part.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message, validate_messages
from contextfold.memory.chatgpt_export import (
    Tree,
    export_conversations,
    is_export,
    read_export_zip,
)


@dataclass(frozen=True)
class FileConversation:
    """One conversation read from a file.

    ``id`` is the conversation's own ``id``, else the file's stem (a JSON file)
    or ``line N`` (a JSONL line); ``source`` says where it was read (the file,
    and ``:N`` for a line); ``questions`` are those with a gold answer.
    """

    id: str
    messages: list[Message]
    source: str
    questions: list[dict[str, Any]] = field(default_factory=list)
    title: str | None = None
    tree: Tree = ()
    """Every branch of an export's conversation, ``messages`` (the current one) last;
    empty for a file that holds one line of messages (``Session.extend_tree``)."""


@dataclass(frozen=True)
class ConversationsFile:
    """A file read and parsed, not yet taken apart: one JSON ``document``, or JSONL ``lines``.

    ``lines`` are the non-blank lines with their numbers from 1, each parsed
    only when its conversation is asked for.
    """

    path: Path
    document: Any = None
    lines: list[tuple[int, str]] | None = None

    @property
    def format(self) -> str:
        if self.lines is None:
            return "ChatGPT export" if is_export(self.document) else "JSON"
        return "JSONL"

    def conversations(
        self, *, limit: int | None = None, skipped: Counter[str] | None = None
    ) -> list[FileConversation]:
        """Every conversation of the file (the first ``limit`` of a JSONL file or an
        export); what an export leaves out is counted in ``skipped`` by reason."""
        if self.lines is None and is_export(self.document):
            return self._exported(limit, Counter() if skipped is None else skipped)
        if self.lines is None:
            return [conversation_of(self.document, str(self.path), self.path.stem, str(self.path))]
        return [self._line(lineno, line) for lineno, line in self.lines[:limit]]

    def _exported(self, limit: int | None, skipped: Counter[str]) -> list[FileConversation]:
        where = str(self.path)
        out = []
        for i, exported in enumerate(export_conversations(self.document, where, skipped)[:limit]):
            place = f"{where}, conversation {exported.id!r}"
            read = conversation_of(exported.messages, place, f"conversations[{i}]", place)
            out.append(replace(read, id=exported.id, title=exported.title, tree=exported.tree))
        return out

    def conversation(self, index: int) -> FileConversation:
        """The conversation at ``index`` (0 for a JSON file; a JSONL file's non-blank line)."""
        if self.lines is None:
            if index:
                raise InvalidInput(
                    f"{self.path} holds one conversation: --index picks a line of a JSONL file",
                    field="index",
                )
            return self.conversations()[0]
        if index >= len(self.lines):
            raise InvalidInput(
                f"{self.path}: --index {index} is out of range, the file holds "
                f"{len(self.lines)} conversations",
                field="index",
            )
        return self._line(*self.lines[index])

    def _line(self, lineno: int, line: str) -> FileConversation:
        where = f"{self.path}, line {lineno}"
        try:
            data = _json(line, where)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"{where}: malformed JSON at column {exc.colno}: {exc.msg}") from exc
        return conversation_of(data, where, f"line {lineno}", f"{self.path}:{lineno}")


def open_conversations(path: str | Path) -> ConversationsFile:
    """Read ``path`` and tell JSON from JSONL; refuses a file that is neither, or empty."""
    if not isinstance(path, str | os.PathLike):
        raise InvalidInput(
            f"path must be a string or a path, not {type(path).__name__}", field="path"
        )
    p = Path(path)
    if p.suffix == ".zip":
        return ConversationsFile(p, document=read_export_zip(p))
    text = read_text(p)
    if not text.strip():
        raise InvalidInput(f"{p}: the file is empty", field="messages")
    if p.suffix == ".jsonl":
        return ConversationsFile(p, lines=_lines(text))
    try:
        return ConversationsFile(p, document=_json(text, str(p)))
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data" and _parses(text.split("\n", 1)[0]):
            return ConversationsFile(p, lines=_lines(text))
        raise InvalidInput(
            f"{p}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from exc


def load_conversation(path: str | Path, *, index: int | None = None) -> FileConversation:
    """One conversation of ``path``; ``index`` picks a line of a JSONL file (default the first)."""
    if index is not None and (isinstance(index, bool) or not isinstance(index, int)):
        raise InvalidInput(f"--index must be a whole number, not {index!r}", field="index")
    if index is not None and index < 0:
        raise InvalidInput(f"--index must be 0 or more, got {index}", field="index")
    return open_conversations(path).conversation(index or 0)


def read_text(p: Path) -> str:
    """A conversation file's text; ``InvalidInput`` naming the file when it cannot be read."""
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{p}: not UTF-8 text (byte {exc.start})") from exc
    except OSError as exc:
        raise InvalidInput(f"cannot read {p}: {exc.strerror or exc}") from exc


def conversation_of(data: Any, where: str, default_id: str, source: str) -> FileConversation:
    """``data`` (a list of messages, or an object with ``messages``) as a conversation.

    Errors are prefixed with ``where``; ``default_id`` names a conversation
    that has no ``id`` of its own.
    """
    conv_id, questions = default_id, []
    if isinstance(data, Mapping):
        if data.get("id") is not None:
            conv_id = str(data["id"])
        questions = _questions(data.get("questions", []), where)
        data = data.get("messages")
    if not isinstance(data, list):
        raise InvalidInput(
            f"{where}: expected a list of messages or an object with a 'messages' list",
            field="messages",
        )
    try:
        messages = validate_messages(data)
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc}") from exc
    if not messages:
        raise InvalidInput(f"{where}: the conversation has no messages", field="messages")
    return FileConversation(conv_id, messages, source, questions)


def _lines(text: str) -> list[tuple[int, str]]:
    return [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]


def _json(text: str, where: str) -> Any:
    """``json.loads``, with the JSON it cannot take as data refused by name.

    ``json.JSONDecodeError`` passes through for the caller to place; nesting
    too deep for the parser and integers too long to read are ``InvalidInput``.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise InvalidInput(f"{where}: JSON nested too deeply to read") from None
    except ValueError as exc:  # an integer over Python's 4,300-digit limit
        raise InvalidInput(f"{where}: JSON holds a value that cannot be read: {exc}") from None


def _parses(text: str) -> bool:
    try:
        _json(text, "")
    except (json.JSONDecodeError, InvalidInput):
        return False
    return True


def _questions(raw: Any, where: str) -> list[dict[str, Any]]:
    """The questions that have a gold answer; a question without one (null) is skipped."""
    if not isinstance(raw, list):
        raise InvalidInput(f"{where}: field 'questions': expected a list")
    kept: list[dict[str, Any]] = []
    for i, q in enumerate(raw):
        name = f"questions[{i}]"
        if not isinstance(q, Mapping):
            raise InvalidInput(f"{where}: field '{name}': expected an object")
        if not isinstance(q.get("question"), str):
            raise InvalidInput(f"{where}: field '{name}.question': expected a string")
        answer = q.get("answer")
        if answer is None or answer == "":
            continue
        if isinstance(answer, bool) or not isinstance(answer, str | int | float):
            raise InvalidInput(f"{where}: field '{name}.answer': expected a string or a number")
        category = q.get("category")
        if category is not None and (isinstance(category, bool) or not isinstance(category, int)):
            raise InvalidInput(f"{where}: field '{name}.category': expected a whole number")
        kept.append({"question": q["question"], "answer": answer, "category": category})
    return kept
