"""The first compaction of a long log grows linearly with it (issue 9, point 8).

Wall time on a shared machine proves nothing, so these count work instead:
texts scanned for must-keep items, characters tokenized, GIL offers.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

import contextfold.extract.artifacts as artifacts
import contextfold.extract.candidates as reading
from contextfold import Memory
from contextfold.core.messages import Message
from contextfold.core.tokens import FunctionTokenizer, TokenCounter, get_counter
from contextfold.extract.candidates import Source, candidates_of


def agent_log(n: int) -> list[Message]:
    """A system prompt and ``n - 1`` messages of an agent fixing tests round by round."""
    out: list[Message] = [{"role": "system", "content": "You are a coding agent."}]
    r = 0
    while len(out) < n:
        module = f"m{r % 50}"
        out.append({"role": "user", "content": f"step {r}: run tests/test_{module}.py and fix it"})
        call_id = f"call_{r}"
        fn = {"name": "run_tests", "arguments": json.dumps({"path": f"tests/test_{module}.py"})}
        call = {"id": call_id, "type": "function", "function": fn}
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        failure = f"FAILED tests/test_{module}.py::test_a - AssertionError: {r} != {r + 1}\n"
        out.append({"role": "tool", "tool_call_id": call_id, "content": failure * 3})
        out.append({"role": "assistant", "content": f"Fixed {module}: an off-by-one in step {r}."})
        r += 1
    return out[:n]


def test_a_repeated_text_is_scanned_once(monkeypatch: pytest.MonkeyPatch) -> None:
    scanned: list[str] = []
    real = reading.find_artifacts

    def spy(text: str, kinds: Any = artifacts.KINDS) -> list[artifacts.Artifact]:
        scanned.append(text)
        return real(text, kinds)

    monkeypatch.setattr(reading, "find_artifacts", spy)
    text = "FAILED tests/test_a.py::test_x - AssertionError: 1 != 2\nThe build 4711 broke."
    sources = [Source(None, "tool", text, False) for _ in range(50)]
    candidates = candidates_of(sources, get_counter())
    assert len(scanned) == 2
    assert [c.source for c in candidates] == [i for i in range(50) for _ in range(2)]
    once = candidates_of(sources[:1], get_counter())
    assert [(c.text, c.cost, c.artifacts) for c in candidates[:2]] == [
        (c.text, c.cost, c.artifacts) for c in once
    ]


def _offers(on_main: bool, monkeypatch: pytest.MonkeyPatch) -> int:
    sleeps: list[float] = []
    monkeypatch.setattr(artifacts.time, "sleep", sleeps.append)
    monkeypatch.setattr(artifacts, "_OFFER_EVERY_S", 0.0)
    text = "See /srv/app/main.py at line 12.\n" * 200
    idle = threading.Event()
    sleeper = threading.Thread(target=idle.wait, daemon=True)  # as a lease keeper
    sleeper.start()
    try:
        if on_main:
            artifacts.find_artifacts(text)
        else:
            worker = threading.Thread(target=artifacts.find_artifacts, args=(text,))
            worker.start()
            worker.join()
    finally:
        idle.set()
    return len(sleeps)


def test_an_inline_scan_offers_no_gil_and_a_background_one_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _offers(True, monkeypatch) == 0
    assert _offers(False, monkeypatch) > 1


def _first_compaction_work(
    n: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, int]:
    """Characters tokenized and texts scanned by the first compaction of ``n`` messages."""
    work = {"chars": 0, "scans": 0}

    def count(text: str) -> int:
        work["chars"] += len(text)
        return -(-len(text) // 4)

    real = reading.find_artifacts

    def scan(text: str, kinds: Any = artifacts.KINDS) -> list[artifacts.Artifact]:
        work["scans"] += 1
        return real(text, kinds)

    memory = Memory(tmp_path / f"long-{n}.db")
    session = memory.session("long")
    session.counter = TokenCounter(FunctionTokenizer("chars", count))
    session.extend(agent_log(n))
    view = session.view("default", preset="offline", budget=2_000)
    work.update(chars=0, scans=0)
    with monkeypatch.context() as patched:
        patched.setattr(reading, "find_artifacts", scan)
        made = view.compact()
    memory.close()
    assert made.folds and made.tokens_after <= 2_000
    return work["chars"], work["scans"]


def test_first_compaction_work_grows_linearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = _first_compaction_work(1_000, tmp_path, monkeypatch)
    large = _first_compaction_work(4_000, tmp_path, monkeypatch)
    assert large[0] <= 4.4 * small[0]
    assert large[1] <= 4.4 * small[1]
