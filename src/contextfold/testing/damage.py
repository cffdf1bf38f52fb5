"""Damaged state on purpose: the cases the self-healing promise is measured on.

Each ``Case`` (``contextfold.testing.damage_cases``) damages a compacted
session the way a careless hand or a foreign tool would. ``run``
then uses the session as a user would (history, render, compact, render) and
judges every prompt independently of the stored counts (``rendered_faults``).

What each outcome must be:

- a damaged fold (``expect="heal"``): no error at all, every prompt right, and
  after one ``compact`` the view is whole again (nothing left out);
- a damaged message or a foreign file (``expect="error"``): a ``StoreError``
  naming the session and seq, or the file, never a raw Python error; the log
  is the source of truth and nothing is invented in its place.

Used by ``tests/test_damage.py`` and ``bench/damage.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextfold.core.errors import ContextfoldError
from contextfold.core.folds import Fold
from contextfold.core.messages import Message, for_model
from contextfold.core.tokens import get_counter
from contextfold.core.units import tool_unit_faults
from contextfold.memory.session import Memory
from contextfold.store.ram import RAMStore
from contextfold.store.sqlite import SQLiteStore
from contextfold.testing.damage_cases import CASES
from contextfold.testing.damage_target import BUDGET, SESSION, SYSTEM, VIEW, Case, Target


def conversation(n: int) -> list[Message]:
    """``n`` messages of an agent run: a request, two tool calls with output, an answer."""
    out: list[Message] = []
    r = 0
    while len(out) < n:
        out.append({"role": "user", "content": f"Step {r}: make tests/test_m{r}.py pass."})
        for k in range(2):
            fn = {"name": "run_tests", "arguments": json.dumps({"k": k, "r": r})}
            call: dict[str, Any] = {"id": f"c{r}_{k}", "type": "function", "function": fn}
            out.append({"role": "assistant", "content": None, "tool_calls": [call]})
            failure = f"FAILED tests/test_m{r}.py::test_{k} - AssertionError: {r} != {r + k + 1}\n"
            out.append({"role": "tool", "tool_call_id": call["id"], "content": failure * 6})
        out.append({"role": "assistant", "content": f"Fixed m{r}: an off-by-one in step {r}."})
        r += 1
    return out[:n]


def build(memory: Memory, n: int) -> None:
    """The session every case starts from: compacted, with a facts fold beside the summaries."""
    session = memory.session(SESSION, system=SYSTEM)
    session.extend(conversation(n))
    text = "Facts: the agent fixes tests module by module; every failure was an off-by-one."
    message = {"role": "user", "content": text}
    facts = Fold(
        VIEW,
        2,
        10,
        "facts",
        text,
        (message,),
        "hand",
        200,
        session.counter.message(message),
        placement="facts",
    )
    memory.store.commit_folds(SESSION, VIEW, [facts], memory.store.head(SESSION, VIEW).fold_version)
    # The chat share of raw messages: the cases need several folds in place to damage.
    session.view(VIEW, preset="offline", budget=BUDGET, recent_share=0.1).compact()


@dataclass
class CaseOutcome:
    case: str
    expect: str
    raw_errors: list[str] = field(default_factory=list)
    clear_errors: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    recovered: bool = False
    quarantined: int = 0

    @property
    def ok(self) -> bool:
        if self.raw_errors or self.wrong:
            return False
        if self.expect == "error":
            return bool(self.clear_errors)
        return not self.clear_errors and self.recovered


def rendered_faults(prompt: list[Message], log: list[Message], budget: int) -> list[str]:
    """What is wrong with ``prompt`` for ``log``, judged without the stored counts."""
    faults: list[str] = []
    tokens = get_counter("o200k_base").messages(prompt)
    if tokens > budget:
        faults.append(f"{tokens} tokens by a fresh count, over the budget of {budget}")
    if not prompt or prompt[0] != for_model(log[0]):
        faults.append("the system prompt is not first")
    latest = next((m for m in reversed(log) if m["role"] == "user"), None)
    if latest is not None and for_model(latest) not in prompt:
        faults.append("the latest user message is missing")
    seq_of = {json.dumps(for_model(m), sort_keys=True): seq for seq, m in enumerate(log, 1)}
    seqs = [seq_of.get(json.dumps(m, sort_keys=True)) for m in prompt]
    logged = [s for s in seqs if s is not None]
    if logged != sorted(set(logged)):
        faults.append("logged messages are out of order or duplicated")
    answered = {str(m.get("tool_call_id")) for m in log if m["role"] == "tool"}
    if tool_unit_faults(prompt, answered=answered):
        faults.append("a tool unit is split (orphan result or unanswered call)")
    return faults


def run(case: Case, n: int, template: str, workdir: str) -> CaseOutcome:
    """Damage a fresh copy of the compacted session and use it as a user would.

    ``template`` is a SQLite file made by ``build`` (copied for each SQLite case);
    RAM cases build their own store.
    """
    outcome = CaseOutcome(case.name, case.expect)
    if case.backend == "file":
        return _file_case(case, outcome, template, workdir)
    opened: Callable[[], Memory]
    if case.backend == "sqlite":
        path = os.path.join(workdir, f"{case.name}.db")
        shutil.copyfile(template, path)
        store = SQLiteStore(path)
        target = Target(_log(store), store.folds(SESSION, VIEW), path=path)
        store.close()
        target.conn = sqlite3.connect(path, isolation_level=None)
        case.damage(target)
        target.conn.close()
        opened = lambda: Memory(path)  # noqa: E731
    else:
        ram = RAMStore()
        build(Memory(ram), n)
        target = Target(_log(ram), ram.folds(SESSION, VIEW), ram=ram)
        case.damage(target)
        opened = lambda: Memory(ram)  # noqa: E731
    _use(opened, target.log, target.last_seq, outcome)
    return outcome


def _log(store: SQLiteStore | RAMStore) -> list[Message]:
    return [m.message for m in store.messages(SESSION)]


def _use(opened: Callable[[], Memory], log: list[Message], last: int, outcome: CaseOutcome) -> None:
    """History, render, compact, append, render: every step judged on its own."""

    def step(name: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except ContextfoldError as exc:
            named = SESSION in str(exc) and "seq" in str(exc)
            if outcome.expect == "error" and not named:
                outcome.wrong.append(f"{name}: the error names no session and seq: {exc}")
            outcome.clear_errors.append(f"{name}: {exc}")
        except Exception as exc:
            outcome.raw_errors.append(f"{name}: {type(exc).__name__}: {exc}")
        return None

    memory = step("open", opened)
    if memory is None:
        return
    session = step("session", lambda: memory.session(SESSION))
    if session is None:
        return
    view = session.view(VIEW)
    view.on_event.append(
        lambda e: setattr(outcome, "quarantined", outcome.quarantined + (e.kind == "quarantined"))
    )
    history = step("history", session.history)
    if history is not None and history != log:
        outcome.wrong.append("history differs from the log")
    first = step("render", view.render_report)
    if first is not None:
        outcome.wrong += [f"render: {f}" for f in rendered_faults(first.messages, log, BUDGET)]
    step("compact", view.compact)
    new = {"role": "user", "content": "One more thing: run the whole suite."}
    appended = step("append", lambda: session.append(new))
    if appended is not None and appended.seq <= last:
        outcome.wrong.append(f"append reused seq {appended.seq}")
    after = step("render after compact", view.render_report)
    if after is not None:
        faults = rendered_faults(after.messages, [*log, new], BUDGET)
        outcome.wrong += [f"render after compact: {f}" for f in faults]
        outcome.recovered = not faults and after.omitted == 0 and not outcome.clear_errors
    memory.close()


def _file_case(case: Case, outcome: CaseOutcome, template: str, workdir: str) -> CaseOutcome:
    path = os.path.join(workdir, f"{case.name}.db")
    shutil.copyfile(template, path)
    target = Target([], [], path=path)
    case.damage(target)
    before = Path(path).read_bytes()
    try:
        memory = Memory(path)
        memory.session(SESSION).view(VIEW).render()
        memory.close()
        outcome.recovered = True
    except ContextfoldError as exc:
        outcome.clear_errors.append(str(exc))
        if path not in str(exc):
            outcome.wrong.append(f"the error does not name the file: {exc}")
        if Path(path).read_bytes() != before:
            outcome.wrong.append("the refused file was changed")
    except Exception as exc:
        outcome.raw_errors.append(f"{type(exc).__name__}: {exc}")
    return outcome


def template(n: int, workdir: str) -> str:
    """The compacted session as a SQLite file, made once and copied by each case."""
    path = os.path.join(workdir, "template.db")
    memory = Memory(path)
    build(memory, n)
    memory.close()
    return path


def run_all(n: int, cases: list[Case] | None = None) -> list[CaseOutcome]:
    with tempfile.TemporaryDirectory() as workdir:
        made = template(n, workdir)
        return [run(case, n, made, workdir) for case in (CASES if cases is None else cases)]
