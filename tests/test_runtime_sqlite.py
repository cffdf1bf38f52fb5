"""Runners over a SQLite file, with real processes: killed, racing, exiting."""

from __future__ import annotations

import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from crash_worker import chat, summarizing_view
from old_files import old_file

import contextfold.store.sqlite.migrations as migrations
from contextfold import Memory
from contextfold.core.events import Event
from contextfold.runtime import ThreadRunner
from contextfold.store import SQLiteStore
from contextfold.testing import ScriptedModel

WORKER = str(Path(__file__).with_name("crash_worker.py"))
WAIT = 20.0


def _worker(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, WORKER, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _records(stream: IO[str]) -> queue.Queue[dict[str, Any] | None]:
    """The worker's JSON lines as they come; None once its stdout closes."""
    lines: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(json.loads(line))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _next(lines: queue.Queue[dict[str, Any] | None]) -> dict[str, Any]:
    record = lines.get(timeout=WAIT)
    assert record is not None, "the worker died before the test killed it"
    return record


@pytest.fixture
def reaper() -> Iterator[list[subprocess.Popen[str]]]:
    """Children a failing test left running are killed, not leaked."""
    children: list[subprocess.Popen[str]] = []
    yield children
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait()


def test_sigkill_mid_compaction_loses_nothing_and_the_job_is_planned_again(
    tmp_path: Path, reaper: list[subprocess.Popen[str]]
) -> None:
    db = tmp_path / "crash.db"
    child = _worker("crash", str(db), "2.0")
    reaper.append(child)
    assert child.stdout is not None
    lines = _records(child.stdout)
    reported: dict[int, str] = {}
    owner = None
    while True:
        record = _next(lines)
        if "appended" in record:
            reported[record["appended"]] = record["content"]
        owner = record.get("owner", owner)
        if record.get("event") == "model-called":
            break
    called_at = len(reported)
    while len(reported) < called_at + 20:  # the conversation goes on during the job
        record = _next(lines)
        if "appended" in record:
            reported[record["appended"]] = record["content"]
    os.kill(child.pid, signal.SIGKILL)
    assert child.wait(timeout=WAIT) == -signal.SIGKILL
    while (late := lines.get(timeout=WAIT)) is not None:
        if "appended" in late:
            reported[late["appended"]] = late["content"]

    store = SQLiteStore(db)
    logged = store.messages("s")
    assert [m.seq for m in logged] == list(range(1, len(logged) + 1))
    assert max(reported) <= len(logged)
    assert all(logged[seq - 1].message["content"] == text for seq, text in reported.items())
    assert store.folds("s", "default", include_superseded=True) == []
    assert store.head("s", "default").fold_version == 0
    with sqlite3.connect(db) as raw:
        held = raw.execute("SELECT owner FROM leases WHERE session_id = 's'").fetchall()
    assert held == [(owner,)]
    store.close()

    events: list[Event] = []
    session = Memory(db).session("s")
    view = summarizing_view(session, ScriptedModel(default="recovered"))
    runner = ThreadRunner(retry_s=0.1, on_event=[events.append])
    runner.watch(view)
    deadline = time.monotonic() + WAIT
    while not view.folds() and time.monotonic() < deadline:
        time.sleep(0.05)
    runner.stop()
    assert [e.kind for e in events] == ["planned", "started", "committed"]
    fold = view.folds()[0]
    assert fold.start == 2 and fold.text.endswith("recovered")
    assert [m.message for m in session.store.messages("s")] == [m.message for m in logged]
    with sqlite3.connect(db) as raw:
        assert raw.execute("SELECT owner FROM leases").fetchall() == []


def test_two_processes_on_one_file_compact_a_view_once(
    tmp_path: Path, reaper: list[subprocess.Popen[str]]
) -> None:
    db, go, calls = tmp_path / "shared.db", tmp_path / "go", tmp_path / "calls.jsonl"
    with Memory(db) as memory:
        memory.session("s", system="You help with tests.").extend(chat(8))
    children = [_worker("contend", str(db), str(go), str(calls), "1.0") for _ in range(2)]
    reaper.extend(children)
    deadline = time.monotonic() + WAIT
    while not all(Path(f"{go}.{c.pid}").exists() for c in children):
        assert time.monotonic() < deadline, "the workers never got ready"
        assert all(c.poll() is None for c in children), "a worker died"
        time.sleep(0.01)
    go.touch()
    reports = []
    for child in children:
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        reports.append(json.loads(out.splitlines()[-1]))
    model_calls = calls.read_text().splitlines()
    assert len(model_calls) == 1
    kinds = [kind for report in reports for kind in report["events"]]
    assert kinds.count("committed") == 1
    assert "rejected" not in kinds
    assert sum(report["refusals"] for report in reports) >= 1
    store = SQLiteStore(db)
    assert store.head("s", "default").fold_version == 1
    assert len(store.folds("s", "default", include_superseded=True)) == 1
    store.close()


@pytest.mark.parametrize("kind", ["thread", "asyncio"])
def test_process_exits_while_its_runner_waits_on_a_model(
    kind: str, reaper: list[subprocess.Popen[str]]
) -> None:
    began = time.monotonic()
    child = _worker("exit", kind)
    reaper.append(child)
    out, err = child.communicate(timeout=WAIT)
    assert child.returncode == 0, err
    events = [json.loads(line)["event"] for line in out.splitlines()]
    assert events == ["model-called", "main-returned"]
    assert time.monotonic() - began < WAIT  # the model would block for an hour


def test_file_from_before_leases_is_upgraded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    old_file(path, 1, [{"role": "system", "content": "You help with tests."}, *chat(2)])
    store = SQLiteStore(path)
    with sqlite3.connect(path) as raw:
        names = [row[0] for row in raw.execute("SELECT name FROM _migrations ORDER BY name")]
    assert names == [name for name, _ in migrations.MIGRATIONS]
    assert len(store.messages("s")) == 5
    assert store.acquire_lease("s", "default", "a")
    assert not store.acquire_lease("s", "default", "b")
    store.close()
