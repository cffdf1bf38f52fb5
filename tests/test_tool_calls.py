"""Tool-call summarization: old tool units in batches, one first-person [SUMMARIZED] each."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import load_rows

from contextfold import InvalidInput, Memory, Session, View
from contextfold.core.events import Event
from contextfold.core.folds import Fold
from contextfold.core.messages import Message
from contextfold.core.units import tool_unit_faults, unit_spans
from contextfold.strategies import Pipeline
from contextfold.strategies.tool_calls import ToolCallSummarization
from contextfold.strategies.triggers import Never
from contextfold.testing import ScriptedModel

EPISODIC = (
    "You are writing episodic memory for an AI coding agent. Your output will be injected\n"
    "directly into the agent's context window as its own recalled experience. Write entirely\n"
    "in operational first-person. Uncertainty markers are forbidden. Be dense, exact, and "
    "technical.\nPreserve every concrete artifact. Omit XML markup, role labels, "
    "conversational filler,\nand hedging language."
)
ANSWER = "## Strategy\nI read the module and ran its tests.\n\n## Status\nCOMPLETE: tests pass."


def groups_in(messages: Sequence[Message]) -> int:
    return str(messages[-1]["content"]).count("=== Group ")


def group_histories(messages: Sequence[Message]) -> list[str]:
    """Each group's material in a ``[SUMMARIZED]`` prompt, in order."""
    parts = str(messages[-1]["content"]).split("=== Group ")[1:]
    return [p.split("<history>\n", 1)[1].split("\n</history>", 1)[0] for p in parts]


def grouped(text: str) -> Callable[[Sequence[Message]], str]:
    """A scripted reply giving every group of a ``[SUMMARIZED]`` prompt the same ``text``."""
    return lambda messages: json.dumps(
        {f"group_{n}": text for n in range(1, groups_in(messages) + 1)}
    )


def call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def tool_unit(call_id: str, name: str = "read_file", *, parallel: int = 1) -> list[Message]:
    """One assistant message with ``parallel`` calls and their results."""
    ids = [call_id] if parallel == 1 else [f"{call_id}_{p}" for p in range(parallel)]
    calls = [call(i, name, {"path": f"src/{i}.py"}) for i in ids]
    results = [{"role": "tool", "tool_call_id": i, "content": f"def f_{i}():\n" * 60} for i in ids]
    return [{"role": "assistant", "content": None, "tool_calls": calls}, *results]


def turn(tag: str, units: int, *, text_between: bool = False, answer: bool = True) -> list[Message]:
    out: list[Message] = [{"role": "user", "content": f"fix the bug in src/{tag}.py"}]
    for u in range(units):
        if text_between and u:
            out.append({"role": "assistant", "content": f"next I check part {u} of {tag}"})
        out += tool_unit(f"{tag}_{u}", parallel=2 if u == 1 else 1)
    if answer:
        out.append({"role": "assistant", "content": f"fixed {tag}"})
    return out


def setup(
    messages: list[Message], strategy: ToolCallSummarization, model: Any, budget: int | None = None
) -> tuple[Session, View, list[Event]]:
    session = Memory().session("s", system="You are a coding agent.")
    session.extend(messages)
    view = session.view("v", pipeline=Pipeline([strategy]), llm=model, budget=budget)
    events: list[Event] = []
    view.on_event.append(events.append)
    return session, view, events


def unit_ranges(session: Session) -> list[tuple[int, int]]:
    """Seq ranges of the log's tool units (assistant call + results)."""
    view = session.view("plain")
    entries = view.state().entries
    return [
        (entries[i].start, entries[j].end)
        for i, j in unit_spans(entries)
        if j > i and (entries[i].message or {}).get("tool_calls")
    ]


def assert_whole_units(session: Session, folds: list[Fold]) -> None:
    """No fold boundary falls inside a tool unit of the log."""
    for start, end in unit_ranges(session):
        for fold in folds:
            inside = fold.start <= start and end <= fold.end
            outside = end < fold.start or fold.end < start
            assert inside or outside, (fold.start, fold.end, start, end)


def test_full_batches_fold_and_the_recent_units_stay_verbatim() -> None:
    messages = turn("a", 12, text_between=True)
    model = ScriptedModel(default=grouped(ANSWER))
    session, view, _ = setup(messages, ToolCallSummarization(batch_tokens=0), model)
    report = view.compact()
    folds = view.folds()
    # 12 units, 4 kept: one full batch of 5; the other 3 wait for their run to fill or close.
    assert len(report.folds) == len(folds) == 1
    fold = folds[0]
    seqs = {i + 2: m for i, m in enumerate(messages)}
    first_unit = next(s for s, m in seqs.items() if m.get("tool_calls"))
    assert fold.start == first_unit
    assert fold.data["tool_units"] == 5
    assert fold.data["tool_calls"] == 6
    assert seqs[fold.end]["role"] == "tool"
    covered = [seqs[s] for s in range(fold.start, fold.end + 1)]
    assert sum(1 for m in covered if m.get("tool_calls")) == 5
    assert not any(m["role"] == "user" for m in covered)
    assert {"role": "assistant", "content": "next I check part 4 of a"} in covered
    assert fold.kind == "summary"
    label = f"[folded: seq {fold.start}-{fold.end}]"
    assert fold.messages == ({"role": "assistant", "content": f"{fold.text}\n{label}"},)
    assert fold.text.startswith("[SUMMARIZED]\n" + ANSWER + "\n\nPinned")
    assert fold.data["summarized"] is True and fold.data["summary_type"] == "tool_calls"
    assert fold.data["tools"] == ["read_file"]
    assert fold.usage is not None and fold.usage["model"] == "scripted"
    assert fold.tokens_after == session.counter.message(fold.messages[0])
    prompt = view.render()
    assert tool_unit_faults(prompt) == []
    raw_calls = [m for m in prompt if m.get("tool_calls")]
    assert len(raw_calls) == 7  # 4 recent + 3 waiting for a full or closed batch
    assert len(model.calls) == 1


def test_a_batch_reaches_across_turns_but_no_fold_crosses_a_user_message() -> None:
    messages = turn("a", 3) + turn("b", 3) + turn("c", 2, answer=False)
    model = ScriptedModel(default=grouped(ANSWER))
    session, view, _ = setup(messages, ToolCallSummarization(batch_tokens=0, keep_recent=1), model)
    view.compact()
    folds = sorted(view.folds(), key=lambda f: f.start)
    users = [i + 2 for i, m in enumerate(messages) if m["role"] == "user"]
    # One call for a full batch of five: turn a's three units and b's first two, a fold
    # each; b's last unit and c's first wait for the next batch to fill.
    assert [f.data["tool_units"] for f in folds] == [3, 2]
    assert len(model.calls) == 1 and groups_in(model.calls[0].messages) == 2
    assert [f.usage is not None for f in folds] == [True, False]
    for fold in folds:
        assert not any(fold.start <= u <= fold.end for u in users)
    assert_whole_units(session, folds)
    # The final answers stay raw: text after a batch's last unit is not folded.
    prompt = view.render()
    assert {"role": "assistant", "content": "fixed a"} in prompt
    assert {"role": "assistant", "content": "fixed b"} in prompt
    assert tool_unit_faults(prompt) == []


def test_over_budget_folds_a_partial_run_and_never_splits_a_parallel_unit() -> None:
    messages = turn("a", 4)
    model = ScriptedModel(default=grouped(ANSWER))
    session, patient, _ = setup(
        messages, ToolCallSummarization(batch_tokens=0, keep_recent=1), model
    )
    patient.compact()
    assert patient.folds() == []  # an open run of 3 < batch_size waits
    pressed = session.view(
        "pressed",
        pipeline=Pipeline([ToolCallSummarization(batch_tokens=0, keep_recent=1, batch_size=2)]),
        llm=ScriptedModel(default=grouped(ANSWER)),
        budget=300,
    )
    pressed.compact()
    folds = pressed.folds()
    # The rescue may fold on (over these folds too) to bring the view under its budget.
    own = [f for f in pressed.folds(include_superseded=True) if f.strategy == "tool_calls"]
    assert [f.data["tool_units"] for f in sorted(own, key=lambda f: f.start)] == [2, 1]
    assert_whole_units(session, folds)
    assert tool_unit_faults(pressed.render()) == []


def test_the_prompt_is_the_episodic_framing_with_the_goal_and_numbered_operations() -> None:
    messages = turn("a", 6, text_between=True)
    model = ScriptedModel(default=grouped(ANSWER))
    _, view, _ = setup(messages, ToolCallSummarization(batch_tokens=0, keep_recent=1), model)
    view.compact()
    sent = model.calls[0]
    assert sent.schema is not None and list(sent.schema["properties"]) == ["group_1"]
    assert sent.max_tokens == 800
    assert [m["role"] for m in sent.messages] == ["system", "user"]
    assert sent.messages[0]["content"] == EPISODIC
    prompt = sent.messages[1]["content"]
    assert prompt.startswith(
        "The following 6 tool call(s) are from your own recent past, in 1 group(s):"
    )
    assert "=== Group 1 ===\n## User Goal\nfix the bug in src/a.py\n\n<history>\n" in prompt
    for heading in ("Strategy", "Operations", "Discoveries", "Dead Ends", "What Worked"):
        assert f"\n## {heading}\n" in prompt
    history = prompt.split("<history>\n", 1)[1].split("\n</history>", 1)[0]
    assert history.startswith("--- Operation 1 ---\n[assistant]: -> read_file(")
    assert "--- Operation 5 ---" in history and "--- Operation 6 ---" not in history
    assert "[tool read_file]: def f_a_0():" in history
    assert "[assistant]: next I check part 4 of a" in history


def test_prompt_overrides_take_text_or_a_path_and_a_missing_field_is_refused(
    tmp_path: Path,
) -> None:
    path = tmp_path / "mine.txt"
    path.write_text("Summarize {count} calls in {groups} groups:\n{operations}", encoding="utf-8")
    model = ScriptedModel(default=grouped(ANSWER))
    strategy = ToolCallSummarization(
        batch_tokens=0, keep_recent=0, batch_size=3, prompt=path, system_prompt="Be brief."
    )
    _, view, _ = setup(turn("a", 2) + turn("b", 1), strategy, model)
    view.compact()
    assert model.calls[0].messages[0]["content"] == "Be brief."
    assert (
        model.calls[0]
        .messages[1]["content"]
        .startswith("Summarize 4 calls in 2 groups:\n=== Group 1 ===\n## User Goal\nfix the")
    )
    with pytest.raises(InvalidInput, match="operations"):
        ToolCallSummarization(prompt="Summarize {count} only.\nNothing else.")
    with pytest.raises(InvalidInput, match="batch_size"):
        ToolCallSummarization(batch_size=0)


def test_a_rejected_summary_fails_the_job_and_commits_nothing() -> None:
    model = ScriptedModel(["", "Error: upstream timeout", "I'm sorry, I cannot help with that."])
    session, view, events = setup(
        turn("a", 2) + turn("b", 1),
        ToolCallSummarization(batch_tokens=0, keep_recent=0, batch_size=3),
        model,
    )
    before = copy.deepcopy(session.history())
    report = view.compact()
    assert report.folds == () and report.failed == ("tool_calls",)
    assert view.folds() == []
    kinds = [e.kind for e in events]
    assert kinds == ["planned", "started", "failed", "degraded"]
    assert "summary rejected" in events[2].detail
    assert len(model.calls) == 3
    assert session.history() == before


def test_artifacts_the_model_drops_are_pinned_verbatim() -> None:
    model = ScriptedModel(default=grouped("I read src/a_0.py and found the bug."))
    strategy = ToolCallSummarization(batch_tokens=0, keep_recent=0, batch_size=3)
    _, view, _ = setup(turn("a", 2) + turn("b", 1), strategy, model)
    view.compact()
    fold = next(f for f in view.folds() if f.data["tool_units"] == 2)
    # The answer keeps src/a_0.py; every other path, name and identifier is pinned,
    # a value of the call's arguments with its key.
    assert fold.data["pinned"] == [
        "read_file",
        "f_a_0",
        "path: src/a_1_0.py",
        "path: src/a_1_1.py",
        "f_a_1_0",
        "f_a_1_1",
    ]
    assert "Pinned (verbatim from the folded messages):\n- " in fold.text
    assert "- path: src/a_1_0.py" in fold.text


def test_without_a_model_the_offline_stand_in_summarizes_and_says_so() -> None:
    strategy = ToolCallSummarization(batch_tokens=0, keep_recent=0, batch_size=4)
    _, view, _ = setup(turn("a", 3) + turn("b", 1), strategy, None)
    view.compact()
    first, second = sorted(view.folds(), key=lambda f: f.start)
    assert first.usage is not None and first.usage["model"] == "offline"
    assert (first.data["tool_units"], second.data["tool_units"]) == (3, 1)
    for fold in (first, second):
        assert fold.text.startswith("[SUMMARIZED]\n") and len(fold.text) > 40
        assert fold.tokens_after < fold.tokens_before
    assert "def f_a_0" not in second.text and "f_b_0" in second.text


def test_the_trigger_gates_planning() -> None:
    _, view, _ = setup(
        turn("a", 6) + turn("b", 1), ToolCallSummarization(trigger=Never()), ScriptedModel()
    )
    assert view.compact().folds == ()


def test_real_agent_runs_fold_in_whole_batches_and_keep_the_recent_units() -> None:
    rows = load_rows("openhands_example")
    for row in rows:
        session = Memory().session("s")
        session.extend(row["messages"])
        before = copy.deepcopy(session.history())
        answered = {m["tool_call_id"] for m in before if m["role"] == "tool"}
        view = session.view(
            "v",
            pipeline=Pipeline([ToolCallSummarization(batch_tokens=0)]),
            llm=ScriptedModel(default=grouped(ANSWER)),
        )
        report = view.compact()
        folds = view.folds()
        assert folds and report.tokens_after < report.tokens_before // 2
        assert_whole_units(session, folds)
        users = [i + 1 for i, m in enumerate(before) if m["role"] == "user"]
        for fold in folds:
            assert 1 <= fold.data["tool_units"] <= 5
            assert not any(fold.start <= u <= fold.end for u in users)
            assert before[fold.start - 1].get("tool_calls")
            assert before[fold.end - 1]["role"] == "tool"
        prompt = view.render()
        assert tool_unit_faults(prompt, answered=answered) == []
        raw_units = sum(1 for m in prompt if m.get("tool_calls"))
        assert 4 <= raw_units <= 4 + 5 - 1
        assert session.history() == before


def test_above_its_budget_a_partial_batch_waits_until_it_is_worth_a_call() -> None:
    spec = {"role": "user", "content": "The spec: " + "every reader streams its input " * 800}
    messages = [spec, {"role": "assistant", "content": "Noted."}]
    model = ScriptedModel(default=grouped(ANSWER))
    strategy = ToolCallSummarization(batch_tokens=0, keep_recent=0)
    session, view, _ = setup(messages, strategy, model, budget=4000)
    for k in range(10):
        session.extend(turn(f"t{k}", 1))
        view.compact()
    # Far above its budget, folding a unit or two would neither bring the view under it
    # nor hold the gap between its water marks (1,200 tokens, three units here).
    # (A rescue call, with no groups, may fold what no batch can yet.)
    batches = [groups_in(c.messages) for c in model.calls if groups_in(c.messages)]
    assert batches and min(batches) >= 3
    pressed = session.view(
        "pressed",
        pipeline=Pipeline([ToolCallSummarization(batch_tokens=0, keep_recent=0)]),
        llm=ScriptedModel(default=grouped(ANSWER)),
        budget=session.view("measure").state().tokens - 100,
    )
    session.extend(turn("last", 1))
    pressed.compact()
    assert pressed.state().tokens <= 0.9 * (pressed.budget or 0)


def small_unit(call_id: str) -> list[Message]:
    """A lookup and its short JSON answer: about 60 tokens, a fraction of a call's prompt."""
    result = json.dumps({"flight": f"HAT{call_id[-3:]}", "status": "available", "seats": 4})
    return [
        {"role": "assistant", "content": None, "tool_calls": [call(call_id, "get_flight", {})]},
        {"role": "tool", "tool_call_id": call_id, "content": result},
    ]


def test_small_units_are_taken_in_until_a_batch_holds_batch_tokens() -> None:
    def lookups(first: int, count: int) -> list[Message]:
        out: list[Message] = [{"role": "user", "content": "find me a flight"}]
        for k in range(first, first + count):
            out += small_unit(f"c{k:03d}")
        return out

    by_count = ToolCallSummarization(batch_tokens=0)
    by_tokens = ToolCallSummarization(batch_tokens=600)
    runs = []
    for strategy in (by_count, by_tokens):
        model = ScriptedModel(default=grouped(ANSWER))
        session, view, _ = setup([], strategy, model)
        for t in range(8):
            session.extend(lookups(10 * t, 10))
            view.compact()
        runs.append((model, view))
    (count_model, _), (token_model, token_view) = runs
    # Five small units a call against as many units as hold 600 tokens a call.
    assert len(count_model.calls) == 15
    assert 0 < len(token_model.calls) <= len(count_model.calls) // 2
    sent = [token_view.session.counter.messages(c.messages) for c in token_model.calls]
    spent = [token_view.session.counter.messages(c.messages) for c in count_model.calls]
    assert sum(sent) < 0.8 * sum(spent)
    batches: list[int] = []
    for fold in sorted(token_view.folds(), key=lambda f: f.start):
        if fold.usage is not None:  # the first fold of a call carries its usage
            batches.append(0)
        batches[-1] += fold.tokens_before
    assert len(batches) == len(token_model.calls) and min(batches) >= 600
