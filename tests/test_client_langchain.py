"""LangChain through the proxy: ``ChatOpenAI`` pointed at ``contextfold serve`` and run by
LangChain's own agent loop (``create_agent``), against a scripted OpenAI upstream on 127.0.0.1.

What the docs' LangChain guide promises is checked as a user meets it: every call succeeds,
each prompt sent upstream fits the view's budget, tool calls and results stay paired, and the
log holds every message once, in order.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_providers import FakeProvider, Reply, openai_reply
from server_harness import running

from contextfold.core.tokens import get_counter
from contextfold.server.app import create_app
from contextfold.server.service import Service
from contextfold.server.settings import Settings

BUDGET = 1200
ROUNDS = 6


def _call_reply(i: int) -> Reply:
    reply = openai_reply("")
    choice = reply.body["choices"][0]
    call = {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": "read_file", "arguments": json.dumps({"path": f"notes/{i}.txt"})},
    }
    choice["message"] = {"role": "assistant", "content": None, "tool_calls": [call]}
    choice["finish_reason"] = "tool_calls"
    return reply


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[tuple[str, FakeProvider, Service]]:
    with FakeProvider("openai") as upstream:
        settings = Settings(
            database=str(tmp_path / "cf.db"),
            upstream=f"openai-compatible:{upstream.url}",
            auth=False,
            budget=BUDGET,
            preset="offline",
        )
        service = Service(settings)
        try:
            with running(create_app(service)) as url:
                yield url, upstream, service
        finally:
            service.close()


def test_a_langchain_agent_runs_its_tool_loop_through_the_proxy(
    proxy: tuple[str, FakeProvider, Service],
) -> None:
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    url, upstream, service = proxy

    @tool
    def read_file(path: str) -> str:
        """Read a file of the project."""
        return f"{path}: " + "the build uses make and the tests use pytest. " * 20

    model = ChatOpenAI(
        model="gpt-4o-mini",
        base_url=f"{url}/v1",
        api_key="unused",  # type: ignore[arg-type]
        default_headers={"X-Contextfold-Session": "lc1"},
        max_retries=0,
    )
    agent = create_agent(model, tools=[read_file], system_prompt="You read files.")
    state: dict[str, Any] = {"messages": []}
    for turn in range(ROUNDS):
        upstream.add(_call_reply(turn), openai_reply(f"done {turn}"))
        state["messages"].append({"role": "user", "content": f"summarise notes/{turn}.txt"})
        state = agent.invoke(state)
        assert state["messages"][-1].content == f"done {turn}"

    chats = [r for r in upstream.requests if r.path == "/v1/chat/completions"]
    assert len(chats) == 2 * ROUNDS
    for request in chats:
        prompt = request.body["messages"]
        assert get_counter().messages(prompt) <= BUDGET
        asked = {c["id"] for m in prompt for c in m.get("tool_calls") or []}
        answered = [m["tool_call_id"] for m in prompt if m["role"] == "tool"]
        assert sorted(answered) == sorted(asked)

    logged = [m.message for m in service.memory.existing_session("local/lc1").messages()]
    roles = [m["role"] for m in logged]
    assert roles == ["system"] + ["user", "assistant", "tool", "assistant"] * ROUNDS
    calls = [m["tool_calls"][0]["id"] for m in logged if m.get("tool_calls")]
    results = [m["tool_call_id"] for m in logged if m["role"] == "tool"]
    assert calls == results == [f"call_{i}" for i in range(ROUNDS)]
    # Late prompts are folded, not cut: the first round survives as a fold's text.
    assert len(chats[-1].body["messages"]) < len(logged)
