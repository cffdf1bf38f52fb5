"""Self-healing folds, copies handed out, and history apart from the folds (issue 9)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import contextfold.memory.heal as heal
from contextfold import Memory
from contextfold.core.errors import StoreError
from contextfold.core.events import Event
from contextfold.store import RAMStore
from contextfold.testing.damage import build
from contextfold.testing.damage_target import BUDGET, SESSION, VIEW


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "healed.db")
    with Memory(path) as memory:
        build(memory, 120)
    return path


def _edit_biggest(path: str, **changes: Any) -> str:
    raw = sqlite3.connect(path, isolation_level=None)
    fold_id, body = raw.execute(
        "SELECT id, fold FROM folds WHERE superseded_by IS NULL AND placement = 'in_place' "
        "ORDER BY length(fold) DESC LIMIT 1"
    ).fetchone()
    raw.execute(
        "UPDATE folds SET fold = ? WHERE id = ?", (json.dumps(json.loads(body) | changes), fold_id)
    )
    raw.close()
    return str(fold_id)


def test_quarantine_is_told_marked_and_moves_the_fold_version(db: str) -> None:
    fold_id = _edit_biggest(db, tokens_after=1)
    memory = Memory(db)
    view = memory.session(SESSION).view(VIEW)
    events: list[Event] = []
    view.on_event.append(events.append)
    version = memory.store.head(SESSION, VIEW).fold_version
    prompt = view.render_report()
    told = [e for e in events if e.kind == "quarantined"]
    assert [e.data["fold"] for e in told] == [fold_id]
    assert "it says it costs 1 tokens" in told[0].data["reason"]
    assert memory.store.quarantined(SESSION, VIEW)[0].fold_id == fold_id
    assert memory.store.head(SESSION, VIEW).fold_version == version + 1
    assert fold_id not in prompt.folds
    assert fold_id not in [f.id for f in view.folds()]
    assert prompt.tokens <= BUDGET
    view.compact()
    assert view.render_report().omitted == 0
    again = Memory(db).session(SESSION).view(VIEW)
    again.render()
    assert len(Memory(db).store.quarantined(SESSION, VIEW)) == 1


def test_a_sound_fold_is_checked_once(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[str] = []
    own_fault = heal.own_fault
    monkeypatch.setattr(heal, "own_fault", lambda f, c: checked.append(f.id) or own_fault(f, c))
    view = Memory(db).session(SESSION).view(VIEW)
    view.render()
    first = len(checked)
    assert first == len(view.folds())
    view.binding.prompts = type(view.binding.prompts)()
    view.render()
    view.state()
    assert len(checked) == first


def test_a_fold_is_read_once_and_an_edit_behind_the_store_is_found_by_a_new_reader(
    db: str,
) -> None:
    """A committed fold never changes: the process that read it keeps its copy, sound
    when read, and another process (a new Memory) reads the edited row and quarantines it."""
    memory = Memory(db)
    view = memory.session(SESSION).view(VIEW)
    first = view.render()
    fold_id = _edit_biggest(db, tokens_after=2)
    view.binding.prompts = type(view.binding.prompts)()
    assert view.render() == first
    assert memory.store.quarantined(SESSION, VIEW) == []
    other = Memory(db)
    other.session(SESSION).view(VIEW).render()
    assert fold_id in [q.fold_id for q in other.store.quarantined(SESSION, VIEW)]


def test_history_never_reads_the_folds(db: str) -> None:
    expected = Memory(db).session(SESSION).history()
    raw = sqlite3.connect(db, isolation_level=None)
    raw.execute("UPDATE folds SET fold = 'garbage'")
    raw.execute("DROP TABLE fold_versions")
    raw.close()
    session = Memory(db).session(SESSION)
    assert session.history() == expected
    with pytest.raises(StoreError, match="fold_versions"):
        session.view(VIEW).render()


@pytest.mark.parametrize("backend", ["ram", "sqlite"])
def test_history_and_prompts_are_copies(backend: str, tmp_path: Path) -> None:
    memory = Memory(RAMStore() if backend == "ram" else str(tmp_path / "c.db"))
    build(memory, 60)
    session = memory.session(SESSION)
    view = session.view(VIEW)
    log = json.dumps(session.history())
    history = session.history()
    for message in history:
        message["content"] = "edited"
        for call in message.get("tool_calls") or ():
            call["function"]["name"] = "edited"
    first = view.render()
    expected = json.dumps(first)
    for prompt in (first, view.render()):
        for message in prompt:
            message["content"] = "edited"
            for call in message.get("tool_calls") or ():
                call["id"] = "edited"
    assert json.dumps(view.render()) == expected
    assert json.dumps(session.history()) == log
