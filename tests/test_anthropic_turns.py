"""A Messages request to the log and back is the same request (``formats.anthropic_turns``)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import validate_messages
from contextfold.formats.anthropic_checks import anthropic_faults
from contextfold.formats.anthropic_turns import answer_of, read_request, request_of

TEXT = st.text(min_size=1, max_size=12).filter(lambda t: t.strip() != "")
CACHE = st.sampled_from([{}, {"cache_control": {"type": "ephemeral"}}])
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}
DOCUMENT = {"type": "document", "title": "notes",
            "source": {"type": "text", "media_type": "text/plain", "data": "the doc"}}  # fmt: skip


@st.composite
def text_block(draw: st.DrawFn) -> dict[str, Any]:
    return {"type": "text", "text": draw(TEXT), **draw(CACHE)}


@st.composite
def request(draw: st.DrawFn) -> tuple[Any, list[dict[str, Any]]]:
    system = draw(st.one_of(st.none(), TEXT, st.lists(text_block(), min_size=1, max_size=2)))
    turns: list[dict[str, Any]] = []
    calls = 0
    for _ in range(draw(st.integers(1, 4))):
        user: list[Any] = draw(st.lists(st.one_of(text_block(), st.just(IMAGE),
                                                   st.just(DOCUMENT)), min_size=1, max_size=3))  # fmt: skip
        if not turns or turns[-1]["role"] == "assistant":  # a tool result turn is a user's
            turns.append({"role": "user", "content": draw(st.one_of(TEXT, st.just(user)))})
        blocks: list[dict[str, Any]] = []
        if draw(st.booleans()):
            blocks.append({"type": "thinking", "thinking": draw(TEXT), "signature": "c2ln"})
        if draw(st.booleans()):
            blocks.append(draw(text_block()))
        ids = [f"toolu_{calls + k}" for k in range(draw(st.integers(0, 2)))]
        calls += len(ids)
        blocks += [{"type": "tool_use", "id": i, "name": "read", "input": {"p": draw(TEXT)}}
                   for i in ids]  # fmt: skip
        if not blocks:
            blocks = [draw(text_block())]
        turns.append({"role": "assistant", "content": draw(st.one_of(st.just(blocks), TEXT))
                      if not ids else blocks})  # fmt: skip
        if ids:
            results: list[Any] = [
                {"type": "tool_result", "tool_use_id": i,
                 "content": draw(st.one_of(TEXT, st.just([{"type": "text", "text": "r"}, IMAGE]))),
                 **draw(st.sampled_from([{}, {"is_error": True}])), **draw(CACHE)}
                for i in ids
            ]  # fmt: skip
            results += draw(st.lists(text_block(), max_size=1))
            turns.append({"role": "user", "content": results})
    return system, turns


@settings(max_examples=150, deadline=None)
@given(request())
def test_a_request_to_the_log_and_back_is_the_same_request(
    asked: tuple[Any, list[dict[str, Any]]],
) -> None:
    system, turns = asked
    assume(not list(anthropic_faults(turns, system)))  # a request Anthropic accepts
    log = read_request(system, turns)
    validate_messages(log)  # the log can keep it
    assert request_of(log) == (system, turns)


def test_the_log_reads_what_it_cannot_hold_as_short_text() -> None:
    log = read_request(None, [{"role": "user", "content": [DOCUMENT, IMAGE]}])
    content = log[0]["content"]
    assert content[0] == {"type": "text", "text": "[document: notes]\nthe doc"}
    assert content[1]["type"] == "image_url"


def test_consecutive_turns_of_one_role_stay_apart() -> None:
    turns = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    assert request_of(read_request(None, turns))[1] == turns


def test_a_summary_before_kept_turns_is_sent_as_text() -> None:
    turns = [{"role": "user", "content": [{"type": "text", "text": "now", "cache_control":
                                           {"type": "ephemeral"}}]}]  # fmt: skip
    prompt = [{"role": "system", "content": "be brief"},
              {"role": "user", "content": "[SUMMARIZED] earlier"},
              {"role": "assistant", "content": "ok"}, *read_request(None, turns)]  # fmt: skip
    system, sent = request_of(prompt)
    assert system == "be brief"
    assert sent == [{"role": "user", "content": [{"type": "text", "text": "[SUMMARIZED] earlier"}]},
                    {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}, *turns]  # fmt: skip


def test_an_answer_keeps_its_thinking() -> None:
    content = [{"type": "thinking", "thinking": "hm", "signature": "s"},
               {"type": "text", "text": "yes"}]  # fmt: skip
    message = answer_of(content)
    assert message["content"] == "yes" and message["meta"]["anthropic"]["content"] == content


@pytest.mark.parametrize(
    ("system", "turns", "field"),
    [
        (None, [], "messages"),
        (None, {"role": "user"}, "messages"),
        (3, [{"role": "user", "content": "x"}], "system"),
        (None, [{"role": "user", "content": []}], "content"),
        (None, [{"role": "user", "content": 5}], "content"),
    ],
)
def test_bad_requests_name_the_field(system: Any, turns: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        read_request(system, turns)
    assert caught.value.field == field
