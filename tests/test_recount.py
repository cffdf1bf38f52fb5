"""A SQLite file counted by an older formula is recounted on open, once, the log untouched."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from old_files import old_file

from contextfold import Memory
from contextfold.core.errors import StoreError
from contextfold.core.tokens import COUNT_VERSION, TokenCounter, get_counter
from contextfold.store import SQLiteStore
from contextfold.store.sqlite.migrations import MIGRATIONS

COUNTER = get_counter("o200k_base")
CALL_ID = "call_" + "Zq9xW3vK7pL2mN8bR4tY6uJ1" * 2


def _count_v1(counter: TokenCounter, message: dict[str, Any]) -> int:
    """Version 1 of the formula, as files written before version 2 hold it."""
    count = counter.text
    total = 3 + count(message["role"])
    if isinstance(message.get("content"), str):
        total += count(message["content"])
    if message.get("name"):
        total += 1 + count(message["name"])
    for call in message.get("tool_calls") or ():
        total += 3 + count(call["function"]["name"]) + count(call["function"]["arguments"])
    return total


def _agent_log(turns: int) -> list[dict[str, Any]]:
    """A system prompt, then user turns each answered by a tool call, its result and a reply."""
    log: list[dict[str, Any]] = [{"role": "system", "content": "Vous aidez à chercher — poliment."}]
    for i in range(turns):
        call = f"{CALL_ID}{i}"
        log += [
            {"role": "user", "content": f"Question {i}: où est le fichier n° {i}?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {"name": "find", "arguments": json.dumps({"n": i})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call, "content": f"/srv/data/{i}.txt"},
            {"role": "assistant", "content": f"Le fichier {i} est là.", "refusal": None},
        ]
    return log


BEFORE_BRANCHES = [name for name, _ in MIGRATIONS].index("009_branches")
"""A file as the last release before branches made it (rows of seven columns)."""


def _old(path: Path, messages: list[dict[str, Any]], migrations: int = BEFORE_BRANCHES) -> None:
    old_file(path, migrations, messages, tokens=[_count_v1(COUNTER, m) for m in messages])


def _rows(path: Path) -> list[tuple[int, str, int]]:
    with sqlite3.connect(path) as raw:
        return raw.execute("SELECT seq, message, tokens FROM messages ORDER BY seq").fetchall()


def _version(path: Path) -> list[tuple[int]]:
    with sqlite3.connect(path) as raw:
        return raw.execute("SELECT version FROM _count_version").fetchall()


@pytest.mark.parametrize("migrations", [1, BEFORE_BRANCHES])
def test_old_counts_are_recounted_and_the_log_kept(tmp_path: Path, migrations: int) -> None:
    path = tmp_path / "old.db"
    log = _agent_log(5)
    _old(path, log, migrations)
    before = _rows(path)
    assert any(tokens != COUNTER.message(log[seq - 1]) for seq, _, tokens in before)
    SQLiteStore(path).close()
    after = _rows(path)
    assert [text for _, text, _ in after] == [text for _, text, _ in before]
    assert [tokens for *_, tokens in after] == [COUNTER.message(m) for m in log]
    assert _version(path) == [(COUNT_VERSION,)]


def test_render_of_an_old_file_fits_by_an_independent_count(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    log = _agent_log(40)
    _old(path, log)
    budget = 600
    assert COUNTER.messages(log) > budget
    with Memory(path) as memory:
        prompt = memory.session("s").view("default", budget=budget).render()
    assert prompt[0] == log[0] and prompt[-1] == log[-1]
    assert COUNTER.messages(prompt) <= budget


def test_each_session_is_recounted_with_its_own_encoding(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    log = _agent_log(2)
    _old(path, log)
    with sqlite3.connect(path) as raw:
        raw.execute(
            "INSERT INTO sessions (id, encoding, meta, created_at) VALUES ('a', 'approx', '{}', 0)"
        )
        raw.execute(
            "INSERT INTO sessions (id, encoding, meta, created_at) VALUES ('x', 'mine', '{}', 0)"
        )
        for sid in ("a", "x"):
            raw.execute(
                "INSERT INTO messages VALUES (?, 1, 'tool', ?, 1, NULL, 0)",
                (sid, json.dumps(log[3])),
            )
    SQLiteStore(path).close()
    with sqlite3.connect(path) as raw:
        found = dict(raw.execute("SELECT session_id, tokens FROM messages WHERE seq = 1"))
    assert found["s"] == COUNTER.message(log[0])
    assert found["a"] == get_counter("approx").message(log[3])
    assert found["x"] == 1  # no session can be opened with an unknown encoding: left as stored


def test_recounted_once(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old(path, _agent_log(2))
    SQLiteStore(path).close()
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE messages SET tokens = 999 WHERE seq = 2")
    SQLiteStore(path).close()
    assert _rows(path)[1][2] == 999
    assert _version(path) == [(COUNT_VERSION,)]


def test_damaged_row_left_for_the_read_to_report(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old(path, _agent_log(2))
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE messages SET message = '{\"role\": ' WHERE seq = 3")
    store = SQLiteStore(path)
    with pytest.raises(StoreError, match="seq 3"):
        store.messages("s")
    store.close()


def test_file_counted_by_a_newer_formula_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    SQLiteStore(path).close()
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE _count_version SET version = ?", (COUNT_VERSION + 1,))
    with pytest.raises(StoreError, match="token count version"):
        SQLiteStore(path)


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_two_processes_open_an_old_file_at_once(tmp_path: Path, journal: str) -> None:
    """Both wait behind a held write lock, so they open the file at the same moment.

    Files contextfold wrote are in WAL mode; one in rollback mode must be
    switched by one of the two while the other waits.
    """
    path = tmp_path / "old.db"
    log = _agent_log(100)
    _old(path, log)
    with sqlite3.connect(path, isolation_level=None) as raw:
        assert raw.execute(f"PRAGMA journal_mode={journal}").fetchone() == (journal,)
    opener = (
        "import sys; from contextfold.core.tokens import encoding; "
        "from contextfold.store import SQLiteStore; encoding('o200k_base'); print(flush=True); "
        "s = SQLiteStore(sys.argv[1]); print(len(s.messages('s'))); s.close()"
    )
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", opener, str(path)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    assert all(proc.stdout is not None and proc.stdout.readline() == "\n" for proc in procs)
    holder.execute("COMMIT")
    holder.close()
    outs = [proc.communicate(timeout=60)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0]
    assert outs == [f"{len(log)}\n"] * 2
    assert [tokens for *_, tokens in _rows(path)] == [COUNTER.message(m) for m in log]
    assert _version(path) == [(COUNT_VERSION,)]


def test_new_file_records_the_current_version(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    SQLiteStore(path).close()
    assert _version(path) == [(COUNT_VERSION,)]
