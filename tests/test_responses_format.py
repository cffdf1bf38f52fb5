"""The Responses API's requests and answers as log messages, and back.

A request read as messages and written back is the same request (many shapes,
and a property test over random item lists); what a message keeps is sent
again only while it is unchanged; bad shapes name their field; a whole or
streamed answer is the message a client's next input reads the same way.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import Response, ResponseErrorEvent

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import for_model
from contextfold.formats.responses import (
    KEPT,
    read_items,
    request_body,
    request_messages,
    write_items,
)
from contextfold.formats.responses_answer import (
    ResponseStream,
    output_message,
    response_message,
    responses_error_event,
)

REASONING = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque=="}
IMAGE = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0K", "detail": "high"}
FILE = {"type": "input_file", "file_id": "file-1", "filename": "a.pdf"}
CALL = {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": '{"p":"."}'}
OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "a.py b.py"}
SAID = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Looking.", "annotations": []}],
}

SHAPES: list[dict[str, Any]] = [
    {"model": "gpt-5", "input": "hello"},
    {"model": "gpt-5", "instructions": "Be brief.", "input": "hello", "store": False},
    {"input": [{"role": "user", "content": "hi"}]},
    {"input": [{"type": "message", "role": "user", "content": "hi"}]},
    {"input": [{"role": "developer", "content": "rules"}, {"role": "user", "content": "hi"}]},
    {"input": [{"role": "system", "content": [{"type": "input_text", "text": "s"}]}]},
    {"input": [{"role": "user", "content": [{"type": "input_text", "text": "a"}, IMAGE]}]},
    {"input": [{"role": "user", "content": [FILE, {"type": "input_text", "text": "read"}]}]},
    {"input": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
    {"input": [{"role": "user", "content": "go"}, CALL, OUTPUT]},
    {"input": [{"role": "user", "content": "go"}, REASONING, SAID, CALL, OUTPUT, SAID]},
    {
        "input": [
            {"role": "user", "content": "two at once"},
            CALL,
            {**CALL, "call_id": "c2", "arguments": "{}"},
            {**OUTPUT, "call_id": "c2"},
            OUTPUT,
            {"role": "assistant", "content": "both done"},
        ],
        "tools": [{"type": "function", "name": "ls", "parameters": {}}],
        "parallel_tool_calls": True,
    },
    {
        "input": [
            {"role": "user", "content": "x"},
            {"type": "custom_tool_call", "call_id": "p1", "name": "apply_patch", "input": "*** x"},
            {"type": "custom_tool_call_output", "call_id": "p1", "output": "ok"},
        ]
    },
    {
        "input": [
            {"role": "user", "content": "x"},
            CALL,
            {**OUTPUT, "output": [{"type": "input_text", "text": "t"}, IMAGE]},
        ]
    },
    {
        "input": [
            {"role": "user", "content": "x"},
            {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {}},
            {"role": "assistant", "content": "found"},
            {"type": "computer_call_output", "call_id": "cc", "output": {"type": "x"}},
            {"type": "item_reference", "id": "msg_7"},
            {"type": "mcp_approval_response", "approval_request_id": "a", "approve": True},
        ]
    },
    {"input": [{"role": "user", "content": "x"}, REASONING]},
    {"input": [{"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}]},
    {"input": [{"role": "assistant", "content": "", "phase": "final_answer"}]},
    {"input": [{"role": "user", "content": ""}], "instructions": ""},
    {"input": [], "instructions": "only"},
]


@pytest.mark.parametrize("body", SHAPES, ids=range(len(SHAPES)))
def test_a_request_read_and_written_back_is_the_same_request(body: dict[str, Any]) -> None:
    before = copy.deepcopy(body)
    messages = request_messages(body)
    assert body == before
    assert request_body(body, messages) == body
    # What the log gives back is validated JSON: the same round trip from a copy.
    assert request_body(body, json.loads(json.dumps(messages))) == body


def test_the_messages_are_what_compaction_reads() -> None:
    body = SHAPES[10] | {"instructions": "Be brief."}
    system, user, said, result, end = request_messages(body)
    assert system == {"role": "system", "content": "Be brief."}
    assert user == {"role": "user", "content": "go"}
    assert said["content"] == "Looking."
    assert said["tool_calls"] == [
        {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": '{"p":"."}'}}
    ]
    assert said["meta"][KEPT]["items"] == [REASONING, SAID, CALL]
    assert result == {"role": "tool", "tool_call_id": "c1", "content": "a.py b.py"}
    assert end["content"] == "Looking." and "tool_calls" not in end
    image = request_messages(SHAPES[6])[0]["content"]
    assert image[1] == {"type": "image_url", "image_url": {"url": IMAGE["image_url"]}}


def test_kept_items_go_back_only_while_their_message_is_unchanged() -> None:
    said = request_messages(SHAPES[10])[1]
    assert write_items([said])[0] == REASONING
    clipped = {**said, "content": "Look…"}
    assert write_items([clipped]) == [
        {"role": "assistant", "content": "Look…"},
        {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": '{"p":"."}'},
    ]
    summary = {"role": "assistant", "content": "[SUMMARIZED] listed the files"}
    assert write_items([summary]) == [summary]
    custom = request_messages(SHAPES[12])[1:]
    changed = [{**m, "content": "…" if m["role"] == "tool" else m["content"]} for m in custom]
    kinds = [item["type"] for item in write_items(changed)]
    assert kinds == ["custom_tool_call", "custom_tool_call_output"]


def test_instructions_are_the_clients_and_previous_response_id_stays_home() -> None:
    body = {"instructions": "new", "previous_response_id": "resp_1", "input": "more"}
    messages = request_messages(body, continued=True)
    assert messages == [{"role": "user", "content": "more"}]
    prompt = [{"role": "system", "content": "old"}, {"role": "user", "content": "a"}, *messages]
    sent = request_body(body, prompt)
    assert sent["instructions"] == "new" and "previous_response_id" not in sent
    assert sent["input"] == [{"role": "user", "content": "a"}, {"role": "user", "content": "more"}]
    # A continued input may answer a call the log holds.
    assert read_items([OUTPUT], continued=True)[0]["tool_call_id"] == "c1"
    assert request_messages({"previous_response_id": "r"}, continued=True) == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "input"),
        ({"input": 3}, "input"),
        ({"input": "x", "instructions": ["x"]}, "instructions"),
        ({"input": ["x"]}, "input[0]"),
        ({"input": [{"content": "x"}]}, "input[0].type"),
        ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
        ({"input": [{"role": "user", "content": 3}]}, "input[0].content"),
        ({"input": [{"role": "user", "content": [{"text": "x"}]}]}, "input[0].content[0].type"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_text"}]}]},
            "input[0].content[0].text",
        ),
        (
            {"input": [{"role": "user", "content": "x"}, {**CALL, "call_id": ""}]},
            "input[1].call_id",
        ),
        ({"input": [{**CALL, "name": None}]}, "input[0].name"),
        ({"input": [{**CALL, "arguments": {"p": 1}}]}, "input[0].arguments"),
        ({"input": [CALL, {**CALL, "arguments": "{}"}]}, "input[1].call_id"),
        ({"input": [{"role": "user", "content": "x"}, OUTPUT]}, "input[1].call_id"),
        ({"input": [CALL, {**OUTPUT, "output": None}]}, "input[1].output"),
        ({"input": [CALL, OUTPUT, OUTPUT]}, "input[2].call_id"),
        ({"input": [CALL, {"role": "user", "content": "x"}, OUTPUT]}, "input[2].call_id"),
        ({"input": [{"role": "user", "content": "\ud800"}]}, "input[0].content"),
        ({"input": [{**REASONING, "summary": float("nan")}]}, "input[0].meta.responses"),
    ],
)
def test_bad_shapes_name_their_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        request_messages(body)
    assert caught.value.field is not None and caught.value.field.startswith(field)


def _response(output: list[dict[str, Any]], status: str = "completed") -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1.0,
        "model": "gpt-5",
        "status": status,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


def test_a_whole_answer_is_the_message_the_next_input_reads_the_same() -> None:
    body = _response([REASONING, SAID, CALL])
    Response.model_validate(body)  # the shape the official SDK reads
    message = output_message(body)
    assert message is not None
    assert message["meta"][KEPT] == {"items": [REASONING, SAID, CALL], "id": "resp_1"}
    # The SDK's client sends the output back as input (ids, statuses and all).
    again = read_items([{"role": "user", "content": "go"}, REASONING, SAID, CALL])[1]
    assert for_model(again) == for_model(message)
    assert response_message(json.dumps(body).encode()) == message
    assert response_message(b"not json") is None
    assert response_message(json.dumps(_response([SAID, "not an item"])).encode()) is None
    assert output_message(_response([], "completed")) is None
    assert output_message(_response([SAID], "failed")) is None


def _events(output: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": _response([], "in_progress")})
    ]
    for at, item in enumerate(output):
        opened = dict(item)
        if item["type"] == "message":
            opened["content"] = []
        if item["type"] == "function_call":
            opened["arguments"] = ""
        events.append(("response.output_item.added", {"output_index": at, "item": opened}))
        if item["type"] == "message":
            text = item["content"][0]["text"]
            for piece in (text[:3], text[3:]):
                delta = {"output_index": at, "content_index": 0, "delta": piece}
                events.append(("response.output_text.delta", delta))
        if item["type"] == "function_call":
            for piece in (item["arguments"][:2], item["arguments"][2:]):
                delta = {"output_index": at, "delta": piece}
                events.append(("response.function_call_arguments.delta", delta))
    return events


@pytest.mark.parametrize("done_items", [True, False])
@pytest.mark.parametrize("final_output", [True, False])
def test_a_stream_is_assembled_into_the_same_message(done_items: bool, final_output: bool) -> None:
    output = [REASONING, SAID, CALL]
    stream = ResponseStream()
    for i, (name, data) in enumerate(_events(output)):
        stream.event(name, {"type": name, "sequence_number": i, **data})
        assert not stream.complete and stream.message() is None
    if done_items:
        for at, item in enumerate(output):
            stream.event("response.output_item.done", {"output_index": at, "item": item})
    ended = _response(output if final_output else [])
    stream.event("response.completed", {"response": ended})
    assert stream.complete and stream.ended
    assert stream.message() == output_message(_response(output))


@pytest.mark.parametrize("end", ["response.failed", "response.incomplete", "error", None])
def test_a_stream_that_does_not_complete_has_no_message(end: str | None) -> None:
    stream = ResponseStream()
    for name, data in _events([SAID]):
        stream.event(name, data)
    if end is not None:
        stream.event(end, {"response": _response([SAID], "failed"), "message": "x"})
    assert not stream.complete and stream.message() is None
    assert stream.ended is (end is not None)
    stream.event("response.completed", {"response": _response([SAID])})
    assert stream.message() is None if end is not None else stream.message() is not None


def test_the_error_event_is_the_sdks_error_event() -> None:
    event = responses_error_event("the upstream's stream was cut short", "stream_truncated", 7)
    name, data = event.decode().strip().split("\n")
    assert name == "event: error"
    parsed = ResponseErrorEvent.model_validate(json.loads(data.removeprefix("data: ")))
    assert parsed.code == "stream_truncated" and parsed.sequence_number == 7
    stream = ResponseStream()
    stream.event("", ["not", "an", "object"])
    assert stream.message() is None


_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)
_IDS = st.sampled_from(["c1", "c2", "c3", "call_x"])


@st.composite
def _turns(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A random valid item list: turns of user input, model items, and the calls' outputs."""
    items: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 4))):
        role = draw(st.sampled_from(["user", "developer", "system"]))
        parts = st.lists(
            st.one_of(
                _TEXT.map(lambda t: {"type": "input_text", "text": t}),
                st.just(IMAGE),
                st.just(FILE),
            ),
            max_size=3,
        )
        content = draw(st.one_of(_TEXT, parts)) if role == "user" else draw(_TEXT)
        items.append({"type": "message", "role": role, "content": content})
        called: list[str] = []
        for kind in draw(st.lists(st.sampled_from(["reasoning", "said", "call"]), max_size=4)):
            if kind == "reasoning":
                items.append({**REASONING, "summary": [{"type": "summary_text", "text": "r"}]})
            elif kind == "said":
                text = draw(_TEXT)
                items.append(draw(st.sampled_from([{"role": "assistant", "content": text}, SAID])))
            else:
                call_id = draw(_IDS.filter(lambda c, seen=tuple(called): c not in seen))
                called.append(call_id)
                items.append({**CALL, "call_id": call_id, "arguments": json.dumps(draw(_TEXT))})
        for call_id in draw(st.permutations(called)):
            items.append({**OUTPUT, "call_id": call_id, "output": draw(_TEXT)})
    return items


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(_turns(), st.one_of(st.none(), _TEXT))
def test_any_accepted_request_round_trips(items: list[dict[str, Any]], instructions: Any) -> None:
    body: dict[str, Any] = {"model": "gpt-5", "input": items}
    if instructions is not None:
        body["instructions"] = instructions
    messages = request_messages(body)
    assert request_body(body, messages) == body
    # Messages that lost what they kept (as a changed prompt has) read back as themselves.
    bare = [for_model(m) for m in messages]
    assert [for_model(m) for m in request_messages(request_body(body, bare))] == bare
