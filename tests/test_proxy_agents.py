"""The OpenAI Agents SDK, with its defaults (the Responses API), through the proxy.

An ``Agent`` with a function tool is run by ``Runner.run`` and
``Runner.run_streamed`` over several turns against a scripted Responses
upstream on 127.0.0.1: the client only changes its ``AsyncOpenAI`` client
(``set_default_openai_client``) and sends the session in ``default_headers``.
Every run succeeds, the tool is called with what the model asked, calls and
outputs stay paired upstream, and the log holds every message once, in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_providers import FakeProvider, called, responses_reply, responses_stream, said
from prompt_checks import pairing_faults, prompt_tokens
from server_harness import running

from contextfold.core.messages import for_model
from contextfold.formats.responses import request_messages
from contextfold.server.app import create_app
from contextfold.server.service import Service
from contextfold.server.settings import Settings

agents = pytest.importorskip("agents")
BUDGET = 700


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[Service, str, FakeProvider]]:
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
                yield service, url, upstream
        finally:
            service.close()


def _agent(read: list[str]) -> Any:
    @agents.function_tool
    def read_file(path: str) -> str:
        """Read a file of the project."""
        read.append(path)
        return f"contents of {path}: " + "lorem ipsum " * 80

    return agents.Agent(name="reader", instructions="Answer from the files.", tools=[read_file])


async def _turn(agent: Any, given: Any, *, stream: bool, **options: Any) -> Any:
    if not stream:
        return await agents.Runner.run(agent, given, **options)
    result = agents.Runner.run_streamed(agent, given, **options)
    async for _ in result.stream_events():
        pass
    return result


@pytest.mark.parametrize("stream", [False, True], ids=["run", "run_streamed"])
def test_an_agent_with_a_tool_runs_several_turns_through_the_proxy(
    proxied: tuple[Service, str, FakeProvider], stream: bool
) -> None:
    service, url, upstream = proxied
    make = responses_stream if stream else responses_reply
    client = agents.AsyncOpenAI(
        base_url=f"{url}/v1",
        api_key="unused",  # the contextfold key (the server runs without auth here)
        max_retries=0,
        default_headers={"X-Contextfold-Session": "agent", "X-Contextfold-Budget": str(BUDGET)},
    )
    agents.set_default_openai_client(client, use_for_tracing=False)
    agents.set_tracing_disabled(True)
    read: list[str] = []
    agent = _agent(read)
    turns = 4
    for n in range(turns):
        upstream.add(
            make(
                [called("read_file", f'{{"path": "f{n}.py"}}', f"call_{n}")], response_id=f"r{n}a"
            ),
            make([said(f"f{n}.py holds lorem ipsum.", f"m{n}")], response_id=f"r{n}b"),
        )

    async def conversation() -> list[Any]:
        results = []
        given: Any = "What is in f0.py?"
        for n in range(turns):
            if n == turns - 1:  # the last turn on server-side state: only the new input
                results.append(
                    await _turn(agent, f"And f{n}.py?", stream=stream,
                                previous_response_id=results[-1].last_response_id)
                )  # fmt: skip
                break
            results.append(await _turn(agent, given, stream=stream))
            given = [*results[-1].to_input_list(), {"role": "user", "content": f"And f{n + 1}.py?"}]
        return results

    results = asyncio.run(conversation())
    assert [r.final_output for r in results] == [
        f"f{n}.py holds lorem ipsum." for n in range(turns)
    ]
    assert read == [f"f{n}.py" for n in range(turns)]
    sent = [r.body for r in upstream.requests if r.path == "/v1/responses"]
    assert len(sent) == 2 * turns
    for body in sent:
        assert "previous_response_id" not in body
        assert body["instructions"] == "Answer from the files."
        prompt = [for_model(m) for m in request_messages(body)]
        assert pairing_faults(prompt) == []
        assert prompt_tokens(prompt) <= BUDGET
    assert len(sent[-1]["input"]) < 4 * turns  # compacted: not the whole history
    log = [m.message for m in service.memory.store.messages("local/agent")]
    roles = [m["role"] for m in log]
    assert roles == ["system"] + ["user", "assistant", "tool", "assistant"] * turns
    assert [m["content"] for m in log if m["role"] == "user"] == [
        "What is in f0.py?",
        *[f"And f{n}.py?" for n in range(1, turns)],
    ]
    assert [m["tool_call_id"] for m in log if m["role"] == "tool"] == [
        f"call_{n}" for n in range(turns)
    ]
