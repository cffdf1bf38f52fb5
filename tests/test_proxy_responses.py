"""The Responses API through the proxy, end to end: the official ``openai`` SDK's
``client.responses.create`` as the client, a real uvicorn server on 127.0.0.1, and a
scripted Responses upstream on 127.0.0.1 (``tests/fake_providers.py``).

A multi-turn function-calling task, whole and streamed: every call succeeds,
each forwarded prompt fits the budget, calls and their outputs stay paired in
what goes upstream, reasoning items and images reach it unchanged, and the log
holds every message once, in order. Then ``previous_response_id`` chains,
streams that do not complete, and bad requests.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fake_providers import (
    FakeProvider,
    Reply,
    called,
    error_reply,
    responses_reply,
    responses_stream,
    said,
)
from prompt_checks import pairing_faults, prompt_tokens
from server_harness import running

from contextfold.core.messages import Message, for_model
from contextfold.formats.responses import request_messages
from contextfold.server.app import create_app
from contextfold.server.service import Service
from contextfold.server.settings import Settings

TOOLS = [{"type": "function", "name": "read", "parameters": {"type": "object"}}]
IMAGE = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "high"}
BUDGET = 1500


def reasoning(n: int) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": f"rs_{n}",
        "summary": [{"type": "summary_text", "text": f"thought {n}"}],
        "encrypted_content": f"opaque-{n}==",
    }


@dataclass
class Rig:
    service: Service
    url: str
    upstream: FakeProvider

    def client(self, session: str = "s1", **headers: str) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=f"{self.url}/v1",
            api_key="unused",
            max_retries=0,
            timeout=20,
            default_headers={"X-Contextfold-Session": session, **headers},
        )

    def sent(self) -> list[dict[str, Any]]:
        return [r.body for r in self.upstream.requests if r.path == "/v1/responses"]

    def log(self, sid: str = "s1") -> list[Message]:
        return [m.message for m in self.service.memory.store.messages(f"local/{sid}")]

    def reply(self, output: list[dict[str, Any]], *, stream: bool, response_id: str) -> None:
        make = responses_stream if stream else responses_reply
        self.upstream.add(make(output, response_id=response_id))


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    with FakeProvider("responses") as upstream:
        settings = Settings(
            database=str(tmp_path / "cf.db"),
            upstream=f"openai-compatible:{upstream.url}",
            auth=False,
            upstream_timeout_s=5.0,
        )
        service = Service(settings)
        try:
            with running(create_app(service)) as url:
                yield Rig(service, url, upstream)
        finally:
            service.close()


def create(client: openai.OpenAI, *, stream: bool, **body: Any) -> Any:
    """``responses.create``, and the completed Response however it came."""
    if not stream:
        return client.responses.create(**body)
    events = list(client.responses.create(stream=True, **body))
    assert events[-1].type == "response.completed"
    return events[-1].response


def paired(items: list[Any]) -> bool:
    """Each function_call answered by one output after it, and each output after its call."""
    open_calls: set[str] = set()
    answered: set[str] = set()
    for item in items:
        if isinstance(item, dict) and item.get("type") == "function_call":
            open_calls.add(item["call_id"])
        elif isinstance(item, dict) and item.get("type") == "function_call_output":
            if item["call_id"] not in open_calls or item["call_id"] in answered:
                return False
            answered.add(item["call_id"])
    return open_calls == answered


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_function_calling_task_over_many_turns(rig: Rig, stream: bool) -> None:
    client = rig.client(**{"X-Contextfold-Budget": str(BUDGET)})
    history: list[Any] = []
    turns = 6
    for n in range(turns):
        content: Any = f"Read file {n} and tell me what it says. " * 8
        if n == 2:
            content = [{"type": "input_text", "text": content}, IMAGE]
        history.append({"role": "user", "content": content})
        rig.reply(
            [
                reasoning(n),
                said(f"Reading {n}.", f"msg_{n}a"),
                called("read", f'{{"n":{n}}}', f"c{n}"),
            ],
            stream=stream,
            response_id=f"resp_{n}a",
        )
        first = create(client, stream=stream, model="gpt-5", instructions="Be brief.",
                       input=history, tools=TOOLS)  # fmt: skip
        assert first.output[-1].call_id == f"c{n}"
        history += first.output  # the SDK's own items, sent back as they are
        history.append({"type": "function_call_output", "call_id": f"c{n}",
                        "output": f"line {n} of the file " * 60})  # fmt: skip
        rig.reply([said(f"File {n} says line {n}.", f"msg_{n}b")], stream=stream,
                  response_id=f"resp_{n}b")  # fmt: skip
        second = create(client, stream=stream, model="gpt-5", instructions="Be brief.",
                        input=history, tools=TOOLS)  # fmt: skip
        assert second.output_text == f"File {n} says line {n}."
        history += second.output
        # The latest turn reaches the upstream whole: its reasoning item and its image unchanged.
        sent = rig.sent()[-1]
        assert reasoning(n) in sent["input"]
        if n == 2:
            assert {"role": "user", "content": content} in sent["input"]
    sent_all = rig.sent()
    assert len(sent_all) == 2 * turns
    for body in sent_all:
        assert body["instructions"] == "Be brief." and body["tools"] == TOOLS
        assert body.get("stream", False) is stream
        assert paired(body["input"])
        prompt = [for_model(m) for m in request_messages(body)]
        assert pairing_faults(prompt) == []
        assert prompt_tokens(prompt) <= BUDGET
    # Compacted: not everything was sent, and what left the prompt took its kept items along.
    assert len(sent_all[-1]["input"]) < len(history)
    assert reasoning(0) not in sent_all[-1]["input"]
    # The log: every message once, in order, answers included, as the client's history reads.
    whole = request_messages({"instructions": "Be brief.", "input": json.loads(
        json.dumps([i if isinstance(i, dict) else i.model_dump(exclude_unset=True)
                    for i in history]))})  # fmt: skip
    assert [for_model(m) for m in rig.log()] == [for_model(m) for m in whole]
    kept = rig.log()[2]["meta"]["responses"]
    assert kept["id"] == "resp_0a" and kept["items"][0] == reasoning(0)


def test_previous_response_id_chains_send_only_the_new_input(rig: Rig) -> None:
    client = rig.client()
    rig.reply([reasoning(1), called("read", "{}", "c1")], stream=False, response_id="resp_1")
    first = client.responses.create(model="gpt-5", instructions="Be brief.", input="read it",
                                    tools=TOOLS, store=False)  # fmt: skip
    rig.reply([said("It says hi.")], stream=True, response_id="resp_2")
    events = list(client.responses.create(
        model="gpt-5", instructions="Be brief.", previous_response_id=first.id, stream=True,
        input=[{"type": "function_call_output", "call_id": "c1", "output": "hi"}],
    ))  # fmt: skip
    second = events[-1].response
    rig.reply([said("Bye.")], stream=False, response_id="resp_3")
    client.responses.create(model="gpt-5", instructions="Be brief.",
                            previous_response_id=second.id, input="thanks")  # fmt: skip
    last = rig.sent()[-1]
    assert "previous_response_id" not in last and last["instructions"] == "Be brief."
    assert rig.sent()[0]["store"] is False
    call = called("read", "{}", "c1")
    assert last["input"] == [
        {"role": "user", "content": "read it"},
        reasoning(1),
        call,
        {"type": "function_call_output", "call_id": "c1", "output": "hi"},
        said("It says hi."),
        {"role": "user", "content": "thanks"},
    ]
    roles = [m["role"] for m in rig.log()]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user", "assistant"]
    ids = [m.get("meta", {}).get("responses", {}).get("id") for m in rig.log()]
    assert [i for i in ids if i] == ["resp_1", "resp_2", "resp_3"]
    # An id this session never logged, and the Conversations API, are refused by name.
    before = rig.log()
    with pytest.raises(openai.BadRequestError) as unknown:
        client.responses.create(model="gpt-5", previous_response_id="resp_9", input="x")
    assert unknown.value.body["field"] == "previous_response_id"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as stored:
        client.responses.create(model="gpt-5", conversation="conv_1", input="x")
    assert stored.value.body["field"] == "conversation"  # type: ignore[index]
    assert rig.log() == before


@pytest.mark.parametrize("end", ["cut", "response.failed", "response.incomplete"])
def test_a_stream_that_does_not_complete_logs_no_answer(rig: Rig, end: str) -> None:
    if end == "cut":
        whole = responses_stream([said("Hello there")])
        rig.upstream.add(Reply(body=whole.body, headers=whole.headers, cut=len(whole.body) // 2))
    else:
        rig.upstream.add(responses_stream([said("Hello there")], end=end))
    events = list(rig.client().responses.create(model="gpt-5", input="hi", stream=True))
    if end == "cut":
        assert events[-1].type == "error" and events[-1].code == "stream_truncated"
    else:
        assert events[-1].type == end
    assert rig.log() == [{"role": "user", "content": "hi"}]


def test_upstream_refusals_keep_their_status_in_openais_shape(rig: Rig) -> None:
    rig.upstream.add(error_reply("responses", 400, "bad model sk-secret"))
    with pytest.raises(openai.BadRequestError) as refused:
        rig.client().responses.create(model="nope", input="hi")
    assert "sk-secret" not in str(refused.value.body)
    assert rig.log() == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model": "m"}, "input"),
        ({"model": "m", "input": 3}, "input"),
        ({"model": "m", "input": ["x"]}, "input[0]"),
        ({"model": "m", "input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"model": "m", "input": [{"type": "function_call_output", "output": "x"}]},
         "input[0].call_id"),
        ({"model": "m", "input": "x", "instructions": 3}, "instructions"),
        ({"model": "m", "input": "x", "previous_response_id": 3}, "previous_response_id"),
        ({"model": "gpt-4o", "input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        ({"model": "m", "input": "x", "stream": "yes"}, "stream"),
    ],
)  # fmt: skip
def test_bad_requests_are_4xx_naming_the_field_and_store_nothing(
    rig: Rig, body: dict[str, Any], field: str
) -> None:
    answer = httpx.post(f"{rig.url}/v1/responses", json=body,
                        headers={"X-Contextfold-Session": "s1"})  # fmt: skip
    assert 400 <= answer.status_code < 500
    assert answer.json()["error"]["field"] == field
    assert rig.sent() == []
    assert rig.service.memory.sessions("local/") == []


def test_max_output_tokens_is_the_answers_room_in_the_budget(rig: Rig) -> None:
    rig.upstream.add(responses_reply([said("ok")]))
    answer = httpx.post(
        f"{rig.url}/v1/responses",
        json={"model": "gpt-4o", "input": "hi", "max_output_tokens": 1000},
        headers={"X-Contextfold-Session": "s1"},
    )
    assert answer.status_code == 200
    assert answer.headers["X-Contextfold-Budget"] == str(128_000 - 1000)
    assert rig.sent()[0]["max_output_tokens"] == 1000
