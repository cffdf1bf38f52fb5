from __future__ import annotations

import json
from typing import Any

import pytest

from contextfold import Memory, Session, View
from contextfold.core.errors import InvalidInput
from contextfold.core.events import Event
from contextfold.core.messages import text_of
from contextfold.strategies import Pipeline
from contextfold.strategies.round_compressor import SCHEMAS, RoundCompressor
from contextfold.strategies.triggers import Always
from contextfold.testing import ScriptedModel

TOPICS = ["apples", "bridges", "castles", "dunes", "engines", "forests", "glaciers", "harbors"]


def chat_round(i: int) -> list[dict[str, Any]]:
    topic = TOPICS[(i - 1) % len(TOPICS)]
    return [
        {"role": "user", "content": f"Round {i} question: tell me about {topic}."},
        {"role": "assistant", "content": f"Round {i} answer: {topic} are interesting."},
    ]


def code_round(i: int) -> list[dict[str, Any]]:
    code = f"table_{i} = load_table('/data/part{i}.csv')\nprint(len(table_{i}))"
    call = {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": "python", "arguments": json.dumps({"code": code})},
    }
    return [
        {"role": "user", "content": f"Load part {i} of the sales data."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": f"{i}00"},
        {"role": "assistant", "content": f"Part {i} has {i}00 rows in table_{i}."},
    ]


def answer(summary: str, variables: list[dict[str, str]] | None = None) -> str:
    body: dict[str, Any] = {"ConversationSummary": summary}
    if variables is not None:
        body["Variables"] = variables
    return json.dumps(body)


def build(
    rounds: int, strategy: RoundCompressor, model: Any, *, code: bool = False
) -> tuple[Session, View]:
    session = Memory().session("s", system="You are a data assistant.")
    for i in range(1, rounds + 1):
        session.extend(code_round(i) if code else chat_round(i))
    view = session.view("v", pipeline=Pipeline([strategy]), llm=model)
    return session, view


def test_defaults_fire_at_five_closed_rounds_and_fold_the_oldest_two() -> None:
    model = ScriptedModel(default=answer("Rounds about apples and bridges."))
    session, view = build(4, RoundCompressor(), model)
    assert view.compact().folds == ()
    session.append({"role": "user", "content": "Round 5 question: tell me about engines."})
    assert view.compact().folds == ()
    assert model.calls == []
    session.append({"role": "assistant", "content": "Round 5 answer: engines are loud."})
    report = view.compact()
    assert len(report.folds) == 1
    fold = report.folds[0]
    assert (fold.start, fold.end) == (2, 5)
    assert fold.data["rounds"] == [1, 2]
    assert len(model.calls) == 1
    sent = text_of(model.calls[0].messages[-1])
    assert "Round 1 question" in sent
    assert "Round 2 answer" in sent
    assert "Round 3" not in sent
    rendered = view.render()
    assert rendered[1]["role"] == "user"
    assert rendered[1]["content"].startswith("[Conversation Summary (Rounds 1-2)]\n")
    assert "apples and bridges" in rendered[1]["content"]
    assert rendered[2]["content"] == "Round 3 question: tell me about castles."


def test_settings_change_when_it_fires() -> None:
    model = ScriptedModel(default=answer("Summary."))
    _, view = build(4, RoundCompressor(rounds_to_compress=1, rounds_to_retain=2), model)
    fold = view.compact().folds[0]
    assert fold.data["rounds"] == [1, 2]
    _, always = build(2, RoundCompressor(trigger=Always()), ScriptedModel(default=answer("S.")))
    assert always.compact().folds == ()
    _, always = build(4, RoundCompressor(trigger=Always()), ScriptedModel(default=answer("S.")))
    assert always.compact().folds[0].data["rounds"] == [1, 1]


def test_second_compression_starts_from_the_previous_summary() -> None:
    model = ScriptedModel([answer("FIRST: apples then bridges."), answer("SECOND: up to dunes.")])
    session, view = build(5, RoundCompressor(), model)
    first = view.compact().folds[0]
    for i in (6, 7):
        session.extend(chat_round(i))
    second = view.compact().folds[0]
    sent = text_of(model.calls[1].messages[-1])
    assert "FIRST: apples then bridges." in sent
    assert "Round 3 question" in sent and "Round 4 answer" in sent
    assert "Round 1 question" not in sent and "Round 5" not in sent
    assert (second.start, second.end) == (first.start, 9)
    assert second.data["rounds"] == [1, 4]
    assert second.data["compressed_rounds"] == [3, 4]
    assert [f.id for f in view.folds()] == [second.id]
    old = [f for f in view.folds(include_superseded=True) if f.id == first.id]
    assert old[0].superseded_by == second.id
    assert "SECOND: up to dunes." in view.render()[1]["content"]
    assert "Previous summary" in sent
    assert text_of(model.calls[0].messages[-1]).count("None") >= 1


def test_planner_view_keeps_only_the_summary() -> None:
    model = ScriptedModel([answer("The user asked about apples and bridges.")])
    _, view = build(5, RoundCompressor(kind="planner"), model)
    fold = view.compact().folds[0]
    assert model.calls[0].schema == SCHEMAS["planner"]
    assert "Variables" not in fold.data
    assert "Variables" not in fold.text
    assert fold.data["ConversationSummary"] == "The user asked about apples and bridges."
    assert fold.data["kind"] == "planner"


def test_code_view_keeps_variables_not_code() -> None:
    variables = [
        {"name": "table_1", "type": "DataFrame", "description": "part 1 of the sales data"},
        {"name": "table_2", "type": "DataFrame", "description": "part 2 of the sales data"},
    ]
    summary = "Parts 1 and 2 of /data/part1.csv and /data/part2.csv were loaded (100 and 200 rows)."
    model = ScriptedModel([answer(summary, variables)])
    _, view = build(5, RoundCompressor(kind="code"), model, code=True)
    fold = view.compact().folds[0]
    assert model.calls[0].schema == SCHEMAS["code"]
    assert "Variables" in SCHEMAS["code"]["properties"]
    sent = text_of(model.calls[0].messages[-1])
    assert "table_1 = load_table" in sent
    assert fold.data["Variables"] == variables
    assert "- table_1 (DataFrame): part 1 of the sales data" in fold.text
    assert "load_table(" not in fold.text
    assert "print(len(" not in fold.text
    assert fold.messages[0]["content"] == f"{fold.text}\n[folded: seq {fold.start}-{fold.end}]"


def test_rejected_answers_are_retried_then_the_view_keeps_its_folds() -> None:
    model = ScriptedModel(["", "Error: upstream rate limit", '{"Summary": "wrong key"}'])
    session, view = build(5, RoundCompressor(), model)
    history = session.history()
    events: list[Event] = []
    view.on_event.append(events.append)
    report = view.compact()
    assert report.failed == ("round_compressor",)
    assert report.folds == ()
    assert len(model.calls) == 3
    assert view.folds(include_superseded=True) == []
    assert session.history() == history
    assert [e.kind for e in events] == ["planned", "started", "failed", "degraded"]
    assert "lacks the required key(s) ConversationSummary" in events[2].detail


def test_json_without_a_summary_is_rejected() -> None:
    model = ScriptedModel([json.dumps({"Summary": "wrong key"}), answer("Right key.")])
    _, view = build(5, RoundCompressor(), model)
    fold = view.compact().folds[0]
    assert fold.data["attempts"] == 2
    assert fold.usage is not None and fold.usage["calls"] == 2
    assert fold.data["ConversationSummary"] == "Right key."


def test_dropped_must_keep_items_are_pinned() -> None:
    model = ScriptedModel([answer("Two parts were loaded.", [])])
    _, view = build(5, RoundCompressor(kind="code"), model, code=True)
    fold = view.compact().folds[0]
    assert "/data/part1.csv" in fold.data["pinned"]
    assert "Pinned (verbatim from the folded messages):" in fold.text
    assert "- /data/part1.csv" in fold.text
    assert "/data/part3.csv" not in fold.data["pinned"]


def test_offline_stand_in_runs_without_a_model() -> None:
    session, view = build(5, RoundCompressor(kind="code"), None, code=True)
    fold = view.compact().folds[0]
    assert fold.usage is not None and fold.usage["model"] == "offline"
    assert [v["name"] for v in fold.data["Variables"]] == ["table_1", "table_2"]
    assert fold.tokens_after < fold.tokens_before
    for i in (6, 7):
        session.extend(code_round(i))
    second = view.compact().folds[0]
    assert second.data["rounds"] == [1, 4]
    names = [v["name"] for v in second.data["Variables"]]
    assert names[:2] == ["table_1", "table_2"]
    assert set(names) == {"table_1", "table_2", "table_3", "table_4"}


def test_prompt_override_and_tool_units_stay_whole() -> None:
    model = ScriptedModel(default=answer("S.", []))
    strategy = RoundCompressor(kind="code", prompt="Before: {previous_summary}\nRounds: {content}")
    session, view = build(5, strategy, model, code=True)
    fold = view.compact().folds[0]
    sent = text_of(model.calls[0].messages[-1])
    assert sent.startswith("Before: None\nRounds: <history>\n[user]: Load part 1")
    assert (fold.start, fold.end) == (2, 9)
    assert session.history()[fold.end - 1]["content"] == "Part 2 has 200 rows in table_2."


@pytest.mark.parametrize("kind", ["planner", "code"])
def test_built_in_templates_fill(kind: str) -> None:
    model = ScriptedModel(default=answer("S.", []))
    _, view = build(5, RoundCompressor(kind=kind), model)  # type: ignore[arg-type]
    view.compact()
    sent = text_of(model.calls[0].messages[-1])
    assert "ConversationSummary" in sent
    assert ("Variables" in sent) == (kind == "code")
    assert "{" not in sent.split("## Previous summary")[1]


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(InvalidInput, match="kind"):
        RoundCompressor(kind="writer")  # type: ignore[arg-type]


def test_with_a_budget_it_waits_for_the_high_water_then_keeps_only_the_retained_rounds() -> None:
    model = ScriptedModel(default=answer("Summary so far."))
    session = Memory().session("s", system="You are a data assistant.")
    view = session.view("v", pipeline=Pipeline([RoundCompressor()]), budget=2000, llm=model)
    i = 0
    while view.state().tokens <= view.state().high_mark(2000):
        assert view.compact().folds == ()
        i += 1
        session.extend(chat_round(i))
    assert i > 5 and model.calls == []
    (fold,) = view.compact().folds
    assert fold.data["rounds"] == [1, i - 3]
    assert len(view.state().unfolded_rounds) == 3
    assert view.state().tokens <= view.state().low_mark(2000)
    grown = 0
    while len(model.calls) == 1:
        i += 1
        grown += 1
        session.extend(chat_round(i))
        view.compact()
    assert grown > 20


def test_pins_are_carried_over_without_being_read_again() -> None:
    model = ScriptedModel([answer("Two parts were loaded.", []), answer("Four parts.", [])])
    session, view = build(5, RoundCompressor(kind="code"), model, code=True)
    first = view.compact().folds[0]
    assert "/data/part1.csv" in first.data["pinned"]
    for i in (6, 7):
        session.extend(code_round(i))
    second = view.compact().folds[0]
    sent = text_of(model.calls[1].messages[-1])
    assert "Two parts were loaded." in sent
    assert "/data/part1.csv" not in sent  # the previous summary is sent without its pins
    assert "/data/part1.csv" in second.data["pinned"]
    assert second.data["pinned"][-1] == "400 rows"  # the newest come last


def test_pins_share_the_answer_token_cap_newest_first() -> None:
    model = ScriptedModel([answer("Parts were loaded.", [])])
    _, view = build(5, RoundCompressor(kind="code", max_tokens=40), model, code=True)
    fold = view.compact().folds[0]
    counter = Memory().session("c").counter
    body = fold.text.split("Pinned (verbatim from the folded messages):")[0]
    assert (
        counter.text(body) + sum(counter.text(f"- {item}") + 1 for item in fold.data["pinned"])
        <= 40
    )
    assert fold.data["pinned"]
    assert fold.data["pinned"][-1] == "200 rows"
    assert "/data/part1.csv" not in fold.data["pinned"]


def test_the_round_compressor_is_deprecated_for_the_rolling_compactor() -> None:
    with pytest.warns(DeprecationWarning, match="RollingCompactor"):
        RoundCompressor()
    with pytest.warns(DeprecationWarning, match="migrating-from-round-compressor"):
        Memory().session("s").view("v", preset="round-compressor")
