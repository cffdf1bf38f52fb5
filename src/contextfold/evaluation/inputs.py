"""Read the conversations to evaluate: OpenAI-format JSON or JSONL, with optional
questions, or a ChatGPT data export.

A JSON file holds one conversation: a list of messages, or an object with a
``messages`` list. A JSONL file holds one object a line with ``messages`` and
optionally ``questions`` (``{"question": ..., "answer": ..., "category"?: ...}``,
the ``../shared/data`` layout). A ChatGPT export is its ``conversations.json``
(a list of conversations with a ``mapping``) or the export's ``.zip``
(``chatgpt``). Errors name the line and the field; nothing is read in part.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message, validate_messages
from contextfold.evaluation.chatgpt import export_conversations, is_export, read_export_zip
from contextfold.memory.one_shot import read_text


@dataclass(frozen=True)
class Conversation:
    """One conversation to replay, and the questions with a gold answer asked of it."""

    id: str
    messages: list[Message]
    questions: list[dict[str, Any]] = field(default_factory=list)
    title: str | None = None


@dataclass(frozen=True)
class Inputs:
    """What was read: the conversations, the file's format, and what was left out by reason."""

    conversations: list[Conversation]
    format: str
    skipped: dict[str, int] = field(default_factory=dict)


def load_conversations(path: str | Path, *, limit: int | None = None) -> Inputs:
    """The conversations of ``path`` (the first ``limit`` of a JSONL file or an export)."""
    p = Path(path)
    if p.suffix == ".zip":
        return _from_export(read_export_zip(p), f"{p}", limit)
    text = read_text(p)
    if not text.strip():
        raise InvalidInput(f"{p}: the file is empty")
    if p.suffix != ".jsonl":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            if exc.msg != "Extra data":
                raise InvalidInput(
                    f"{p}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
                ) from exc
        else:
            if is_export(data):
                return _from_export(data, str(p), limit)
            return Inputs([_conversation(data, str(p), p.stem)], "JSON")
    return Inputs(_from_jsonl(p, text, limit), "JSONL")


def _from_export(data: Any, where: str, limit: int | None) -> Inputs:
    skipped: Counter[str] = Counter()
    found = export_conversations(data, where, skipped)
    conversations = []
    for i, exported in enumerate(found[:limit]):
        place = f"{where}, conversation {exported.id!r}"
        conversation = _conversation(exported.messages, place, f"conversations[{i}]")
        conversations.append(Conversation(exported.id, conversation.messages, title=exported.title))
    return Inputs(conversations, "ChatGPT export", dict(sorted(skipped.items())))


def _from_jsonl(p: Path, text: str, limit: int | None) -> list[Conversation]:
    found: list[Conversation] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if limit is not None and len(found) >= limit:
            break
        if not line.strip():
            continue
        where = f"{p}, line {lineno}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"{where}: malformed JSON at column {exc.colno}: {exc.msg}") from exc
        if not isinstance(data, Mapping):
            raise InvalidInput(f"{where}: expected an object with a 'messages' list")
        found.append(_conversation(data, where, f"line {lineno}"))
    return found


def _conversation(data: Any, where: str, default_id: str) -> Conversation:
    questions: list[dict[str, Any]] = []
    conv_id = default_id
    if isinstance(data, Mapping):
        if data.get("id") is not None:
            conv_id = str(data["id"])
        questions = _questions(data.get("questions", []), where)
        data = data.get("messages")
    if not isinstance(data, list):
        raise InvalidInput(f"{where}: field 'messages': expected a list of messages")
    if not data:
        raise InvalidInput(f"{where}: field 'messages': the list is empty")
    try:
        messages = validate_messages(data)
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc}") from exc
    return Conversation(conv_id, messages, questions)


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
