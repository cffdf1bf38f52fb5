"""The proxy core's parts that no one wire shows: upstreams by kind, and a conversation that
continues a previous response (the branch ending at the answer logged under its id)."""

from __future__ import annotations

import pytest
from server_harness import make_service

from contextfold.core.errors import InvalidInput
from contextfold.server.errors import ServiceError
from contextfold.server.proxy_budget import Fit
from contextfold.server.proxy_flow import _prepare, response_key
from contextfold.server.proxy_shared import ProxyState
from contextfold.server.proxy_wire import Conversation
from contextfold.server.settings import Settings


def test_one_upstream_of_each_kind() -> None:
    both = Settings(upstream=("openai-compatible:http://a/v1/", "anthropic:https://b/v1"))
    assert both.upstreams == {"openai": "http://a/v1", "anthropic": "https://b/v1"}
    assert both.upstream_key("anthropic") == "ANTHROPIC_API_KEY"
    assert both.upstream_key("openai") == "CONTEXTFOLD_UPSTREAM_KEY"
    with pytest.raises(InvalidInput) as caught:
        Settings(upstream=("anthropic:http://a", "anthropic:http://b"))
    assert caught.value.field == "upstream" and "one anthropic upstream" in caught.value.reason


def continued(answer_id: str, *new: str) -> Conversation:
    return Conversation([{"role": "user", "content": text} for text in new], continues=answer_id)


def test_a_continued_conversation_is_the_branch_to_that_answer_then_the_new_items() -> None:
    service = make_service()
    state = ProxyState({})
    session = service.memory.session("t/s")
    session.extend([{"role": "user", "content": "hi"}])
    answer = {"role": "assistant", "content": "hello", "meta": {"responses": {"id": "resp_1"}}}
    session.extend([answer], keys=[response_key("resp_1")])
    fitted = Fit(4000, "flag")
    _prepare(service, state, "t/s", continued("resp_1", "and then?"), "default", None, fitted)
    assert [m.message["content"] for m in session.messages()] == ["hi", "hello", "and then?"]
    with pytest.raises(ServiceError) as caught:
        _prepare(service, state, "t/s", continued("resp_9", "x"), "default", None, fitted)
    assert caught.value.status == 400 and caught.value.field == "previous_response_id"
    with pytest.raises(ServiceError) as caught:
        _prepare(service, state, "t/new", continued("resp_1", "x"), "default", None, fitted)
    assert caught.value.status == 400 and caught.value.field == "previous_response_id"
    # An earlier response continued another way: a branch from that answer, rendered alone.
    turn = _prepare(service, state, "t/s", continued("resp_1", "other"), "default", None, fitted)
    assert [m["content"] for m in turn.prompt] == ["hi", "hello", "other"]
    assert [(m.seq, m.parent) for m in session.messages()] == [(1, 0), (2, 1), (3, 2), (4, 2)]
    # The same continuation again matches what is logged: nothing appended twice.
    _prepare(service, state, "t/s", continued("resp_1", "other"), "default", None, fitted)
    assert len(session.messages()) == 4
