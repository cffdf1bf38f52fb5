"""The provider check: each documented rule as a fault it finds, and every preset's
prompts on real agent runs, in both formats, free of faults."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import load_rows

from contextfold import BudgetError, InvalidInput, Memory, check_prompt, prompt_faults
from contextfold.formats.anthropic import to_anthropic
from contextfold.strategies import preset_names


def call(call_id: str, name: str = "lookup") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def asks(*ids: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [call(i) for i in ids]}


def tool(call_id: str, content: str = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


USER = {"role": "user", "content": "Book a flight to Lisbon."}
GOOD_OPENAI: list[dict[str, Any]] = [
    {"role": "system", "content": "You are an airline agent."},
    USER,
    asks("c1", "c2"),
    tool("c2", "TP1 at 10:00"),
    {**tool("c1", "seat 3A"), "name": "lookup"},
    {"role": "assistant", "content": "Booked TP1, seat 3A."},
    {"role": "user", "name": "ann_lee", "content": [{"type": "text", "text": "Thanks"}]},
]


def test_a_valid_openai_prompt_has_no_fault() -> None:
    assert prompt_faults(GOOD_OPENAI) == []
    check_prompt(GOOD_OPENAI, "openai")


OPENAI_FAULTS: list[tuple[str, list[Any], tuple[int | None, str | None]]] = [
    ("no message", [], (None, "messages")),
    ("not an object", [USER, "hi"], (1, None)),
    ("unknown role", [{"role": "bot", "content": "x"}], (0, "role")),
    ("meta is never sent", [{**USER, "meta": {}}], (0, "meta")),
    ("refusal on a user", [{**USER, "refusal": "no"}], (0, "refusal")),
    ("user without content", [{"role": "user", "content": None}], (0, "content")),
    ("empty parts", [{"role": "user", "content": []}], (0, "content")),
    (
        "image from the system",
        [{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
        (0, "content[0].type"),
    ),
    (
        "image without url",
        [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}],
        (0, "content[0].image_url"),
    ),
    ("name with a space", [{**USER, "name": "Ann Lee"}], (0, "name")),
    ("empty tool_calls", [USER, {"role": "assistant", "content": "x", "tool_calls": []}], (1, "tool_calls")),
    (
        "call without type",
        [USER, {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]}],
        (1, "tool_calls[0].type"),
    ),
    (
        "arguments as an object",
        [USER, {"role": "assistant", "content": None, "tool_calls": [{**call("c"), "function": {"name": "f", "arguments": {}}}]}],
        (1, "tool_calls[0].function.arguments"),
    ),
    ("tool without id", [USER, asks("c"), {"role": "tool", "content": "x"}], (2, "tool_call_id")),
    ("a call never answered", [USER, asks("c1")], (1, "tool_calls")),
    ("one of two calls answered", [USER, asks("c1", "c2"), tool("c1")], (1, "tool_calls")),
    ("a user between call and result", [USER, asks("c1"), USER, tool("c1")], (1, "tool_calls")),
    ("an orphan result", [USER, tool("c9")], (1, "tool_call_id")),
    (
        "a result two turns late",
        [USER, asks("c1"), tool("c1"), asks("c2"), tool("c2"), tool("c1")],
        (5, "tool_call_id"),
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("messages", "where"), [c[1:] for c in OPENAI_FAULTS], ids=[c[0] for c in OPENAI_FAULTS]
)
def test_openai_faults_name_index_and_field(
    messages: list[Any], where: tuple[int | None, str | None]
) -> None:
    faults = prompt_faults(messages, "openai")
    assert faults, "the fault is found"
    assert (faults[0].index, faults[0].field) == where
    with pytest.raises(InvalidInput) as info:
        check_prompt(messages, "openai")
    assert (info.value.index, info.value.field) == where
    assert "openai would refuse this prompt" in str(info.value)


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def use(use_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": use_id, "name": "lookup", "input": {}}


def result(use_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": use_id, "content": "ok"}


def user(*blocks: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


GOOD_ANTHROPIC = [
    {"role": "user", "content": "Book a flight."},
    assistant(text("Searching."), use("c1"), use("c2")),
    user(result("c1"), result("c2"), text("Quickly, please.")),
    assistant(text("Booked")),
]


def test_a_valid_anthropic_prompt_has_no_fault() -> None:
    assert prompt_faults(GOOD_ANTHROPIC, "anthropic", system="Be brief.") == []
    assert prompt_faults(GOOD_ANTHROPIC, "anthropic", system=[text("Be brief.")]) == []


ANTHROPIC_FAULTS: list[tuple[str, list[Any], tuple[int | None, str | None]]] = [
    ("no message", [], (None, "messages")),
    ("assistant first", [assistant(text("[GOAL BATCH] ...")), user(text("hi"))], (0, "role")),
    ("two user turns", [user(text("a")), user(text("b"))], (1, "role")),
    ("a system role", [{"role": "system", "content": "x"}], (0, "role")),
    ("a name", [{**user(text("a")), "name": "ann"}], (0, "name")),
    ("empty content", [user()], (0, "content")),
    ("blank string", [{"role": "user", "content": " "}], (0, "content")),
    ("blank text block", [user(text("\n"))], (0, "content[0].text")),
    ("tool_use from the user", [user(use("c1"))], (0, "content[0].type")),
    ("bad tool_use id", [user(text("a")), assistant(use("call.1")), user(result("call.1"))], (1, "content[0].id")),
    ("tool_use id twice", [user(text("a")), assistant(use("c1"), use("c1")), user(result("c1"))], (1, "content[1].id")),
    ("input not an object", [user(text("a")), assistant({**use("c1"), "input": "x"}), user(result("c1"))], (1, "content[0].input")),
    ("tool_use unanswered", [user(text("a")), assistant(use("c1")), user(text("b"))], (1, "content")),
    ("result after text", [user(text("a")), assistant(use("c1")), user(text("b"), result("c1"))], (2, "content[1].type")),
    ("result answering nothing", [user(text("a")), assistant(text("b")), user(result("c1"))], (2, "content[0].tool_use_id")),
    ("final whitespace", [user(text("a")), assistant(text("b "))], (1, "content[0].text")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("messages", "where"), [c[1:] for c in ANTHROPIC_FAULTS], ids=[c[0] for c in ANTHROPIC_FAULTS]
)
def test_anthropic_faults_name_index_and_field(
    messages: list[Any], where: tuple[int | None, str | None]
) -> None:
    faults = prompt_faults(messages, "anthropic")
    assert faults, "the fault is found"
    assert (faults[0].index, faults[0].field) == where
    with pytest.raises(InvalidInput) as info:
        check_prompt(messages, "anthropic")
    assert (info.value.index, info.value.field) == where


def test_anthropic_system_blocks_are_text() -> None:
    (fault,) = prompt_faults([user(text("a"))], "anthropic", system=[{"type": "image"}])
    assert (fault.index, fault.field) == (None, "system[0].type")


def test_the_check_itself_refuses_what_it_cannot_answer() -> None:
    with pytest.raises(InvalidInput) as info:
        prompt_faults([USER], "gemini")
    assert info.value.field == "provider"
    with pytest.raises(InvalidInput) as info:
        prompt_faults([USER], "openai", system="apart")
    assert info.value.field == "system"
    (fault,) = prompt_faults("hello", "openai")  # type: ignore[arg-type]
    assert fault.field == "messages"
    assert str(fault) == "field 'messages': messages must be a list"


def real_runs() -> list[tuple[str, list[dict[str, Any]]]]:
    tau = load_rows("taubench_airline_dev", 40)
    agent = min(load_rows("openhands_example"), key=lambda r: len(r["messages"]))
    picked = [tau[i] for i in (0, 7, 19, 33)] + [agent]
    return [(row["id"], row["messages"]) for row in picked]


@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_renders_prompts_both_providers_accept(preset: str) -> None:
    """Every rendered prompt passes the OpenAI check, and its Anthropic form the Anthropic one."""
    checked = 0
    for run_id, messages in real_runs():
        for budget in (1_500, 6_000):
            session = Memory().session(run_id)
            session.extend(messages)
            view = session.view("v", preset=preset, budget=budget)
            try:
                view.compact()
                prompt = view.render()
            except BudgetError:
                continue  # a system prompt and task larger than the budget: nothing to send
            assert prompt_faults(prompt, "openai") == [], (run_id, budget)
            system, turns = to_anthropic(prompt)
            assert prompt_faults(turns, "anthropic", system=system) == [], (run_id, budget)
            checked += 1
    assert checked >= 8


def test_a_goal_batch_first_is_sent_to_anthropic_after_a_user_turn() -> None:
    # Issue 9, point 6: after a goal batch the first turn was the assistant's [GOAL BATCH].
    (row,) = load_rows("taubench_airline_dev", 1)
    session = Memory().session(row["id"])
    session.extend(row["messages"])
    view = session.view(
        "v",
        preset="adr-0041",
        budget=6_000,
        goal_batch={"min_turns_old_threshold": 4, "min_turns_to_compact": 1},
        tool_calls={"keep_recent": 1, "batch_size": 1},
    )
    view.compact()
    prompt = view.render()
    opening = next(m for m in prompt if m["role"] != "system")
    assert opening["role"] == "assistant" and opening["content"].startswith("[GOAL BATCH]")
    assert prompt_faults(prompt, "openai") == []
    system, turns = to_anthropic(prompt)
    assert turns[0]["role"] == "user" and turns[1]["role"] == "assistant"
    check_prompt(turns, "anthropic", system=system)
