"""Observation masking: placeholders for old tool output, never a split unit."""

from __future__ import annotations

import copy
import json
import re

from conftest import load_rows
from test_render import SYSTEM, session_of

from contextfold import Session
from contextfold.core.messages import Message
from contextfold.core.units import tool_unit_faults
from contextfold.strategies import ObservationMasking, Pipeline
from contextfold.strategies.base import HIGH_WATER
from contextfold.strategies.masking import ARGS_CHARS
from contextfold.strategies.triggers import Always, OverBudget

PLACEHOLDER = re.compile(
    r"^\[masked: output of (\w+)\((.*)\), (\d+) characters, kept in the log\]"
    r"\n\[folded: seq \d+-\d+\]$"
)
LONG_ARGS = json.dumps({"pattern": "def (get|set)_many", "path": "src/" + "deep/" * 30 + "x.py"})


def unit(call_ids: list[str], tools: list[str], outputs: list[str], args: str) -> list[Message]:
    calls = [
        {"id": i, "type": "function", "function": {"name": t, "arguments": args}}
        for i, t in zip(call_ids, tools, strict=True)
    ]
    results = [
        {"role": "tool", "tool_call_id": i, "content": out}
        for i, out in zip(call_ids, outputs, strict=True)
    ]
    return [{"role": "assistant", "content": "checking", "tool_calls": calls}, *results]


def agent_session() -> tuple[Session, list[Message]]:
    """Six tool units (one with two parallel calls), then a final answer."""
    messages: list[Message] = [SYSTEM, {"role": "user", "content": "why does test_io fail?"}]
    tools = ["read_file", "run_tests", "grep", "read_file", "run_tests"]
    for n, tool in enumerate(tools):
        output = f"{tool} output {n}\n" + f"src/io.py:{n}: error line {n}\n" * (40 + n)
        messages += unit([f"c{n}"], [tool], [output], '{"path": "src/io.py"}')
    messages += unit(["p1", "p2"], ["grep", "read_file"], ["hit\n" * 60, "body\n" * 80], LONG_ARGS)
    messages.append({"role": "assistant", "content": "The reader closes the file twice."})
    return session_of(messages), messages


def masked(session: Session, view: str) -> dict[int, str]:
    """seq -> placeholder text of every tool result masking ever folded in the view."""
    out = {}
    for fold in session.view(view).folds(include_superseded=True):
        if fold.strategy != "masking":
            continue
        assert fold.kind == "masked"
        tools = [m for m in fold.messages if m["role"] == "tool"]
        for seq, msg in zip(fold.data["masked_seqs"], tools, strict=True):
            out[seq] = msg["content"]
    return out


def test_placeholder_names_the_tool_abridged_arguments_and_size() -> None:
    session, messages = agent_session()
    view = session.view("v", pipeline=Pipeline([ObservationMasking(keep_last=0)]))
    view.compact()
    texts = masked(session, "v")
    assert sorted(texts) == [i + 1 for i, m in enumerate(messages) if m["role"] == "tool"]
    calls = {c["id"]: c for m in messages for c in m.get("tool_calls") or ()}
    for seq, text in texts.items():
        original = messages[seq - 1]
        match = PLACEHOLDER.match(text)
        assert match, text
        name, args, size = match.groups()
        call = calls[original["tool_call_id"]]
        assert name == call["function"]["name"]
        assert int(size) == len(original["content"])
        flat = " ".join(call["function"]["arguments"].split())
        if len(flat) <= ARGS_CHARS:
            assert args == flat
        else:
            assert len(args) == ARGS_CHARS and args.endswith("…")
            assert flat.startswith(args[:-1])


def test_keeps_the_last_units_verbatim_and_masks_the_older_ones() -> None:
    session, messages = agent_session()
    view = session.view("v", pipeline=Pipeline([ObservationMasking(keep_last=2)]))
    view.compact()
    tool_seqs = [i + 1 for i, m in enumerate(messages) if m["role"] == "tool"]
    # The last two units: the one at c4 and the parallel unit (two results).
    assert sorted(masked(session, "v")) == tool_seqs[:4]
    prompt = view.render()
    assert prompt[-6:] == messages[-6:]
    assert tool_unit_faults(prompt) == []
    assert all(m in prompt for m in messages if m["role"] == "assistant")


def test_parallel_calls_are_masked_as_one_unit() -> None:
    session, messages = agent_session()
    view = session.view("v", pipeline=Pipeline([ObservationMasking(keep_last=0)]))
    view.compact()
    last = next(f for f in view.folds() if f.end == len(messages) - 1)
    assert (last.start, last.end) == (len(messages) - 3, len(messages) - 1)
    names = [PLACEHOLDER.match(m["content"]).group(1) for m in last.messages[1:]]  # type: ignore[union-attr]
    assert names == ["grep", "read_file"]
    assert last.messages[0] == messages[-4]


def test_exclude_tools_are_never_masked() -> None:
    session, messages = agent_session()
    strategy = ObservationMasking(keep_last=0, exclude_tools=("run_tests",))
    view = session.view("v", pipeline=Pipeline([strategy]))
    view.compact()
    texts = masked(session, "v")
    run_tests = [
        i + 1
        for i, m in enumerate(messages)
        if m["role"] == "tool" and m["content"].startswith("run_tests")
    ]
    assert run_tests and not set(run_tests) & set(texts)
    assert all("run_tests(" not in t for t in texts.values())
    for seq in run_tests:
        assert messages[seq - 1] in view.render()


def test_fold_token_counts_are_honest() -> None:
    session, _ = agent_session()
    view = session.view("v", pipeline=Pipeline([ObservationMasking(keep_last=1)]))
    view.compact()
    logged = {m.seq: m for m in session.store.messages(session.id)}
    for fold in view.folds():
        before = sum(logged[s].tokens for s in range(fold.start, fold.end + 1))
        assert fold.tokens_before == before
        assert fold.tokens_after == sum(session.counter.message(m) for m in fold.messages)
        assert fold.tokens_after < fold.tokens_before


def test_over_budget_trigger_masks_only_when_needed_and_fits_the_budget() -> None:
    session, _ = agent_session()
    strategy = ObservationMasking(keep_last=5, trigger=OverBudget())
    view = session.view("v", pipeline=Pipeline([strategy]))
    full = view.state().tokens
    assert view.compact(int(full / HIGH_WATER) + 1).folds == ()
    report = view.compact(full // 2)
    assert report.tokens_after <= full // 2 < report.tokens_before
    rendered = view.render_report(full // 2)
    assert rendered.omitted == 0 and rendered.tokens <= full // 2
    assert tool_unit_faults(rendered.messages) == []


def test_min_keep_leaves_the_newest_unit_raw_even_when_over_budget() -> None:
    session, messages = agent_session()
    strategy = ObservationMasking(keep_last=5, min_keep=1, trigger=OverBudget())
    view = session.view("v", pipeline=Pipeline([strategy]))
    view.compact(200)
    newest = [i + 1 for i, m in enumerate(messages) if m["role"] == "tool"][-2:]
    assert not set(newest) & set(masked(session, "v"))
    assert len(masked(session, "v")) == 5
    rendered = view.render_report(600)
    assert rendered.tokens <= 600 and rendered.omitted == 0, "the rescue folds what masking left"


def test_masking_never_changes_the_log_and_never_splits_a_unit_on_real_data() -> None:
    rows = load_rows("openhands_example") + load_rows("taubench_airline_dev", limit=20)
    saved = 0
    for row in rows:
        session = session_of(row["messages"])
        before = copy.deepcopy(session.history())
        answered = {m["tool_call_id"] for m in before if m["role"] == "tool"}
        view = session.view("m", pipeline=Pipeline([ObservationMasking(trigger=Always())]))
        report = view.compact()
        saved += report.tokens_before - report.tokens_after
        assert report.tokens_after <= report.tokens_before
        assert tool_unit_faults(view.render(), answered=answered) == []
        for budget in (report.tokens_after, report.tokens_after // 2):
            if budget > session.counter.messages(before[:1]) + 2000:
                prompt = view.render_report(budget)
                assert prompt.tokens <= budget
                assert tool_unit_faults(prompt.messages, answered=answered) == []
        assert session.history() == before
    assert saved > 10_000
