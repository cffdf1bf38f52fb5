"""Threshold summarization: above a token threshold, old assistant blocks become [SUMMARIZED]."""

from __future__ import annotations

import copy
from typing import Any

from conftest import load_rows
from test_tool_calls import ANSWER, EPISODIC, assert_whole_units, grouped, tool_unit, turn

from contextfold import Memory, Session, View
from contextfold.core.events import Event
from contextfold.core.messages import Message
from contextfold.core.units import tool_unit_faults
from contextfold.strategies import Pipeline
from contextfold.strategies.threshold import ThresholdSummarization
from contextfold.strategies.tool_calls import ToolCallSummarization
from contextfold.strategies.triggers import MessageCount
from contextfold.testing import ScriptedModel


def chat_turn(tag: str, words: int = 120) -> list[Message]:
    """A turn without tools: the user asks, the assistant answers at length."""
    return [
        {"role": "user", "content": f"explain the loader in src/{tag}.py"},
        {"role": "assistant", "content": f"The loader {tag} " + "reads config values " * words},
    ]


def setup(
    messages: list[Message], strategies: list[Any], model: Any, budget: int | None = None
) -> tuple[Session, View, list[Event]]:
    session = Memory().session("s", system="You are a coding agent.")
    session.extend(messages)
    view = session.view("v", pipeline=Pipeline(strategies), llm=model, budget=budget)
    events: list[Event] = []
    view.on_event.append(events.append)
    return session, view, events


def user_seqs(messages: list[Message]) -> list[int]:
    return [i + 2 for i, m in enumerate(messages) if m["role"] == "user"]


def test_fires_only_above_the_threshold() -> None:
    messages = [m for t in "abcde" for m in chat_turn(t)]
    session, view, _ = setup(
        messages, [ThresholdSummarization()], ScriptedModel(default=grouped(ANSWER))
    )
    tokens = view.state().tokens
    assert view.compact(budget=int(tokens / 0.7) + 1).folds == ()
    assert view.compact().folds == ()  # no budget and no absolute threshold: never
    exact = session.view(
        "exact",
        pipeline=Pipeline([ThresholdSummarization(threshold_tokens=tokens)]),
        llm=ScriptedModel(default=grouped(ANSWER)),
    )
    assert exact.compact().folds == ()
    lower_model = ScriptedModel(default=grouped(ANSWER))
    lower = session.view(
        "lower",
        pipeline=Pipeline([ThresholdSummarization(threshold_tokens=tokens - 1)]),
        llm=lower_model,
    )
    # Down to the low mark: as many of the three old blocks as that takes, in one call.
    old = [e.tokens for e in lower.state().entries if e.role == "assistant"][:-2]
    need = tokens - lower.state().low_mark(tokens - 1)
    taken = next(k for k in range(1, len(old) + 1) if sum(old[:k]) >= need)
    assert taken > 1
    assert len(lower.compact().folds) == taken
    assert len(lower_model.calls) == 1
    assert lower.state().tokens <= lower.state().low_mark(tokens - 1)
    assert view.compact(budget=int(tokens / 0.7) - 1).folds != ()


def test_folds_oldest_blocks_first_until_under_the_threshold_keeping_recent_ones() -> None:
    messages = [m for t in "abcdefg" for m in chat_turn(t)]
    model = ScriptedModel(default=grouped(ANSWER))
    session, view, _ = setup(messages, [ThresholdSummarization(threshold_tokens=10)], model)
    view.compact()
    folds = sorted(view.folds(), key=lambda f: f.start)
    answers = [i + 2 for i, m in enumerate(messages) if m["role"] == "assistant"]
    # Never under 10 tokens: every block but the newest two is folded, one a job.
    assert [(f.start, f.end) for f in folds] == [(s, s) for s in answers[:-2]]
    assert len(model.calls) == len(answers) - 2
    for fold in folds:
        assert fold.kind == "summary" and fold.strategy == "threshold"
        assert fold.data["summarized"] is True and fold.data["summary_type"] == "threshold"
        label = f"[folded: seq {fold.start}-{fold.end}]"
        assert fold.messages == ({"role": "assistant", "content": f"{fold.text}\n{label}"},)
        assert fold.text.startswith("[SUMMARIZED]\n" + ANSWER)
    full = session.view("measure").state().tokens
    budget_model = ScriptedModel(default=grouped(ANSWER))
    budget_view = session.view(
        "budget",
        pipeline=Pipeline([ThresholdSummarization()]),
        llm=budget_model,
        budget=int(full * 1.2),
    )
    budget_view.compact()
    folded = sorted(budget_view.folds(), key=lambda f: f.start)
    level = int(0.7 * int(full * 1.2))
    assert full > level
    after = budget_view.state()
    assert 0 < len(folded) < len(folds)
    assert len(budget_model.calls) == 1  # every block it takes, in one call
    assert [f.start for f in folded] == answers[: len(folded)]
    # It takes the oldest blocks until their tokens bring the view down to the low mark:
    # only their summaries, whose size no plan can know, may stay above it.
    taken = [f.tokens_before for f in folded]
    assert sum(taken[:-1]) < full - after.low_mark(level) <= sum(taken)
    # Under its threshold again, it waits for the view to grow back.
    assert after.tokens <= level and budget_view.compact().folds == ()


def test_skips_user_messages_and_summarized_folds_and_keeps_units_whole() -> None:
    messages = turn("a", 7, text_between=True) + turn("b", 3) + turn("c", 1)
    model = ScriptedModel(default=grouped(ANSWER))
    tool_calls = ToolCallSummarization(batch_tokens=0, keep_recent=2)
    threshold = ThresholdSummarization(threshold_tokens=50, keep_recent=1)
    session, view, _ = setup(messages, [tool_calls, threshold], model)
    view.compact()
    active = view.folds()
    by_type: dict[str, list[Any]] = {}
    for fold in active:
        by_type.setdefault(fold.data["summary_type"], []).append(fold)
    assert by_type["tool_calls"] and by_type["threshold"]
    # Tool-call folds stay active: a threshold block never covers a [SUMMARIZED] fold.
    assert view.folds(include_superseded=True) == active
    users = user_seqs(messages)
    for fold in by_type["threshold"]:
        assert not any(fold.start <= u <= fold.end for u in users)
        for summarized in by_type["tool_calls"]:
            assert fold.end < summarized.start or summarized.end < fold.start
    assert_whole_units(session, active)
    prompt = view.render()
    assert [m["content"] for m in prompt if m["role"] == "user"] == [
        messages[u - 2]["content"] for u in users
    ]
    assert tool_unit_faults(prompt) == []


def test_a_block_holds_tool_units_and_text_and_the_prompt_carries_the_request() -> None:
    messages = [
        {"role": "user", "content": "why does tests/test_io.py fail?"},
        {"role": "assistant", "content": "I will look at the reader."},
        *tool_unit("r1"),
        {"role": "assistant", "content": "The reader closes the file twice."},
        *chat_turn("z"),
    ]
    model = ScriptedModel(default=grouped(ANSWER))
    strategy = ThresholdSummarization(threshold_tokens=10, keep_recent=1)
    _, view, _ = setup(messages, [strategy], model)
    view.compact()
    (fold,) = view.folds()
    assert (fold.start, fold.end) == (3, 6)
    assert fold.data["messages"] == 4
    sent = model.calls[0]
    assert sent.messages[0]["content"] == EPISODIC and sent.max_tokens == 1000
    prompt = sent.messages[1]["content"]
    assert prompt.startswith("The following messages are 1 earlier block(s) of your own work")
    assert "=== Group 1 ===\n## User Request\nwhy does tests/test_io.py fail?\n\n" in prompt
    for heading in ("Completed", "Decisions", "Findings", "Dead Ends", "Current State"):
        assert f"\n## {heading}\n" in prompt
    history = prompt.split("<history>\n", 1)[1].split("\n</history>", 1)[0]
    assert history.startswith(
        "[assistant]: I will look at the reader.\n\n[assistant]: -> read_file("
    )
    assert history.endswith("[assistant]: The reader closes the file twice.")


def test_a_trigger_replaces_the_threshold() -> None:
    messages = [m for t in "abcd" for m in chat_turn(t, words=15)]
    strategy = ThresholdSummarization(trigger=MessageCount(9), keep_recent=1, min_tokens=0)
    _, view, _ = setup(messages, [strategy], ScriptedModel(default=grouped(ANSWER)))
    assert view.compact().folds == ()  # 9 rendered messages, not more than 9
    strategy.trigger = MessageCount(8)
    assert len(view.compact().folds) == 3  # every block but the newest


def test_blocks_under_min_tokens_are_not_worth_a_model_call() -> None:
    messages = [*chat_turn("a", words=3), *chat_turn("b"), *chat_turn("c"), *chat_turn("d")]
    model = ScriptedModel(default=grouped(ANSWER))
    strategy = ThresholdSummarization(threshold_tokens=10, keep_recent=1)
    _, view, _ = setup(messages, [strategy], model)
    view.compact()
    assert sorted(f.start for f in view.folds()) == [5, 7]
    assert len(model.calls) == 2
    assert messages[1] in view.render()


def test_a_rejected_summary_fails_the_job_and_keeps_the_previous_folds() -> None:
    messages = [m for t in "abc" for m in chat_turn(t)]
    model = ScriptedModel(["", "", ""])
    session, view, events = setup(messages, [ThresholdSummarization(threshold_tokens=10)], model)
    before = copy.deepcopy(session.history())
    report = view.compact()
    assert report.folds == () and report.failed == ("threshold",)
    assert view.folds() == []
    assert [e.kind for e in events] == ["planned", "started", "failed", "degraded"]
    assert session.history() == before


def test_pins_what_the_summary_dropped() -> None:
    messages = [*chat_turn("loader_v2"), *chat_turn("b"), *chat_turn("c")]
    model = ScriptedModel(default=grouped("I explained the loader."))
    _, view, _ = setup(messages, [ThresholdSummarization(threshold_tokens=10)], model)
    view.compact()
    first = min(view.folds(), key=lambda f: f.start)
    assert first.data["pinned"] == ["loader_v2"]
    assert first.text.endswith("Pinned (verbatim from the folded messages):\n- loader_v2")


def test_on_real_agent_runs_a_whole_turn_of_tool_units_becomes_one_block() -> None:
    rows = [r for r in load_rows("openhands_example") if user_seqs(r["messages"][1:]) != [2]]
    assert len(rows) == 2
    for row in rows:
        session = Memory().session("s")
        session.extend(row["messages"])
        before = copy.deepcopy(session.history())
        answered = {m["tool_call_id"] for m in before if m["role"] == "tool"}
        model = ScriptedModel(default=grouped(ANSWER))
        view = session.view(
            "v",
            pipeline=Pipeline([ThresholdSummarization(keep_recent=1)]),
            llm=model,
            budget=session.view("measure").state().tokens,
        )
        view.compact()
        (fold,) = view.folds()
        first_user, second_user = [i + 1 for i, m in enumerate(before) if m["role"] == "user"]
        assert (fold.start, fold.end) == (first_user + 1, second_user - 1)
        assert fold.data["messages"] == second_user - first_user - 1
        assert len(model.calls) == 1
        prompt = view.render()
        assert [m["role"] for m in prompt[:4]] == ["system", "user", "assistant", "user"]
        assert tool_unit_faults(prompt, answered=answered) == []
        assert session.history() == before


def test_above_a_floor_it_cannot_go_under_it_waits_for_the_gap_between_its_marks() -> None:
    """Blocks age one a turn; each call takes enough of them to amortize its prompt."""
    big = {"role": "user", "content": "Keep this spec in mind: " + "the loader must stream " * 300}
    model = ScriptedModel(default=grouped("I answered."))
    strategy = ThresholdSummarization(threshold_tokens=1000, keep_recent=1)
    session, view, _ = setup([big, {"role": "assistant", "content": "Noted."}], [strategy], model)
    for k in range(30):
        session.extend(chat_turn(f"m{k}", words=40))
        view.compact()
        assert view.state().tokens > 1000  # the spec alone keeps it above the threshold
    low = view.state().low_mark(1000)
    batches: list[list[Any]] = []
    for fold in sorted(view.folds(), key=lambda f: f.start):
        if fold.usage is not None:  # the first fold of a call carries its usage
            batches.append([])
        batches[-1].append(fold)
    assert 1 < len(model.calls) == len(batches) <= 30 // 3
    for batch in batches:
        assert sum(f.tokens_before for f in batch) >= 1000 - low
