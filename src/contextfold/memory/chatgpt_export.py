"""Read a ChatGPT data export: ``conversations.json``, or the export's ``.zip`` holding it.

The file is a list of conversations, each a tree of nodes (``mapping``: node id
to ``{message, parent, children}``) because an edited or regenerated message
starts a new branch. The branch the user last saw ends at ``current_node``;
following its ``parent`` links back to the root and reversing gives the
conversation in order (``messages``). The whole tree is kept too (``tree``):
every branch, each message with the place of its parent, the current branch
last so that, imported (``Session.extend_tree``), it is the latest. Of each
message the text is kept:

- ``text`` and ``multimodal_text`` parts that are strings (images, audio and
  other non-text parts are skipped);
- ``code`` (what the assistant sent a tool) and ``execution_output`` (what the
  tool answered), whose text is in ``content.text``.

Skipped and counted by reason: nodes without a message (the root), messages
hidden from the user (``metadata.is_visually_hidden_from_conversation``: the
system prompt, custom instructions), other content types (browsing displays,
quotes, hidden reasoning ``thoughts``), non-text parts, and messages left
without text. An assistant message addressed to a tool (``recipient`` other
than ``all``) becomes a tool call and the tool's reply its result, so the
pair stays one tool unit; a tool reply with no call before it gets a call
marked ``synthetic`` in its ``meta``, as the shared data marks its own. Each
message keeps ``create_time`` in its ``meta`` and its day as
``session_date_time``, the date meta strategies may read.
"""

from __future__ import annotations

import json
import zipfile
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from contextfold.core.errors import InvalidInput

EXPORT_NAME = "conversations.json"
_TEXT_PARTS = frozenset({"text", "multimodal_text"})
_TEXT_FIELD = frozenset({"code", "execution_output"})
_ROLES = frozenset({"system", "user", "assistant", "tool"})


def is_export(data: Any) -> bool:
    """True when ``data`` looks like ``conversations.json``: conversations with a ``mapping``."""
    return (
        isinstance(data, list)
        and bool(data)
        and isinstance(data[0], Mapping)
        and "mapping" in data[0]
    )


def read_export_zip(path: Path) -> Any:
    """The parsed ``conversations.json`` inside an export's zip file."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if Path(n).name == EXPORT_NAME]
            if not names:
                raise InvalidInput(f"{path}: no {EXPORT_NAME} in the zip file")
            raw = archive.read(min(names, key=len))
    except (zipfile.BadZipFile, OSError) as exc:
        raise InvalidInput(f"{path}: not a readable zip file: {exc}") from exc
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{path}: {EXPORT_NAME} is not UTF-8 text") from exc
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"{path}: {EXPORT_NAME}: malformed JSON at line {exc.lineno}, column {exc.colno}: "
            f"{exc.msg}"
        ) from exc


Tree = tuple[tuple[int, dict[str, Any]], ...]
"""Messages of a tree, each after its parent's place in it (from 1; 0 for a first
message), every parent before its children."""


@dataclass(frozen=True)
class ExportConversation:
    """One conversation of an export: its current branch as OpenAI-format messages, and
    its whole tree (``Tree``), the current branch last."""

    id: str
    title: str | None
    messages: list[dict[str, Any]]
    tree: Tree = ()


def export_conversations(data: Any, where: str, skipped: Counter[str]) -> list[ExportConversation]:
    """The conversations of a parsed export that hold any text; what is left out is
    counted in ``skipped`` by reason."""
    if not isinstance(data, list):
        raise InvalidInput(f"{where}: expected a list of conversations", field="conversations")
    found: list[ExportConversation] = []
    for i, conversation in enumerate(data):
        name = f"conversations[{i}]"
        if not isinstance(conversation, Mapping):
            raise InvalidInput(f"{where}: expected an object", field=name)
        current = conversation.get("current_node")
        messages = _messages(_branch(conversation, current, name, where), name, where, skipped)
        if not messages:
            skipped["conversations without text"] += 1
            continue
        title = conversation.get("title")
        conv_id = conversation.get("conversation_id") or conversation.get("id") or name
        tree = _tree(conversation, messages, name, where)
        found.append(
            ExportConversation(
                str(conv_id), title if isinstance(title, str) else None, messages, tree
            )
        )
    if not found:
        raise InvalidInput(
            f"{where}: no conversation with text in the export", field="conversations"
        )
    return found


def _tree(
    conversation: Mapping[str, Any], current: list[dict[str, Any]], name: str, where: str
) -> Tree:
    """Every branch of the conversation merged into one tree, the current branch last.

    Each branch (a path from the root to a leaf) is read as the current one is;
    branches share the messages of their common start, so a message is placed
    once however many branches hold it.
    """
    mapping = conversation["mapping"]
    parents = {node.get("parent") for node in mapping.values() if isinstance(node, Mapping)}
    others: list[list[dict[str, Any]]] = []
    for node_id in mapping:
        if node_id not in parents and node_id != conversation.get("current_node"):
            branch = _branch(conversation, node_id, name, where)
            others.append(_messages(branch, name, where, Counter()))
    tree: list[tuple[int, dict[str, Any]]] = []
    placed: dict[tuple[int, str], int] = {}
    for messages in [*others, current]:
        at = 0
        for message in messages:
            key = (at, json.dumps(message, sort_keys=True))
            if key not in placed:
                tree.append((at, message))
                placed[key] = len(tree)
            at = placed[key]
    return tuple(tree)


def _branch(
    conversation: Mapping[str, Any], current: Any, name: str, where: str
) -> list[tuple[str, Mapping[str, Any]]]:
    """The nodes from the root to the node ``current``, in order, with their ids."""
    mapping = conversation.get("mapping")
    if not isinstance(mapping, Mapping) or not mapping:
        raise InvalidInput(f"{where}: expected an object of nodes", field=f"{name}.mapping")
    if not isinstance(current, str) or current not in mapping:
        raise InvalidInput(
            f"{where}: expected the id of a node in the mapping, got {current!r}",
            field=f"{name}.current_node",
        )
    path: list[tuple[str, Mapping[str, Any]]] = []
    seen: set[str] = set()
    node_id: Any = current
    while node_id is not None:
        if node_id in seen:
            raise InvalidInput(
                f"{where}: the parent links loop back to {node_id!r}",
                field=f"{name}.mapping[{path[-1][0]!r}].parent",
            )
        node = mapping.get(node_id) if isinstance(node_id, str) else None
        if not isinstance(node, Mapping):
            raise InvalidInput(
                f"{where}: no such node, or not an object", field=f"{name}.mapping[{node_id!r}]"
            )
        seen.add(node_id)
        path.append((node_id, node))
        node_id = node.get("parent")
    path.reverse()
    return path


def _messages(
    branch: list[tuple[str, Mapping[str, Any]]], name: str, where: str, skipped: Counter[str]
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    open_call: str | None = None
    for node_id, node in branch:
        raw = node.get("message")
        if raw is None:
            skipped["nodes without a message"] += 1
            continue
        field = f"{name}.mapping[{node_id!r}].message"
        role, text, when, recipient = _read_message(raw, field, where, skipped)
        if text is None:
            continue
        meta: dict[str, Any] = {}
        if when is not None:
            meta["create_time"] = when
            meta["session_date_time"] = datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%d")
        if role == "assistant" and recipient not in (None, "all"):
            arguments = json.dumps({"input": text}, ensure_ascii=False)
            out.append(_call(node_id, str(recipient), arguments, meta))
            open_call = node_id
            continue
        if role == "tool":
            if open_call is None:
                open_call = f"{node_id}-call"
                out.append(_call(open_call, _tool_name(raw), "{}", {**meta, "synthetic": True}))
            out.append({"role": "tool", "tool_call_id": open_call, "content": text, "meta": meta})
            open_call = None
            continue
        open_call = None
        out.append({"role": role, "content": text, "meta": meta})
    return out


def _call(call_id: str, name: str, arguments: str, meta: dict[str, Any]) -> dict[str, Any]:
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"role": "assistant", "content": None, "tool_calls": [call], "meta": meta}


def _tool_name(raw: Mapping[str, Any]) -> str:
    author = raw.get("author")
    name = author.get("name") if isinstance(author, Mapping) else None
    return name if isinstance(name, str) and name else "tool"


def _read_message(
    raw: Any, field: str, where: str, skipped: Counter[str]
) -> tuple[str, str | None, float | None, str | None]:
    """(role, text or None when skipped, create_time, recipient) of one node's message."""
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"{where}: expected an object or null", field=field)
    author = raw.get("author")
    role = author.get("role") if isinstance(author, Mapping) else None
    if role not in _ROLES:
        raise InvalidInput(
            f"{where}: expected one of {', '.join(sorted(_ROLES))}, got {role!r}",
            field=f"{field}.author.role",
        )
    when = raw.get("create_time")
    if when is not None and (isinstance(when, bool) or not isinstance(when, int | float)):
        raise InvalidInput(f"{where}: expected seconds or null", field=f"{field}.create_time")
    metadata = raw.get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise InvalidInput(f"{where}: expected an object", field=f"{field}.metadata")
    recipient = raw.get("recipient")
    recipient = recipient if isinstance(recipient, str) else None
    stamp = None if when is None else float(when)
    if metadata and metadata.get("is_visually_hidden_from_conversation"):
        skipped["hidden messages"] += 1
        return role, None, stamp, recipient
    text = _content_text(raw.get("content"), f"{field}.content", where, skipped)
    if text is not None and not text.strip():
        skipped["messages without text"] += 1
        text = None
    return role, text, stamp, recipient


def _content_text(content: Any, field: str, where: str, skipped: Counter[str]) -> str | None:
    if not isinstance(content, Mapping):
        raise InvalidInput(f"{where}: expected an object", field=field)
    kind = content.get("content_type")
    if not isinstance(kind, str):
        raise InvalidInput(f"{where}: expected a string", field=f"{field}.content_type")
    if kind in _TEXT_FIELD:
        text = content.get("text")
        if not isinstance(text, str):
            raise InvalidInput(f"{where}: expected a string", field=f"{field}.text")
        return text
    if kind not in _TEXT_PARTS:
        skipped[f"{kind} content"] += 1
        return None
    parts = content.get("parts")
    if not isinstance(parts, list):
        raise InvalidInput(f"{where}: expected a list", field=f"{field}.parts")
    texts = [p for p in parts if isinstance(p, str)]
    if len(texts) < len(parts):
        skipped["non-text parts"] += len(parts) - len(texts)
    return "\n".join(t for t in texts if t)
