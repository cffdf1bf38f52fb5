"""Validation of OpenAI-format messages: every refusal names its index and field,
and every message of the real data files is accepted as it is."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from conftest import load_rows

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import (
    for_model,
    text_of,
    validate_message,
    validate_messages,
)

DATA_FILES = ["locomo_dev", "longmemeval_oracle_dev", "taubench_airline_dev", "openhands_example"]
IMAGE = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}


def call(call_id: str, name: str = "lookup", arguments: str = "{}") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def refused(messages: list[Any], **kwargs: Any) -> InvalidInput:
    with pytest.raises(InvalidInput) as info:
        validate_messages(messages, **kwargs)
    return info.value


USER: dict[str, Any] = {"role": "user", "content": "hi"}


@pytest.mark.parametrize("role", ["robot", "", None, "User", 3])
def test_unknown_role_names_index_and_field(role: Any) -> None:
    exc = refused([USER, {"role": role, "content": "x"}])
    assert (exc.index, exc.field) == (1, "role")


def test_missing_role() -> None:
    exc = refused([{"content": "x"}])
    assert (exc.index, exc.field) == (0, "role")


def test_offset_shifts_the_index() -> None:
    exc = refused([USER, {"role": "robot", "content": "x"}], offset=40)
    assert (exc.index, exc.field) == (41, "role")
    assert "message 41" in str(exc)


def test_tool_result_without_any_call() -> None:
    exc = refused([USER, {"role": "tool", "tool_call_id": "c1", "content": "ok"}])
    assert (exc.index, exc.field) == (1, "tool_call_id")


def test_tool_result_whose_call_comes_later() -> None:
    msgs = [
        USER,
        {"role": "tool", "tool_call_id": "c1", "content": "early"},
        {"role": "assistant", "content": None, "tool_calls": [call("c1")]},
    ]
    exc = refused(msgs)
    assert (exc.index, exc.field) == (1, "tool_call_id")


def test_tool_result_with_a_different_id() -> None:
    msgs = [
        USER,
        {"role": "assistant", "content": None, "tool_calls": [call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "tool", "tool_call_id": "c2", "content": "who?"},
    ]
    exc = refused(msgs)
    assert (exc.index, exc.field) == (3, "tool_call_id")


def test_open_calls_let_a_result_answer_an_earlier_batch() -> None:
    msgs = [{"role": "tool", "tool_call_id": "c9", "content": "ok"}]
    assert validate_messages(msgs, open_calls={"c9"}) == msgs
    exc = refused(msgs, open_calls={"c8"}, offset=10)
    assert (exc.index, exc.field) == (10, "tool_call_id")


@pytest.mark.parametrize("call_id", [None, "", 7])
def test_tool_message_needs_a_tool_call_id(call_id: Any) -> None:
    msg: dict[str, Any] = {"role": "tool", "content": "ok"}
    if call_id is not None:
        msg["tool_call_id"] = call_id
    exc = refused([msg])
    assert (exc.index, exc.field) == (0, "tool_call_id")


def test_tool_call_id_only_on_tool_messages() -> None:
    exc = refused([{"role": "user", "content": "x", "tool_call_id": "c1"}])
    assert (exc.index, exc.field) == (0, "tool_call_id")


@pytest.mark.parametrize("calls", [{"id": "c1"}, {}, "c1", 5])
def test_tool_calls_must_be_a_list(calls: Any) -> None:
    exc = refused([USER, {"role": "assistant", "content": "x", "tool_calls": calls}])
    assert (exc.index, exc.field) == (1, "tool_calls")
    assert "must be a list" in exc.reason


@pytest.mark.parametrize(
    ("bad_call", "field"),
    [
        ("c1", "tool_calls[1]"),
        ({"type": "function", "function": {"name": "f", "arguments": "{}"}}, "tool_calls[1].id"),
        ({**call("x"), "id": ""}, "tool_calls[1].id"),
        ({**call("x"), "type": "code_interpreter"}, "tool_calls[1].type"),
        ({"id": "x", "type": "function"}, "tool_calls[1].function"),
        ({"id": "x", "type": "function", "function": "f()"}, "tool_calls[1].function"),
        (
            {"id": "x", "type": "function", "function": {"arguments": "{}"}},
            "tool_calls[1].function.name",
        ),
        (
            {"id": "x", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}},
            "tool_calls[1].function.arguments",
        ),
    ],
)
def test_malformed_tool_call_names_its_field(bad_call: Any, field: str) -> None:
    msg = {"role": "assistant", "content": None, "tool_calls": [call("ok"), bad_call]}
    exc = refused([USER, USER, msg])
    assert (exc.index, exc.field) == (2, field)


@pytest.mark.parametrize("role", ["user", "system", "tool", "developer"])
def test_only_assistants_carry_tool_calls(role: str) -> None:
    msg: dict[str, Any] = {"role": role, "content": "x", "tool_calls": [call("c1")]}
    if role == "tool":
        msg["tool_call_id"] = "c0"
    exc = validate_error(msg)
    assert exc.field == "tool_calls"


def validate_error(msg: dict[str, Any], index: int = 0) -> InvalidInput:
    with pytest.raises(InvalidInput) as info:
        validate_message(msg, index=index)
    return info.value


@pytest.mark.parametrize("role", ["system", "developer", "assistant", "tool"])
def test_non_text_content_where_text_is_required(role: str) -> None:
    msg: dict[str, Any] = {"role": role, "content": [{"type": "text", "text": "see"}, IMAGE]}
    if role == "tool":
        msg["tool_call_id"] = "c1"
    exc = validate_error(msg, index=4)
    assert (exc.index, exc.field) == (4, "content[1].type")


def test_assistant_with_tool_calls_takes_text_only() -> None:
    msg = {"role": "assistant", "content": [IMAGE], "tool_calls": [call("c1")]}
    exc = validate_error(msg)
    assert exc.field == "content[0].type"


def test_user_may_send_images() -> None:
    msg = {"role": "user", "content": [{"type": "text", "text": "what is this?"}, IMAGE]}
    assert validate_message(msg) == msg


@pytest.mark.parametrize(
    ("content", "field"),
    [
        (None, "content"),
        (42, "content"),
        ({"type": "text", "text": "x"}, "content"),
        (["plain string part"], "content[0].type"),
        ([{"text": "no type"}], "content[0].type"),
        ([{"type": "text", "text": "ok"}, {"type": "text"}], "content[1].text"),
        ([{"type": "text", "text": 5}], "content[0].text"),
    ],
)
def test_bad_content(content: Any, field: str) -> None:
    exc = validate_error({"role": "user", "content": content}, index=2)
    assert (exc.index, exc.field) == (2, field)


def test_assistant_content_may_be_none_beside_tool_calls_only() -> None:
    ok = validate_message({"role": "assistant", "content": None, "tool_calls": [call("c1")]})
    assert ok["content"] is None
    exc = validate_error({"role": "assistant", "content": None})
    assert exc.field == "content"
    exc = validate_error({"role": "assistant", "content": None, "tool_calls": []})
    assert exc.field == "content"


@pytest.mark.parametrize(
    ("extra", "field"),
    [({"name": 3}, "name"), ({"meta": "x"}, "meta"), ({"colour": "red"}, "colour")],
)
def test_bad_optional_fields(extra: dict[str, Any], field: str) -> None:
    exc = validate_error({"role": "user", "content": "x", **extra})
    assert exc.field == field


def test_a_message_must_be_an_object() -> None:
    exc = refused([USER, ["user", "hi"]])
    assert exc.index == 1
    assert exc.field is None


def test_normalised_copies_leave_the_input_alone() -> None:
    raw: list[dict[str, Any]] = [
        USER,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "function": {"name": "f"}}],
            "meta": {"usage": {"total_tokens": 9}},
        },
    ]
    before = copy.deepcopy(raw)
    out = validate_messages(raw)
    assert raw == before
    assert out[1]["tool_calls"] == [call("c1", "f", "")]
    out[1]["meta"]["usage"] = None
    assert raw[1]["meta"] == {"usage": {"total_tokens": 9}}


def test_reused_ids_answer_the_nearest_earlier_call() -> None:
    msgs: list[dict[str, Any]] = [
        USER,
        {"role": "assistant", "content": "", "tool_calls": [call("c1", "a")]},
        {"role": "tool", "tool_call_id": "c1", "content": ""},
        {"role": "assistant", "content": "", "tool_calls": [call("c1", "b")]},
        {"role": "tool", "tool_call_id": "c1", "content": "second", "meta": {"x": 1}},
    ]
    assert validate_messages(msgs) == msgs


def test_a_call_is_answered_once() -> None:
    msgs: list[dict[str, Any]] = [
        USER,
        {"role": "assistant", "content": "", "tool_calls": [call("c1", "a")]},
        {"role": "tool", "tool_call_id": "c1", "content": "first"},
        {"role": "tool", "tool_call_id": "c1", "content": "a second answer"},
    ]
    exc = refused(msgs)
    assert (exc.index, exc.field) == (3, "tool_call_id")


@pytest.mark.parametrize("name", DATA_FILES)
def test_every_message_of_the_data_is_accepted(name: str) -> None:
    rows = load_rows(name)
    assert rows
    for row in rows:
        msgs = row["messages"]
        out = validate_messages(msgs)
        assert [m["role"] for m in out] == [m["role"] for m in msgs]
        assert [m.get("meta") for m in out] == [m.get("meta") for m in msgs]
        assert [text_of(m) for m in out] == [text_of(m) for m in msgs]


def test_the_data_holds_the_untidy_cases() -> None:
    """The acceptance test above proves something only if these cases occur."""
    rows = load_rows("taubench_airline_dev") + load_rows("openhands_example")
    reused = 0
    for row in rows:
        ids = [c["id"] for m in row["messages"] for c in m.get("tool_calls") or ()]
        reused += len(ids) != len(set(ids))
    tool_msgs = [m for row in rows for m in row["messages"] if m["role"] == "tool"]
    assert reused > 0
    assert any(m["content"] == "" for m in tool_msgs)
    assert any(m.get("meta", {}).get("synthetic") for m in tool_msgs)


def test_text_of_joins_parts_and_calls() -> None:
    msg = {
        "role": "assistant",
        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        "tool_calls": [call("c1", "f", '{"x": 1}')],
    }
    assert text_of(msg) == 'a\nb\nf({"x": 1})'
    assert (
        text_of({"role": "assistant", "content": None, "tool_calls": [call("c1", "g")]}) == "g({})"
    )
    assert text_of({"role": "user", "content": [IMAGE]}) == ""


def test_for_model_drops_meta_only() -> None:
    msg = {"role": "user", "content": "x", "name": "ann", "meta": {"k": 1}}
    assert for_model(msg) == {"role": "user", "content": "x", "name": "ann"}
