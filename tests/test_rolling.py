from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import NATO

from contextfold import Memory, Session, View
from contextfold.core.errors import InvalidInput
from contextfold.core.events import Event
from contextfold.core.messages import text_of
from contextfold.strategies import Pipeline
from contextfold.strategies.rolling import RollingCompactor
from contextfold.strategies.triggers import Always
from contextfold.testing import ScriptedModel

HEADER = "[Conversation History Summary (Rounds 1-{})]"


def chat_round(i: int) -> list[dict[str, Any]]:
    step = NATO[i - 1]
    return [
        {"role": "user", "content": f"Question {step}: what is the {step} step of the plan?"},
        {"role": "assistant", "content": f"Answer {step}: the {step} step is done."},
    ]


def tool_round(i: int, output: str) -> list[dict[str, Any]]:
    call = {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": "shell", "arguments": json.dumps({"cmd": f"make step{i}"})},
    }
    return [
        {"role": "user", "content": f"Question {i}: run step {i}."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": output},
        {"role": "assistant", "content": f"Answer {i}: step {i} ran."},
    ]


def build(rounds: int, strategy: RollingCompactor, model: Any) -> tuple[Session, View]:
    session = Memory().session("s", system="You plan tasks.")
    for i in range(1, rounds + 1):
        session.extend(chat_round(i))
    return session, session.view("v", pipeline=Pipeline([strategy]), llm=model)


def sent(model: ScriptedModel, call: int = -1) -> str:
    return text_of(model.calls[call].messages[-1])


def test_defaults_fire_past_ten_rounds_and_keep_the_last_three() -> None:
    model = ScriptedModel(default="Steps 1 to 8 of the plan are done.")
    session, view = build(10, RollingCompactor(), model)
    assert view.compact().folds == ()
    assert model.calls == []
    # As in the seed, the round just begun counts: it is one of the three kept.
    session.append({"role": "user", "content": "Question kilo: and now?"})
    fold = view.compact().folds[0]
    assert (fold.start, fold.end) == (2, 17)
    assert fold.data["start_index"] == 1
    assert fold.data["end_index"] == 8
    assert fold.data["summary"] == "Steps 1 to 8 of the plan are done."
    rendered = view.render()
    assert rendered[1] == {
        "role": "system",
        "content": HEADER.format(8) + "\nSteps 1 to 8 of the plan are done.\n[folded: seq 2-17]",
    }
    assert rendered[2]["content"] == "Question india: what is the india step of the plan?"
    assert [m["content"] for m in rendered[-1:]] == ["Question kilo: and now?"]
    assert len(rendered) == 2 + 2 * 2 + 1
    assert fold.tokens_after == view.session.counter.message(rendered[1])


def test_prompt_is_the_seed_template_over_the_seed_input() -> None:
    model = ScriptedModel(default="Summary.")
    _, view = build(11, RollingCompactor(), model)
    view.compact()
    prompt = sent(model)
    assert prompt.startswith("Summarize the following conversation history for a task planning")
    assert "Focus on: task progress, decisions made, pending items." in prompt
    assert "Round 1: Question alpha: what is the alpha step of the plan?\n\n" in prompt
    assert "\n\n  [assistant]: Answer alpha: the alpha step is done.\n\n" in prompt
    assert "Round 8: Question hotel" in prompt
    assert "Round 9" not in prompt and "india" not in prompt
    assert "Previous Summary" not in prompt
    assert "<history>" in prompt and prompt.rstrip().endswith("</history>")


def test_seed_timeline_one_fold_replaced_each_cycle() -> None:
    model = ScriptedModel(["S7: rounds one to seven.", "S12: up to twelve.", "S17: all."])
    session, view = build(10, RollingCompactor(threshold=7, retain_recent=3), model)
    first = view.compact().folds[0]
    assert first.data["end_index"] == 7
    for i in range(11, 16):
        session.extend(chat_round(i))
    second = view.compact().folds[0]
    prompt = sent(model, 1)
    assert "[Previous Summary (Rounds 1-7)]:\nS7: rounds one to seven." in prompt
    assert "Round 8: Question hotel" in prompt and "Round 12: Question lima" in prompt
    assert "Round 7" not in prompt and "Question mike" not in prompt
    assert "Question charlie" not in prompt
    assert (second.start, second.data["start_index"], second.data["end_index"]) == (2, 1, 12)
    assert second.data["previous_end_index"] == 7
    assert [f.id for f in view.folds()] == [second.id]
    superseded = {f.id: f.superseded_by for f in view.folds(include_superseded=True)}
    assert superseded[first.id] == second.id
    for i in range(16, 21):
        session.extend(chat_round(i))
    third = view.compact().folds[0]
    assert "[Previous Summary (Rounds 1-12)]:\nS12: up to twelve." in sent(model, 2)
    assert third.data["end_index"] == 17
    assert view.render()[1]["content"] == HEADER.format(17) + "\nS17: all.\n[folded: seq 2-35]"
    assert view.render()[2]["content"] == "Question romeo: what is the romeo step of the plan?"


def test_posts_are_cut_as_the_seed_cuts_them() -> None:
    output = "x" * 500
    session = Memory().session("s")
    for i in range(1, 5):
        session.extend(tool_round(i, output))
    model = ScriptedModel(default="Ran steps.")
    strategy = RollingCompactor(threshold=3, retain_recent=1, post_chars=60)
    view = session.view("v", pipeline=Pipeline([strategy]), llm=model)
    fold = view.compact().folds[0]
    prompt = sent(model)
    assert '  [assistant]: -> shell({"cmd": "make step1"})' in prompt
    assert "  [tool shell]: " + "x" * 46 + "…" in prompt
    assert "x" * 47 not in prompt
    assert fold.end == 12
    assert session.history()[fold.end - 1]["content"] == "Answer 3: step 3 ran."
    assert fold.data["end_index"] == 3


def test_round_in_progress_is_never_folded() -> None:
    model = ScriptedModel(default="Summary.")
    session, view = build(3, RollingCompactor(threshold=2, retain_recent=0), model)
    session.append({"role": "user", "content": "Question delta: still thinking?"})
    fold = view.compact().folds[0]
    assert fold.data["end_index"] == 3
    assert view.render()[-1]["content"] == "Question delta: still thinking?"


def test_code_prompt_override_and_trigger() -> None:
    model = ScriptedModel(default="Summary.")
    _, view = build(5, RollingCompactor(kind="code", trigger=Always()), model)
    fold = view.compact().folds[0]
    assert fold.data["end_index"] == 2
    assert "for a code execution agent" in sent(model)
    assert "variables created, data transformations, code execution results" in sent(model)
    custom = ScriptedModel(default="Summary.")
    _, view = build(12, RollingCompactor(prompt="Squeeze this:\n{content}"), custom)
    view.compact()
    assert sent(custom).startswith("Squeeze this:\n<history>\nRound 1: Question alpha")


def test_rejected_answers_are_retried_then_the_view_keeps_its_folds() -> None:
    model = ScriptedModel(["", "I'm sorry, I cannot help with that.", "  "])
    session, view = build(11, RollingCompactor(), model)
    history = session.history()
    events: list[Event] = []
    view.on_event.append(events.append)
    report = view.compact()
    assert report.failed == ("rolling",)
    assert report.folds == ()
    assert len(model.calls) == 3
    assert view.folds(include_superseded=True) == []
    assert session.history() == history
    assert [e.kind for e in events] == ["planned", "started", "failed", "degraded"]


def test_failed_second_cycle_keeps_the_first_fold() -> None:
    model = ScriptedModel(["First summary.", "", "", ""])
    session, view = build(11, RollingCompactor(), model)
    first = view.compact().folds[0]
    for i in range(12, 23):
        session.extend(chat_round(i))
    report = view.compact()
    assert report.failed == ("rolling",)
    assert [f.id for f in view.folds()] == [first.id]
    assert view.render()[1]["content"] == HEADER.format(8) + "\nFirst summary.\n[folded: seq 2-17]"


def test_retry_then_accept_and_pins_what_the_summary_dropped() -> None:
    session = Memory().session("s")
    session.extend(tool_round(1, "wrote /srv/app/config.yaml and build 4711 passed"))
    for i in range(2, 13):
        session.extend(chat_round(i))
    model = ScriptedModel(["Error: upstream timeout", "Step one configured the app."])
    view = session.view("v", pipeline=Pipeline([RollingCompactor()]), llm=model)
    fold = view.compact().folds[0]
    assert fold.data["attempts"] == 2
    assert fold.usage is not None and fold.usage["calls"] == 2
    assert "/srv/app/config.yaml" in fold.data["pinned"]
    assert "build: 4711" in fold.data["pinned"]
    assert "- /srv/app/config.yaml" in fold.text
    assert fold.data["summary"].startswith("Step one configured the app.\n\nPinned")


def test_offline_stand_in_runs_without_a_model() -> None:
    session = Memory().session("s", system="You plan tasks.")
    for i in range(1, 12):
        session.extend(
            tool_round(i, f"step {i} output: " + " ".join(f"w{i}x{k}" for k in range(60)))
        )
    view = session.view("v", pipeline=Pipeline([RollingCompactor()]))
    fold = view.compact().folds[0]
    assert fold.usage is not None and fold.usage["model"] == "offline"
    assert fold.text.startswith(HEADER.format(8) + "\n")
    assert fold.tokens_after < fold.tokens_before
    assert fold.messages[0]["role"] == "system"


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(InvalidInput, match="kind"):
        RollingCompactor(kind="writer")  # type: ignore[arg-type]


def test_an_answer_opening_with_a_copied_header_is_used_once_without_it() -> None:
    # A model may echo the header it read; asking again would re-send the whole prompt.
    copied = "[Previous Summary (Rounds 1-8)]:\nSteps 1 to 8 of the plan are done."
    model = ScriptedModel([copied])
    session, view = build(11, RollingCompactor(), model)
    session.append({"role": "user", "content": "Question lima: and now?"})
    fold = view.compact().folds[0]
    assert len(model.calls) == 1
    assert fold.data["summary"] == "Steps 1 to 8 of the plan are done."
    assert fold.text.startswith(HEADER.format(9) + "\nSteps 1 to 8 of the plan are done.")


def test_an_answer_that_is_only_a_header_is_asked_for_again() -> None:
    model = ScriptedModel([HEADER.format(8), "Steps 1 to 8 of the plan are done."])
    _, view = build(11, RollingCompactor(), model)
    fold = view.compact().folds[0]
    assert len(model.calls) == 2
    assert "only a summary header" in sent(model, 1)
    assert fold.data["summary"] == "Steps 1 to 8 of the plan are done."
