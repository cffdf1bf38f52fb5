"""One reader for conversation files: ``contextfold compact`` and ``eval`` read a file one way.

The two used to disagree: a JSONL line holding a list of messages was read by
one and refused by the other, JSON nested too deep was a clear error for one
and a ``RecursionError`` for the other, and a conversation without an ``id``
was unnamed for one and named after its place for the other.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contextfold.core.errors import InvalidInput
from contextfold.evaluation.inputs import load_conversations
from contextfold.memory.conversation_file import (
    FileConversation,
    load_conversation,
    open_conversations,
)
from contextfold.memory.one_shot import compact_file

USER = {"role": "user", "content": "Plan a trip to Lisbon."}
ASSISTANT = {"role": "assistant", "content": "Three days: Alfama, Belem, Sintra."}


def both(path: Path, index: int) -> tuple[FileConversation, FileConversation]:
    """What the compact command's loader and the evaluation's loader read at ``index``."""
    return load_conversation(path, index=index), load_conversations(path).conversations[index]


def test_a_jsonl_line_holding_a_list_of_messages_reads_the_same_for_both(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    rows = [{"id": "named", "messages": [USER, ASSISTANT]}, [USER, ASSISTANT]]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    compact, evaluated = both(path, 1)
    assert compact == evaluated
    assert (evaluated.id, evaluated.source, evaluated.messages) == (
        "line 2",
        f"{path}:2",
        [USER, ASSISTANT],
    )
    assert both(path, 0)[0] == both(path, 0)[1]


def test_a_conversation_without_an_id_is_named_after_its_place_for_both(tmp_path: Path) -> None:
    path = tmp_path / "trip.json"
    path.write_text(json.dumps([USER, ASSISTANT]), encoding="utf-8")
    compact, evaluated = both(path, 0)
    assert compact == evaluated
    assert compact_file(path, budget=500).conversation_id == "trip"


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_json_nested_too_deep_is_a_clear_error_for_both(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"deep{suffix}"
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n", encoding="utf-8")
    with pytest.raises(InvalidInput, match="nested too deeply"):
        load_conversation(path)
    with pytest.raises(InvalidInput, match="nested too deeply"):
        load_conversations(path)


def test_pretty_printed_objects_one_after_another_are_one_error_for_both(tmp_path: Path) -> None:
    """A ``.json`` file is read as JSONL only when its first line is a whole value."""
    path = tmp_path / "two.json"
    pretty = json.dumps({"messages": [USER]}, indent=2)
    path.write_text(pretty + "\n" + pretty + "\n", encoding="utf-8")
    said = []
    for load in (load_conversation, load_conversations):
        with pytest.raises(
            InvalidInput, match="malformed JSON at line 9, column 1: Extra data"
        ) as caught:
            load(path)
        said.append(str(caught.value))
    assert said[0] == said[1]


def test_a_json_file_of_lines_is_read_as_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([USER]) + "\n" + json.dumps({"messages": [USER]}) + "\n", "utf-8")
    read = open_conversations(path)
    assert read.format == "JSONL"
    assert [c.id for c in read.conversations()] == ["line 1", "line 2"]
    with pytest.raises(InvalidInput, match="out of range") as caught:
        load_conversation(path, index=2)
    assert caught.value.field == "index"
