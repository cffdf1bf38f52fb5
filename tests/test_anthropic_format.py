"""Conversion to and from the Anthropic Messages format, rule by rule and as a
round trip over real agent runs."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import pytest
from conftest import load_rows

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message, validate_messages
from contextfold.formats.anthropic import LEADING_USER_TEXT, to_anthropic
from contextfold.formats.anthropic_read import from_anthropic
from contextfold.formats.checks import check_prompt, prompt_faults


def call(call_id: str, name: str = "lookup", arguments: str = "{}") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool(call_id: str, content: Any = "ok", **extra: Any) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content, **extra}


def test_leading_system_messages_are_joined_apart() -> None:
    system, msgs = to_anthropic(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Use metric units."}]},
            {"role": "user", "content": "hi"},
        ]
    )
    assert system == "Be brief.\n\nUse metric units."
    assert msgs == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def test_no_system_gives_none() -> None:
    system, _ = to_anthropic([{"role": "user", "content": "hi"}])
    assert system is None


def test_a_system_message_mid_conversation_becomes_user_text() -> None:
    system, msgs = to_anthropic(
        [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "q1"},
            {"role": "assistant", "content": "a1"},
            {"role": "system", "content": "Summary of earlier turns"},
            {"role": "assistant", "content": "a2"},
        ]
    )
    assert system == "S"
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant"]
    assert msgs[2]["content"] == [{"type": "text", "text": "Summary of earlier turns"}]


def test_consecutive_same_role_messages_merge_so_roles_alternate() -> None:
    _, msgs = to_anthropic(
        [
            {"role": "user", "content": "one"},
            {"role": "user", "content": "two"},
            {"role": "assistant", "content": "three"},
            {"role": "assistant", "content": ""},
            {"role": "assistant", "content": "four"},
        ]
    )
    assert msgs == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
        },
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "three"}, {"type": "text", "text": "four"}],
        },
    ]


def test_a_message_with_nothing_to_send_is_dropped() -> None:
    _, msgs = to_anthropic(
        [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": ""},
            {"role": "user", "content": "b"},
        ]
    )
    assert msgs == [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    ]


def test_tool_calls_become_tool_use_with_parsed_input() -> None:
    _, msgs = to_anthropic(
        [
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": "Checking.",
                "tool_calls": [
                    call("c1", "weather", '{"city": "Paris", "days": [1, 2]}'),
                    call("c2", "time", ""),
                ],
            },
            tool("c1", "sunny"),
            tool("c2", "noon"),
            {"role": "assistant", "content": "Sunny at noon."},
        ]
    )
    assert msgs[1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Checking."},
            {
                "type": "tool_use",
                "id": "c1",
                "name": "weather",
                "input": {"city": "Paris", "days": [1, 2]},
            },
            {"type": "tool_use", "id": "c2", "name": "time", "input": {}},
        ],
    }
    assert msgs[2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "sunny"},
            {"type": "tool_result", "tool_use_id": "c2", "content": "noon"},
        ],
    }
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant"]


def test_tool_results_come_first_in_their_user_turn() -> None:
    _, msgs = to_anthropic(
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [call("c1")]},
            tool("c1", "done"),
            {"role": "user", "content": "hurry up"},
        ]
    )
    assert msgs[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": "done"},
        {"type": "text", "text": "hurry up"},
    ]


def test_empty_and_listed_tool_results() -> None:
    _, msgs = to_anthropic(
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [call("c1"), call("c2")]},
            tool("c1", ""),
            tool("c2", [{"type": "text", "text": "part 1"}, {"type": "text", "text": ""}]),
        ]
    )
    assert msgs[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1"},
        {
            "type": "tool_result",
            "tool_use_id": "c2",
            "content": [{"type": "text", "text": "part 1"}],
        },
    ]


def test_reused_call_ids_become_unique_and_results_follow_the_nearest_call() -> None:
    _, msgs = to_anthropic(
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": [call("c1", "a")]},
            tool("c1", "first"),
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [call("c1", "b"), call("c1_2", "c")],
            },
            tool("c1", "second"),
            tool("c1_2", "third"),
        ]
    )
    uses = [b for m in msgs for b in m["content"] if b["type"] == "tool_use"]
    results = {
        b["content"]: b["tool_use_id"]
        for m in msgs
        for b in m["content"]
        if b["type"] == "tool_result"
    }
    ids = [b["id"] for b in uses]
    assert len(set(ids)) == 3
    assert ids[0] == "c1"
    by_name = {b["name"]: b["id"] for b in uses}
    assert results == {"first": by_name["a"], "second": by_name["b"], "third": by_name["c"]}


def test_ids_outside_anthropics_alphabet_are_replaced() -> None:
    _, msgs = to_anthropic(
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [call("fc.1:a")]},
            tool("fc.1:a"),
        ]
    )
    use_id = msgs[1]["content"][0]["id"]
    assert re.fullmatch(r"[A-Za-z0-9_-]+", use_id)
    assert msgs[2]["content"][0]["tool_use_id"] == use_id


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [('{"city": "Par', "not valid JSON"), ("[1, 2]", "JSON object"), ('"Paris"', "JSON object")],
)
def test_bad_arguments_name_index_and_field(arguments: str, reason: str) -> None:
    with pytest.raises(InvalidInput, match=reason) as info:
        to_anthropic(
            [
                {"role": "user", "content": "go"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [call("c1"), call("c2", arguments=arguments)],
                },
            ]
        )
    assert (info.value.index, info.value.field) == (1, "tool_calls[1].function.arguments")


def test_invalid_messages_are_refused_before_conversion() -> None:
    with pytest.raises(InvalidInput) as info:
        to_anthropic([{"role": "user", "content": "go"}, tool("nobody")])
    assert (info.value.index, info.value.field) == (1, "tool_call_id")


def test_images_become_base64_or_url_sources() -> None:
    _, msgs = to_anthropic(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "compare"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
                    {
                        "type": "image_url",
                        "image_url": {"url": "https://example.com/b.jpg", "detail": "low"},
                    },
                ],
            }
        ]
    )
    assert msgs[0]["content"] == [
        {"type": "text", "text": "compare"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0K"},
        },
        {"type": "image", "source": {"type": "url", "url": "https://example.com/b.jpg"}},
    ]


@pytest.mark.parametrize(
    ("part", "field"),
    [
        (
            {"type": "image_url", "image_url": {"url": "file:///etc/passwd"}},
            "content[1].image_url.url",
        ),
        (
            {"type": "image_url", "image_url": {"url": "data:image/png,rawbytes"}},
            "content[1].image_url.url",
        ),
        ({"type": "image_url", "image_url": {}}, "content[1].image_url.url"),
        ({"type": "input_audio", "input_audio": {"data": "x", "format": "wav"}}, "content[1].type"),
    ],
)
def test_unsendable_parts_name_their_field(part: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        to_anthropic(
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "yes?"},
                {"role": "user", "content": [{"type": "text", "text": "look"}, part]},
            ]
        )
    assert (info.value.index, info.value.field) == (2, field)


def test_meta_and_names_are_not_sent_but_is_error_is() -> None:
    _, msgs = to_anthropic(
        [
            {"role": "user", "content": "go", "name": "ann", "meta": {"secret": "answer key"}},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [call("c1")],
                "meta": {"usage": {}},
            },
            tool("c1", "boom", meta={"is_error": True, "event_id": 3}),
        ]
    )
    dumped = json.dumps(msgs)
    assert "answer key" not in dumped
    assert "ann" not in dumped
    assert "event_id" not in dumped
    assert msgs[2]["content"][0]["is_error"] is True


def test_to_anthropic_leaves_its_input_alone() -> None:
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "a"}]},
        {"role": "assistant", "content": None, "tool_calls": [call("c1")]},
        tool("c1"),
    ]
    before = json.dumps(msgs)
    _, out = to_anthropic(msgs)
    out[0]["content"][0]["text"] = "changed"
    assert json.dumps(msgs) == before


def test_from_anthropic_inverse_rules() -> None:
    msgs = from_anthropic(
        [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
        [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "t1", "name": "search", "input": {"q": "ü", "n": 2}},
                    {"type": "tool_use", "id": "t2", "name": "ping", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "text", "text": "r1"}, {"type": "text", "text": "r2"}],
                    },
                    {"type": "tool_result", "tool_use_id": "t2", "is_error": True},
                    {"type": "text", "text": "and?"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/gif", "data": "R0lG"},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t3", "name": "noop", "input": {}}],
            },
        ],
    )
    assert msgs == [
        {"role": "system", "content": "Be brief.\nBe kind."},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "t1",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"q": "ü", "n": 2}'},
                },
                {"id": "t2", "type": "function", "function": {"name": "ping", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "name": "search", "content": "r1\nr2"},
        {
            "role": "tool",
            "tool_call_id": "t2",
            "name": "ping",
            "content": "",
            "meta": {"is_error": True},
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "and?"},
                {"type": "image_url", "image_url": {"url": "data:image/gif;base64,R0lG"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "t3", "type": "function", "function": {"name": "noop", "arguments": "{}"}}
            ],
        },
    ]
    assert validate_messages(msgs) == msgs


def test_is_error_and_images_survive_a_round_trip() -> None:
    original: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "this?"},
                {"type": "image_url", "image_url": {"url": "https://x.org/a.png"}},
            ],
        },
        {"role": "assistant", "content": None, "tool_calls": [call("c1", "f")]},
        {
            "role": "tool",
            "tool_call_id": "c1",
            "name": "f",
            "content": "failed",
            "meta": {"is_error": True},
        },
    ]
    assert from_anthropic(*to_anthropic(original)) == original


@pytest.mark.parametrize(
    ("messages", "index", "field"),
    [
        ([{"role": "system", "content": "x"}], 0, "role"),
        ([{"role": "user", "content": "a"}, {"role": "user", "content": 5}], 1, "content"),
        (
            [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "zz"}]}],
            0,
            "content[0].tool_use_id",
        ),
        ([{"role": "user", "content": [{"type": "document", "source": {}}]}], 0, "content[0].type"),
        ([{"role": "user", "content": [{"text": "typeless"}]}], 0, "content[0].type"),
        ([{"role": "user", "content": [{"type": "text"}]}], 0, "content[0].text"),
        (
            [{"role": "user", "content": [{"type": "image", "source": {"type": "file"}}]}],
            0,
            "content[0].source",
        ),
        (
            [{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}],
            0,
            "content[0].id",
        ),
        (
            [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "input": {}}]}],
            0,
            "content[0].name",
        ),
        (
            [{"role": "assistant", "content": [{"type": "image", "source": {}}]}],
            0,
            "content[0].type",
        ),
        (
            [
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t",
                            "content": [{"type": "image", "source": {}}],
                        }
                    ],
                },
            ],
            1,
            "content[0].content[0].type",
        ),
    ],
)
def test_from_anthropic_errors_name_index_and_field(
    messages: list[dict[str, Any]], index: int, field: str
) -> None:
    with pytest.raises(InvalidInput) as info:
        from_anthropic(None, messages)
    assert (info.value.index, info.value.field) == (index, field)


def test_from_anthropic_refuses_non_text_system_blocks() -> None:
    with pytest.raises(InvalidInput) as info:
        from_anthropic([{"type": "image", "source": {}}], [])
    assert info.value.field == "system[0].type"


def nearest_calls(messages: list[Message]) -> list[tuple[int, int]]:
    """(tool message index, index of the call it answers) for every tool result."""
    latest: dict[str, int] = {}
    pairs: list[tuple[int, int]] = []
    for i, msg in enumerate(messages):
        for c in msg.get("tool_calls") or ():
            latest[c["id"]] = i
        if msg["role"] == "tool":
            pairs.append((i, latest[msg["tool_call_id"]]))
    return pairs


def agent_runs() -> list[tuple[str, list[Message]]]:
    rows = load_rows("taubench_airline_dev") + load_rows("openhands_example")
    return [(row["id"], row["messages"]) for row in rows]


@pytest.mark.parametrize(("run_id", "original"), agent_runs())
def test_round_trip_over_real_agent_runs(run_id: str, original: list[Message]) -> None:
    system, sent = to_anthropic(original)
    check_prompt(sent, "anthropic", system=system)
    roles = [m["role"] for m in sent]
    assert all(a != b for a, b in itertools.pairwise(roles)), "roles must alternate"
    uses = [b["id"] for m in sent for b in m["content"] if b["type"] == "tool_use"]
    assert len(uses) == len(set(uses)), "tool_use ids must be unique"

    back = from_anthropic(system, sent)
    assert validate_messages(back) == back
    # These runs have no same-role neighbours to merge, so messages match one to one.
    assert len(back) == len(original)
    reused = {
        c["id"]
        for m in original
        for c in m.get("tool_calls") or ()
        if sum(c["id"] == d["id"] for n in original for d in n.get("tool_calls") or ()) > 1
    }
    for before, after in zip(original, back, strict=True):
        assert after["role"] == before["role"]
        assert (after["content"] or "") == (before["content"] or "")
        before_calls = before.get("tool_calls") or []
        after_calls = after.get("tool_calls") or []
        assert [c["function"]["name"] for c in after_calls] == [
            c["function"]["name"] for c in before_calls
        ]
        assert [json.loads(c["function"]["arguments"]) for c in after_calls] == [
            json.loads(c["function"]["arguments"]) for c in before_calls
        ]
        for b, a in zip(before_calls, after_calls, strict=True):
            if b["id"] not in reused:
                assert a["id"] == b["id"]
        if before["role"] == "tool":
            if before["tool_call_id"] not in reused:
                assert after["tool_call_id"] == before["tool_call_id"]
            assert after["name"] == before["name"]
    assert nearest_calls(back) == nearest_calls(original)


LEADING = {"role": "user", "content": [{"type": "text", "text": LEADING_USER_TEXT}]}


def test_a_prompt_opening_with_an_assistant_turn_gets_a_user_turn_first() -> None:
    # Issue 9: after a goal batch the first turn was the assistant's [GOAL BATCH].
    prompt = [
        {"role": "system", "content": "You are an airline agent."},
        {"role": "assistant", "content": "[GOAL BATCH]\n## Goal Arc\nRebook the flight."},
        {"role": "user", "content": "And the seat?"},
    ]
    plain = [
        {"role": "assistant", "content": [{"type": "text", "text": prompt[1]["content"]}]},
        {"role": "user", "content": [{"type": "text", "text": "And the seat?"}]},
    ]
    assert prompt_faults(plain, "anthropic")[0].reason == "the first turn must be a user turn"
    system, msgs = to_anthropic(prompt)
    assert msgs == [LEADING, *plain]
    assert prompt_faults(msgs, "anthropic", system=system) == []


def test_a_prompt_with_no_turn_gets_the_user_turn_alone() -> None:
    system, msgs = to_anthropic([{"role": "system", "content": "Be brief."}])
    assert (system, msgs) == ("Be brief.", [LEADING])
    assert to_anthropic([])[1] == [LEADING]


def test_blank_text_is_not_sent() -> None:
    system, msgs = to_anthropic(
        [
            {"role": "system", "content": " \n"},
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "  ", "tool_calls": [call("c1")]},
            tool("c1", "\n\n"),
            {
                "role": "user",
                "content": [{"type": "text", "text": "\t"}, {"type": "text", "text": "ok"}],
            },
        ]
    )
    assert system is None
    assert msgs[1]["content"] == [{"type": "tool_use", "id": "c1", "name": "lookup", "input": {}}]
    assert msgs[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1"},
        {"type": "text", "text": "ok"},
    ]
    assert prompt_faults(msgs, "anthropic") == []


def test_a_final_assistant_turn_does_not_end_with_whitespace() -> None:
    _, msgs = to_anthropic(
        [{"role": "user", "content": "Write a haiku."}, {"role": "assistant", "content": "Snow \n"}]
    )
    assert msgs[-1] == {"role": "assistant", "content": [{"type": "text", "text": "Snow"}]}
    assert prompt_faults(msgs, "anthropic") == []


def test_a_refusal_without_text_is_sent_as_text() -> None:
    _, msgs = to_anthropic(
        [
            {"role": "user", "content": "Do the thing."},
            {"role": "assistant", "content": "", "refusal": "I can't help with that."},
            {"role": "user", "content": "Why?"},
        ]
    )
    assert msgs[1]["content"] == [{"type": "text", "text": "I can't help with that."}]


def test_a_refusal_part_is_sent_as_text() -> None:
    _, msgs = to_anthropic(
        [
            {"role": "user", "content": "Do the thing."},
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]},
            {"role": "user", "content": "Why?"},
        ]
    )
    assert msgs[1]["content"] == [{"type": "text", "text": "I can't."}]
    assert prompt_faults(msgs, "anthropic") == []
