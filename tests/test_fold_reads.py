"""A fold's data is read from the store once per process: a fold landing costs the next
turn the new fold at most (none when this process committed it), never every fold's
carried data again; and the prompt rendered from the kept folds is the fresh one."""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from conftest import load_rows

from contextfold import Memory, ThreadRunner
from contextfold.core.folds import Fold
from contextfold.store import RAMStore, SQLiteStore

BUDGET = 2500


class FoldReads:
    """Counts the folds a store hands out read from its rows (not the caller's copies)."""

    read: list[str]

    def folds(
        self,
        session_id: str,
        view: str,
        *,
        include_superseded: bool = False,
        known: Mapping[str, Fold] | None = None,
    ) -> list[Fold]:
        out: list[Fold] = super().folds(  # type: ignore[misc]
            session_id, view, include_superseded=include_superseded, known=known
        )
        self.read += [f.id for f in out if known is None or known.get(f.id) is not f]
        return out


class RAMReads(FoldReads, RAMStore):
    def __init__(self) -> None:
        super().__init__()
        self.read = []


class SQLiteReads(FoldReads, SQLiteStore):
    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.read = []


def counting(backend: str, tmp_path: Path) -> RAMReads | SQLiteReads:
    return RAMReads() if backend == "ram" else SQLiteReads(str(tmp_path / "reads.db"))


def messages() -> list[dict[str, Any]]:
    return [m for row in load_rows("taubench_airline_dev", limit=4) for m in row["messages"]]


def active_ids(memory: Memory, session: str, view: str) -> set[str]:
    return {f.id for f in memory.session(session).view(view).folds()}


@pytest.mark.parametrize("backend", ["ram", "sqlite"])
def test_after_its_own_commit_a_view_reads_no_fold_data(backend: str, tmp_path: Path) -> None:
    store = counting(backend, tmp_path)
    memory = Memory(store)
    session = memory.session("s")
    view = session.view("v", preset="offline", budget=BUDGET)
    log = messages()
    session.extend(log[:60])
    view.render()
    for message in log[60:]:
        session.append(message)
        before = view.binding.reading.checked.sound()[1].keys()
        committed = view.compact().folds
        store.read.clear()
        view.render_report()
        assert store.read == [], "a render re-read folds this process committed or had read"
        if committed:
            assert set(before) != set(view.binding.reading.checked.sound()[1])
    assert active_ids(memory, "s", "v"), "the replay was meant to fold"


@pytest.mark.parametrize("backend", ["ram", "sqlite"])
def test_a_commit_elsewhere_costs_a_reader_the_new_folds_only(backend: str, tmp_path: Path) -> None:
    store = counting(backend, tmp_path)
    reader, writer = Memory(store), Memory(store)
    log = messages()
    reader.session("s").extend(log[:40])
    folding = writer.session("s").view("v", preset="offline", budget=BUDGET)
    folding.compact()
    view = reader.session("s").view("v")
    store.read.clear()
    view.render()
    assert sorted(store.read) == sorted(active_ids(writer, "s", "v"))
    for message in log[40:]:
        reader.session("s").append(message)
        had = set(view.binding.reading.checked.sound()[1])
        folding.compact()
        store.read.clear()
        view.render()
        assert set(store.read) == active_ids(writer, "s", "v") - had
        assert len(store.read) == len(set(store.read))


@pytest.mark.parametrize("backend", ["ram", "sqlite"])
def test_prompts_from_kept_folds_equal_a_new_readers(backend: str, tmp_path: Path) -> None:
    """Random appends and commits, inline and from a background runner: the prompt this
    process renders from the folds it keeps is, byte for byte, what a process reading
    every fold afresh renders."""
    rng = random.Random(23)
    store = counting(backend, tmp_path)
    memory = Memory(store)
    session = memory.session("s")
    view = session.view("v", preset="keep-recent", budget=BUDGET)
    log = messages()
    session.extend(log[:20])
    with ThreadRunner(workers=1) as runner:
        runner.watch(view)
        for message in log[20:]:
            session.append(message)
            if rng.random() < 0.2:
                runner.wait_idle(30)
            if rng.random() < 0.1:
                view.compact()
            ours = view.render_report()
            theirs = Memory(store).session("s").view("v").render_report()
            if ours.folds == theirs.folds:
                assert ours == theirs
        runner.wait_idle(30)
    assert view.render_report() == Memory(store).session("s").view("v").render_report()
    assert view.folds(), "the replay was meant to fold"
