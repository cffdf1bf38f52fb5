"""What the proxy refuses and what it keeps to itself, over a real server and upstream.

Upstream error bodies and cookies never reach a client; a body that is not
declared JSON, too many messages, or malformed JSON anywhere is a 4xx before
anything is logged; a stream the upstream cuts short ends with an error event.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fake_openai import openai_reply
from fake_providers import FakeProvider, Reply, error_reply
from test_proxy import chunk, serve, sse, user
from test_server_events import Stream

SECRET = "sk-upstream-SECRET-0123456789abcdef"
CHAT = "/v1/chat/completions"


@pytest.fixture
def served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, FakeProvider, Any]]:
    """A served app whose upstream key is ``SECRET``, and its upstream."""
    monkeypatch.setenv("CONTEXTFOLD_UPSTREAM_KEY", SECRET)
    with FakeProvider("openai") as upstream:
        spec = f"openai-compatible:{upstream.url}"
        with serve(tmp_path, spec, upstream_timeout_s=2.0) as server:
            yield server.url, upstream, server


def post(url: str, body: bytes | str, session: str = "s1", **headers: str) -> httpx.Response:
    sent = {"content-type": "application/json", "X-Contextfold-Session": session, **headers}
    return httpx.post(f"{url}{CHAT}", content=body, headers=sent, timeout=20)


def log_of(server: Any, sid: str = "s1") -> list[dict[str, Any]]:
    try:
        return server.log("local", sid)  # type: ignore[no-any-return]
    except Exception:  # no such session: nothing was logged
        return []


ONE = json.dumps({"model": "m", "messages": [user("a")]})


@pytest.mark.parametrize("status", [401, 403, 407, 500, 503])
def test_an_upstream_failure_is_502_without_its_body(
    served: tuple[str, FakeProvider, Any], status: int, caplog: pytest.LogCaptureFixture
) -> None:
    url, upstream, _ = served
    upstream.add(error_reply("openai", status, f"key {SECRET} is wrong, Bearer {SECRET}"))
    with caplog.at_level(logging.WARNING, "contextfold.proxy"):
        answer = post(url, ONE)
    assert answer.status_code == 502
    assert SECRET not in answer.text and "is wrong" not in answer.text
    assert answer.json()["error"]["code"] == "upstream_error"
    assert f"HTTP {status}" in answer.json()["error"]["message"]
    # The body is in the server's log, the key masked.
    assert "is wrong" in caplog.text and SECRET not in caplog.text


def test_an_upstream_client_error_keeps_its_status_and_only_safe_fields(
    served: tuple[str, FakeProvider, Any], caplog: pytest.LogCaptureFixture
) -> None:
    url, upstream, _ = served
    body = {
        "error": {
            "message": f"your key {SECRET} cannot use model nope",
            "type": "invalid_request_error",
            "code": SECRET,
            "param": "model",
        }
    }
    upstream.add(Reply(status=400, body=body, headers={"x-echo": SECRET, "x-request-id": "r1"}))
    with caplog.at_level(logging.WARNING, "contextfold.proxy"):
        answer = post(url, ONE)
    assert answer.status_code == 400
    assert SECRET not in answer.text and SECRET not in str(answer.headers)
    error = answer.json()["error"]
    assert error == {
        "message": "the upstream refused the request (HTTP 400)",
        "type": "invalid_request_error",
        "code": None,
        "param": "model",
    }
    assert answer.headers["x-request-id"] == "r1"
    assert "cannot use model nope" in caplog.text and SECRET not in caplog.text
    # The SDK raises the class of the status, with the kept code.
    upstream.add(error_reply("openai", 404, f"model {SECRET}"))
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="m", messages=[user("a")], user="s1")
    assert SECRET not in str(caught.value)


def test_a_key_echoed_in_a_streamed_error_event_is_masked(
    served: tuple[str, FakeProvider, Any],
) -> None:
    url, upstream, server = served
    error = {"error": {"message": f"bad key {SECRET}", "type": "auth"}}
    upstream.add(Reply(body=sse(error), headers={"content-type": "text/event-stream"}))
    body = json.dumps({"model": "m", "messages": [user("a")], "stream": True})
    answer = post(url, body)
    assert answer.status_code == 200
    assert SECRET not in answer.text and "bad key ***" in answer.text
    assert log_of(server) == [user("a")]


def test_a_cookie_set_by_the_upstream_is_never_sent_again(
    served: tuple[str, FakeProvider, Any],
) -> None:
    url, upstream, _ = served
    answer = openai_reply("x")
    upstream.add(
        Reply(body=answer.body, headers={"set-cookie": "tenant=one; Path=/"}),
        openai_reply("y"),
    )
    first = post(url, ONE, session="a")
    assert first.status_code == 200 and "set-cookie" not in first.headers
    assert post(url, ONE, session="b").status_code == 200
    assert [r.headers.get("cookie") for r in upstream.requests] == [None, None]


@pytest.mark.parametrize(
    "content_type", [None, "text/plain", "application/x-www-form-urlencoded", "text/json"]
)
def test_a_body_not_declared_json_is_415_and_logs_nothing(
    served: tuple[str, FakeProvider, Any], content_type: str | None
) -> None:
    url, upstream, server = served
    headers = {"X-Contextfold-Session": "s1"}
    if content_type is not None:
        headers["content-type"] = content_type
    answer = httpx.post(f"{url}{CHAT}", content=ONE, headers=headers)
    assert answer.status_code == 415
    assert answer.json()["error"]["code"] == "unsupported_media_type"
    assert answer.json()["error"]["field"] == "Content-Type"
    assert upstream.requests == [] and log_of(server) == []
    upstream.add(openai_reply("x"))
    ok = post(url, ONE, **{"content-type": "Application/JSON; charset=utf-8"})
    assert ok.status_code == 200


def test_too_many_messages_are_refused_fast_and_healthz_stays_fast(
    served: tuple[str, FakeProvider, Any],
) -> None:
    url, upstream, server = served
    messages = [{"role": "user", "content": "x"}] * 33_000
    body = json.dumps({"model": "m", "messages": messages}, separators=(",", ":"))
    assert len(body) <= 1 << 20
    waits: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        with httpx.Client(base_url=url) as client:
            while not stop.is_set():
                start = time.perf_counter()
                assert client.get("/healthz").status_code == 200
                waits.append(time.perf_counter() - start)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        start = time.perf_counter()
        for _ in range(5):
            answer = post(url, body)
            assert answer.status_code == 422
            assert answer.json()["error"]["field"] == "messages"
        took = (time.perf_counter() - start) / 5
    finally:
        stop.set()
        prober.join()
    assert took < 0.5, f"a refused request took {took:.3f} s"
    assert max(waits) < 0.5, f"/healthz waited {max(waits):.3f} s"
    assert upstream.requests == [] and log_of(server) == []
    too_big = json.dumps({"model": "m", "messages": [user("x" * (1 << 20))]})
    assert post(url, too_big).status_code == 413
    upstream.add(openai_reply("x"))
    at_cap = json.dumps({"model": "m", "messages": [user("a")] * 1000})
    assert post(url, at_cap).status_code == 200


SURROGATE = '"\\udc80"'  # JSON for a lone surrogate; @S in a body below stands for it
MALFORMED = {
    "surrogate key in a message": '{"messages": [{"role": "user", "content": "x", @S: 1}]}',
    "surrogate key in meta": '{"messages": [{"role": "user", "content": "x", "meta": {@S: 1}}]}',
    "surrogate in a pass-through field": '{"messages": [{"role": "user", "content": "x"}], '
    '"metadata": {"k": @S}}',
    "surrogate key in a pass-through field": '{"messages": [{"role": "user", "content": "x"}],'
    ' "metadata": {@S: "v"}}',
    "nested 1,000 deep": '{"messages": [{"role": "user", "content": "x"}], "tools": '
    + "[" * 1000
    + "]" * 1000
    + "}",
    "nested 100,000 deep": '{"messages": [{"role": "user", "content": "x"}], "tools": '
    + "[" * 100_000
    + "]" * 100_000
    + "}",
    "NaN": '{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}',
    "Infinity": '{"messages": [{"role": "user", "content": "x"}], "top_p": -Infinity}',
}


@pytest.mark.parametrize("body", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_json_is_4xx_before_anything_is_logged(
    served: tuple[str, FakeProvider, Any], body: str
) -> None:
    url, upstream, server = served
    upstream.add(openai_reply("x"))
    answer = post(url, body.replace("@S", SURROGATE))
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "invalid_input"
    assert upstream.requests == [] and log_of(server) == []


# Headers arrive as Latin-1: b"\xb2" is "²", which str.isdigit takes and int() refuses.
@pytest.mark.parametrize("raw", [b"\xb2", b"1\xb9", b"\xb3\xb3", b"+5", b"5 5", b"0x10", b""])
def test_a_budget_header_is_ascii_digits_only(
    served: tuple[str, FakeProvider, Any], raw: bytes
) -> None:
    url, _, server = served
    answer = httpx.post(
        f"{url}{CHAT}",
        content=ONE,
        headers=[
            (b"content-type", b"application/json"),
            (b"x-contextfold-session", b"s1"),
            (b"x-contextfold-budget", raw),
        ],
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == "X-Contextfold-Budget"
    assert log_of(server) == []


def test_a_stream_closed_without_done_ends_with_an_error_and_logs_no_answer(
    served: tuple[str, FakeProvider, Any], caplog: pytest.LogCaptureFixture
) -> None:
    url, upstream, server = served
    cut = sse(chunk({"role": "assistant", "content": "Hel"}), chunk({"content": "lo"}))
    upstream.add(Reply(body=cut, headers={"content-type": "text/event-stream"}))
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    seen: list[str] = []
    with caplog.at_level(logging.WARNING, "contextfold.proxy"):
        stream = client.chat.completions.create(
            model="m", messages=[user("a")], user="s1", stream=True
        )
        with pytest.raises(openai.APIError) as caught:
            for part in stream:
                seen.append(part.choices[0].delta.content or "")
    assert "".join(seen) == "Hello"
    assert "without [DONE]" in str(caught.value)
    assert log_of(server) == [user("a")]
    assert "truncated" in caplog.text
    # The session's event stream hears of it too.
    events = Stream(f"{url}/api/v1/sessions/s1/events")
    try:
        upstream.add(Reply(body=cut, headers={"content-type": "text/event-stream"}))
        again = client.chat.completions.create(
            model="m", messages=[user("a")], user="s1", stream=True
        )
        with pytest.raises(openai.APIError):
            list(again)
        told = events.next("truncated")
        assert told["session"] == "s1" and "without [DONE]" in told["reason"]
    finally:
        events.close()
    # A whole stream (finish reason, no [DONE]) is an answer, logged.
    whole = sse(chunk({"role": "assistant", "content": "Hi"}), chunk({}, finish="stop"))
    upstream.add(Reply(body=whole, headers={"content-type": "text/event-stream"}))
    done = client.chat.completions.create(model="m", messages=[user("a")], user="s1", stream=True)
    assert "".join(p.choices[0].delta.content or "" for p in done if p.choices) == "Hi"
    assert log_of(server) == [user("a"), {"role": "assistant", "content": "Hi"}]


def test_a_long_conversation_passes_and_only_its_new_messages_are_capped(
    served: tuple[str, FakeProvider, Any],
) -> None:
    """A client resends every message on each call: a conversation over the append cap
    goes through as long as each call adds at most ``MAX_MESSAGES`` to the log."""
    url, upstream, server = served
    turns = [m for i in range(400) for m in (user(f"q{i}"), {"role": "assistant", "content": "a"})]
    for upto in (600, 800):  # 599 sent and the answer, then 199 more and the answer
        upstream.add(openai_reply("a"))
        answer = post(url, json.dumps({"model": "m", "messages": turns[: upto - 1]}))
        assert answer.status_code == 200, answer.text
    assert log_of(server) == turns
    longer = turns + [user(f"more{i}") for i in range(1_001)]
    refused = post(url, json.dumps({"model": "m", "messages": longer}))
    assert refused.status_code == 422
    assert refused.json()["error"]["field"] == "messages"
    assert "new to the session" in refused.json()["error"]["message"]
    assert len(log_of(server)) == 800
    fresh = post(url, json.dumps({"model": "m", "messages": longer}), session="s2")
    assert fresh.status_code == 422 and log_of(server, "s2") == []
