"""Entries as text a summarizer reads: one block per message, role first.

Shared by the model strategies so every prompt shows history the same way:
``[user]: ...``, ``[assistant]: ...`` with tool calls as ``-> name(args)``,
``[tool name]: ...`` for results, and folds as their own text.
"""

from __future__ import annotations

from collections.abc import Sequence

from contextfold.core.entries import Entry
from contextfold.core.messages import Message, text_of
from contextfold.llm.base import HISTORY_CLOSE, HISTORY_OPEN, material
from contextfold.strategies.checked import without_pins

__all__ = ["HISTORY_CLOSE", "HISTORY_OPEN", "material", "message_block", "transcript"]

TOOL_OUTPUT_CHARS = 2000


def transcript(
    entries: Sequence[Entry], *, tool_chars: int = TOOL_OUTPUT_CHARS, pins: bool = True
) -> str:
    """The entries as a readable transcript; long tool output is abridged in the middle.

    ``pins=False`` shows folds without their ``Pinned`` lists (``checked.without_pins``).
    """
    names: dict[str, str] = {}
    blocks: list[str] = []
    for entry in entries:
        if entry.fold is not None:
            blocks.append(entry.fold.text if pins else without_pins(entry.fold.text))
            continue
        blocks.append(message_block(entry.messages[0], names, tool_chars=tool_chars))
    return "\n\n".join(blocks)


def message_block(
    message: Message, names: dict[str, str], *, tool_chars: int = TOOL_OUTPUT_CHARS
) -> str:
    """One message as ``[role]: text``; ``names`` maps call ids to tool names as they appear."""
    role = str(message["role"])
    if role == "assistant":
        for call in message.get("tool_calls") or ():
            names[call["id"]] = call["function"]["name"]
    text = text_of(message)
    if role == "assistant" and message.get("tool_calls"):
        content = message.get("content") or ""
        calls = [
            f"-> {c['function']['name']}({c['function']['arguments']})"
            for c in message["tool_calls"]
        ]
        text = "\n".join([content, *calls]) if content else "\n".join(calls)
    if role == "tool":
        label = f"tool {names.get(str(message.get('tool_call_id')), '')}".strip()
        if len(text) > tool_chars:
            half = tool_chars // 2
            text = f"{text[:half]}\n[... {len(text) - tool_chars} characters left out ...]\n{text[-half:]}"
        return f"[{label}]: {text}"
    speaker = message.get("name")
    label = f"{role} {speaker}" if speaker else role
    send_to = (message.get("meta") or {}).get("send_to")
    if speaker and send_to:
        label += f" -> {send_to}"
    return f"[{label}]: {text}"
