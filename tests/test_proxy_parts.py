"""The proxy's pure parts: matching a conversation against the log, assembling a
streamed answer, and deciding what an upstream status means."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from contextfold import InvalidInput, Memory
from contextfold.core.messages import Message
from contextfold.memory.matching import (
    LogDigest,
    LogDigests,
    Match,
    append_keys,
    digest,
    match,
)
from contextfold.server.proxy_chat import StreamAnswer, answer_message, client_messages
from contextfold.server.proxy_upstream import (
    Upstream,
    failure_of,
    parse_upstream,
    passed_headers,
    refusal_body,
)

CALL = {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": '{"p":1}'}}


def logged(messages: list[Message], *, system: str | None = None) -> tuple[Memory, str]:
    memory = Memory()
    session = memory.session("t/s", system=system)
    if messages:
        session.extend(messages)
    return memory, session.id


def digests_of(memory: Memory, sid: str) -> LogDigest:
    return LogDigests().current(memory.existing_session(sid))


def test_client_messages_drop_what_clients_echo_around_the_protocol() -> None:
    echoed = {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "audio": None,
        "function_call": None,
        "annotations": [],
        "tool_calls": [CALL],
    }
    assert client_messages([echoed]) == [{"role": "assistant", "tool_calls": [CALL]}]
    assert client_messages([{"role": "assistant", "content": None, "tool_calls": []}]) == [
        {"role": "assistant", "content": ""}
    ]


@pytest.mark.parametrize("bad", [None, [], {"role": "user"}, "hi"])
def test_client_messages_must_be_a_non_empty_list(bad: Any) -> None:
    with pytest.raises(InvalidInput) as err:
        client_messages(bad)
    assert err.value.field == "messages"


def test_client_messages_refuse_a_message_that_is_not_an_object() -> None:
    with pytest.raises(InvalidInput) as err:
        client_messages([{"role": "user", "content": "a"}, "b"])
    assert err.value.index == 1


def test_digest_sees_what_a_model_sees() -> None:
    a = {"role": "assistant", "content": None, "tool_calls": [CALL]}
    untyped = {"id": "call_1", "function": {"name": "read", "arguments": '{"p":1}'}}
    assert digest(a) == digest({"role": "assistant", "content": "", "tool_calls": [untyped]})
    assert digest({"role": "user", "content": "x", "meta": {"k": 1}}) == digest(
        {"role": "user", "content": "x"}
    )
    assert digest({"role": "user", "content": "x", "name": None}) == digest(
        {"role": "user", "content": "x"}
    )
    assert digest({"role": "user", "content": "x"}) != digest({"role": "user", "content": "y"})
    assert digest({"role": "user", "content": "x"}) != digest(
        {"role": "user", "content": [{"type": "text", "text": "x"}]}
    )
    assert digest({"role": "user", "content": "x"}) != digest(
        {"role": "user", "content": "x", "name": "n"}
    )
    assert digest({"role": "user", "content": "x"}) != digest({"role": "system", "content": "x"})
    other_args = {**CALL, "function": {"name": "read", "arguments": '{"p":2}'}}
    assert digest(a) != digest({"role": "assistant", "tool_calls": [other_args]})


def test_answer_message_keeps_what_a_model_is_sent_back() -> None:
    answer = {
        "role": "assistant",
        "content": "hi",
        "refusal": None,
        "annotations": [{"type": "url_citation"}],
        "audio": None,
    }
    assert answer_message(answer) == {"role": "assistant", "content": "hi"}
    refused = answer_message({"role": "assistant", "content": None, "refusal": "no"})
    assert refused == {"role": "assistant", "content": "", "refusal": "no"}
    assert answer_message("nothing") is None


def test_the_log_as_prefix_gives_the_new_messages() -> None:
    conversation = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "read it"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "data"},
    ]
    memory, sid = logged(conversation[:3])
    client = client_messages([*conversation, {"role": "user", "content": "and?"}])
    assert match(digests_of(memory, sid), client) == Match(at=3, matched=3, skipped=0)


def test_a_session_system_prompt_is_skipped_for_a_client_without_one() -> None:
    memory, sid = logged([{"role": "user", "content": "hi"}], system="server side")
    log = digests_of(memory, sid)
    assert log.system == 1
    client = client_messages([{"role": "user", "content": "hi"}, {"role": "user", "content": "2"}])
    assert match(log, client) == Match(at=2, matched=1, skipped=1)
    # A client sending another system prompt starts a new first message: nothing matches.
    mine = client_messages([{"role": "system", "content": "mine"}, *client])
    assert match(log, mine) == Match(at=0, matched=0, skipped=0)


def test_a_changed_message_continues_where_the_lists_part() -> None:
    memory, sid = logged([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    client = client_messages(
        [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "B"},
            {"role": "user", "content": "c"},
        ]
    )
    assert match(digests_of(memory, sid), client) == Match(at=1, matched=1, skipped=0)


def test_a_conversation_shorter_than_the_log_continues_where_it_ends() -> None:
    memory, sid = logged([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    short = client_messages([{"role": "user", "content": "a"}])
    assert match(digests_of(memory, sid), short) == Match(at=1, matched=1, skipped=0)


def test_the_deepest_match_wins_and_of_equals_the_newest() -> None:
    memory, sid = logged([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    session = memory.existing_session(sid)
    session.append({"role": "assistant", "content": "b2"}, parent=1)
    session.append({"role": "assistant", "content": "b"}, parent=1)  # the same answer again
    session.append({"role": "user", "content": "c"}, parent=2)
    log = digests_of(memory, sid)
    ab = client_messages([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    assert match(log, ab) == Match(at=4, matched=2, skipped=0)
    b2 = client_messages([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b2"}])
    assert match(log, b2) == Match(at=3, matched=2, skipped=0)
    abc = client_messages([*ab, {"role": "user", "content": "c"}])
    assert match(log, abc) == Match(at=5, matched=3, skipped=0)  # c follows the older b


def test_a_malformed_message_is_new_and_refused_when_appended() -> None:
    memory, sid = logged([{"role": "user", "content": "a"}])
    client = client_messages([{"role": "wizard", "content": "a"}])
    found = match(digests_of(memory, sid), client)
    assert found == Match(at=0, matched=0, skipped=0)
    with pytest.raises(InvalidInput) as err:
        memory.existing_session(sid).extend(client, parent=found.at)
    assert (err.value.index, err.value.field) == (0, "role")


def test_append_keys_name_the_place_and_every_message_to_it() -> None:
    a, b = {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}
    keys = append_keys(3, [a, b])
    assert len(set(keys)) == 2 and all(k.startswith("proxy@3:") for k in keys)
    assert append_keys(3, [a])[0] == keys[0]
    assert append_keys(3, [b])[0] != keys[1]
    assert append_keys(4, [a])[0] != keys[0]


def test_log_digests_read_only_the_new_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    memory, sid = logged([{"role": "user", "content": str(i)} for i in range(5)])
    session = memory.existing_session(sid)
    table = LogDigests()
    first = table.current(session)
    assert first.last_seq == 5
    reads: list[tuple[int, int | None]] = []
    read = memory.store.messages

    def counted(session_id: str, start: int = 1, end: int | None = None) -> Any:
        reads.append((start, end))
        return read(session_id, start, end)

    monkeypatch.setattr(memory.store, "messages", counted)
    assert table.current(session) is first
    assert reads == []
    session.append({"role": "user", "content": "5"})
    again = table.current(session)
    assert reads == [(6, 6)]
    assert again.digest_at(5) == digest({"role": "user", "content": "5"})
    assert (len(again), again.role_at(5)) == (6, "user")
    # A recreated session (another created_at) is read afresh.
    memory.delete_session(sid)
    time.sleep(0.01)
    recreated = memory.session(sid)
    recreated.extend([{"role": "user", "content": "new"}] * 2)
    assert recreated.created_at != session.created_at
    assert table.current(recreated).last_seq == 2
    assert reads[-1] == (1, 2)


def test_log_digests_keep_within_their_capacity_dropping_the_least_recently_used() -> None:
    memory = Memory()
    table = LogDigests(capacity=5)
    for name in ("a", "b", "c"):
        memory.session(name).extend([{"role": "user", "content": name}] * 2)
        table.current(memory.existing_session(name))
    assert list(table._table) == ["b", "c"]
    table.current(memory.existing_session("b"))
    memory.session("d").extend([{"role": "user", "content": "d"}] * 4)
    table.current(memory.existing_session("d"))
    assert list(table._table) == ["d"]
    # One session over the capacity on its own is still kept: it is the one in use.
    memory.session("d").extend([{"role": "user", "content": "d"}] * 4)
    assert len(table.current(memory.existing_session("d"))) == 8
    table.forget("d")
    assert table._messages == 0


def sse(*events: Any) -> bytes:
    out = b""
    for event in events:
        data = event if isinstance(event, str) else json.dumps(event)
        out += f"data: {data}\n\n".encode()
    return out


def chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> dict[str, Any]:
    choice = {"index": index, "delta": delta, "finish_reason": finish}
    return {"id": "c", "object": "chat.completion.chunk", "choices": [choice]}


def feed_split(answer: StreamAnswer, data: bytes, size: int) -> None:
    for i in range(0, len(data), size):
        answer.feed(data[i : i + size])
    answer.close()


@pytest.mark.parametrize("size", [1, 7, 10_000])
def test_a_streamed_text_answer_is_assembled_from_pieces_cut_anywhere(size: int) -> None:
    stream = sse(
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Hel"}),
        chunk({"content": "lo é"}),
        chunk({"content": "x"}, index=1),
        chunk({}, finish="stop"),
        {"id": "c", "choices": [], "usage": {"total_tokens": 3}},
        "[DONE]",
    )
    answer = StreamAnswer()
    feed_split(answer, stream.replace(b"\n", b"\r\n") if size == 7 else stream, size)
    assert answer.done
    assert answer.message() == {"role": "assistant", "content": "Hello é"}


def test_streamed_tool_calls_are_assembled_by_index() -> None:
    stream = sse(
        chunk({"role": "assistant", "content": None}),
        chunk({"tool_calls": [{"index": 0, "id": "a", "type": "function",
                               "function": {"name": "read", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"p":'}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "b", "type": "function",
                               "function": {"name": "list", "arguments": "{}"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
        chunk({}, finish="tool_calls"),
        "[DONE]",
    )  # fmt: skip
    answer = StreamAnswer()
    feed_split(answer, stream, 5)
    assert answer.message() == {
        "role": "assistant",
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "read", "arguments": '{"p":1}'}},
            {"id": "b", "type": "function", "function": {"name": "list", "arguments": "{}"}},
        ],
    }


def test_a_stream_cut_short_or_failing_gives_no_message() -> None:
    cut = StreamAnswer()
    feed_split(cut, sse(chunk({"content": "Hel"})), 100)
    assert cut.message() is None
    failed = StreamAnswer()
    feed_split(failed, sse(chunk({"content": "Hel"}), {"error": {"message": "boom"}}, "[DONE]"), 9)
    assert failed.message() is None
    assert failed.failed is not None and "boom" in failed.failed
    garbled = StreamAnswer()
    feed_split(garbled, b"data: {not json\n\n" + sse("[DONE]"), 100)
    assert garbled.message() is None


def test_a_finish_reason_without_done_completes_and_a_last_event_without_blank_line_counts() -> (
    None
):
    answer = StreamAnswer()
    answer.feed(sse(chunk({"content": "ok"})) + b"data: " + json.dumps(chunk({}, "stop")).encode())
    assert answer.message() is None
    answer.close()
    assert answer.message() == {"role": "assistant", "content": "ok"}


def test_multi_line_data_and_comments() -> None:
    answer = StreamAnswer()
    body = json.dumps(chunk({"content": "a"}, finish="stop"), indent=1)
    event = b": keep-alive\nevent: message\n" + b"".join(
        b"data: " + line.encode() + b"\n" for line in body.splitlines()
    )
    answer.feed(event + b"\n")
    assert answer.message() == {"role": "assistant", "content": "a"}


def test_parse_upstream() -> None:
    assert parse_upstream("openai-compatible:http://127.0.0.1:9/v1/") == (
        "openai",
        "http://127.0.0.1:9/v1",
    )
    assert parse_upstream("anthropic:https://x/v1") == ("anthropic", "https://x/v1")
    for bad in (
        "http://x/v1",
        "openai-compatible:ftp://x",
        "anthropic:ftp://x",
        "claude:https://x",
    ):
        with pytest.raises(InvalidInput) as err:
            parse_upstream(bad)
        assert err.value.field == "upstream"


@pytest.mark.parametrize(
    ("status", "is_failure"),
    [(200, False), (400, False), (404, False), (429, False), (401, True), (403, True),
     (500, True), (503, True)],
)  # fmt: skip
def test_failure_of(status: int, is_failure: bool) -> None:
    failure = failure_of(status)
    assert (failure is not None) == is_failure
    if failure is not None:
        assert failure.status == status
        assert f"HTTP {status}" in failure.reason


@pytest.mark.parametrize(
    ("error", "kept"),
    [({"type": "invalid_request_error", "code": "context_length_exceeded", "param": "messages"},
      {"type": "invalid_request_error", "code": "context_length_exceeded", "param": "messages"}),
     ({"type": "sk-abc", "code": "key_9f2c", "param": "messages.[0].content"},
      {"type": None, "code": None, "param": None}),
     ({"type": "upstream", "code": 42, "param": None}, {"type": None, "code": None, "param": None}),
     ("a string", {"type": None, "code": None, "param": None})],
)  # fmt: skip
def test_refusal_body_keeps_plain_words_that_are_no_part_of_a_secret(
    error: object, kept: dict[str, object]
) -> None:
    body = json.dumps({"error": error}).encode()
    refused = json.loads(refusal_body(400, body, ["sk-upstream-key", ""]))["error"]
    assert {k: refused[k] for k in kept} == kept
    assert refused["message"].startswith("the upstream refused the request (HTTP 400")
    assert json.loads(refusal_body(404, b"not json"))["error"]["code"] is None


def test_scrub_masks_the_key_credentials_and_url_passwords() -> None:
    upstream = Upstream("http://127.0.0.1:9/v1", api_key="sk-live-123", timeout_s=1.0)
    text = upstream.scrub(
        b"key sk-live-123 refused; Authorization: Bearer abc.def, https://u:pw@host/x" + b"!" * 5000
    )
    assert "sk-live-123" not in text and "abc.def" not in text and "pw@" not in text
    assert "Bearer ***" in text and len(text) <= 2100


def test_passed_headers() -> None:
    kept = passed_headers(
        {
            "Content-Type": "application/json",
            "content-length": "3",
            "x-request-id": "r",
            "openai-processing-ms": "4",
            "x-ratelimit-remaining-requests": "9",
            "set-cookie": "a=b",
            "connection": "keep-alive",
        }
    )
    assert set(kept) == {
        "Content-Type",
        "x-request-id",
        "openai-processing-ms",
        "x-ratelimit-remaining-requests",
    }
