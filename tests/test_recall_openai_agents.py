"""The recall tools in the OpenAI Agents SDK's own loop (``ContextfoldSession.recall_tools``).

An ``Agent`` with a ``read_file`` tool and the recall tools runs turns on the
Responses API against a scripted server on 127.0.0.1, with a view folded by an
inline runner; a file read early names a codeword. On the last turn the scripted model reads its own input: it
searches for a codeword folded out of it, expands the range the search names,
and searches for a word of another session (``recall_script``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_openai import called, responses_reply, said
from fake_providers import FakeProvider, Reply, Request
from recall_script import (
    ANSWER,
    RecallModel,
    folded_hit,
    other_session,
    recall_faults,
    secret_line,
)

from contextfold import Memory
from contextfold.memory.recall_tools import EXPAND, FOLDS, SEARCH
from contextfold.runtime import InlineRunner

agents = pytest.importorskip("agents")
from contextfold.integrations.openai_agents import ContextfoldSession  # noqa: E402

BUDGET = 1500
FILE_TEXT = "lorem ipsum dolor sit amet " * 60
TURNS = 8
RECALL_TOKENS = 300  # well within the budget: a result the prompt must clip is no use


def reader(session: ContextfoldSession) -> Any:
    @agents.function_tool
    def read_file(path: str) -> str:
        """Read a file of the project."""
        return f"contents of {path}: " + (secret_line if path == "f1.py" else "") + FILE_TEXT

    return agents.Agent(
        name="reader",
        instructions="Answer from the files.",
        tools=[read_file, *session.recall_tools(max_tokens=RECALL_TOKENS)],
        model="gpt-5",
    )


def newest_result(body: dict[str, Any]) -> dict[str, Any] | None:
    """The request's newest input item, when it is a recall tool's result."""
    last = body["input"][-1]
    if last.get("type") != "function_call_output" or not last["call_id"].startswith("recall_"):
        return None
    return json.loads(last["output"])  # type: ignore[no-any-return]


def recalling(model: RecallModel) -> Callable[[Request], Reply]:
    """The scripted model of the recall turn: its next call follows from its input."""

    def reply(request: Request) -> Reply:
        step = model.step(newest_result(request.body))
        if step is None:
            return responses_reply([said(ANSWER, "msg_done")], response_id="r_done")
        name, arguments = step
        return responses_reply(
            [called(name, json.dumps(arguments), f"recall_{len(model.results)}")]
        )

    return reply


def test_the_agent_recalls_what_was_folded_and_nothing_of_another_session(
    tmp_path: Path,
) -> None:
    memory = Memory(tmp_path / "cf.db")
    other_session(memory.session("other"))
    view = memory.session("chat").view("default", preset="offline", budget=BUDGET)
    runner = InlineRunner()
    runner.watch(view)
    session = ContextfoldSession.open(memory, "chat")
    with FakeProvider("responses") as fake:
        client = agents.AsyncOpenAI(base_url=fake.url, api_key="sk-scripted", max_retries=0)
        agents.set_default_openai_client(client, use_for_tracing=False)
        agents.set_tracing_disabled(True)
        for n in range(TURNS):
            call = called("read_file", json.dumps({"path": f"f{n}.py"}), f"call_{n}")
            fake.add(
                responses_reply([call], response_id=f"r{n}a"),
                responses_reply([said(f"f{n}.py holds lorem ipsum.")], response_id=f"r{n}b"),
            )
        agent = reader(session)
        model = RecallModel()
        config = agents.RunConfig(call_model_input_filter=session.call_model_input_filter)

        async def conversation() -> Any:
            for n in range(TURNS):
                text = f"What is in f{n}.py?"
                await agents.Runner.run(agent, text, session=session, run_config=config)
            fake.answer("POST", "/v1/responses", recalling(model))
            return await agents.Runner.run(
                agent, "What was the codeword?", session=session, run_config=config
            )

        with runner:
            result = asyncio.run(conversation())
        recall_turn = fake.requests[2 * TURNS :]

    assert result.final_output == ANSWER
    assert [t["name"] for t in fake.requests[0].body["tools"]] == [
        "read_file",
        SEARCH,
        EXPAND,
        FOLDS,
    ]
    results = model.results
    assert len(recall_turn) == len(results) + 1  # each call's result reached the next request
    asked = [json.dumps(i) for i in recall_turn[0].body["input"]]
    assert recall_faults(results, asked) == []
    assert results[1]["start"] == folded_hit(results[0])["folded"][0]  # type: ignore[index]
    assert memory.session("chat").view("default").folds(), "the budget made it fold"
    # the recall calls and their results are the conversation's own, logged once
    log = memory.session("chat").history()
    logged_calls = [m["tool_call_id"] for m in log if m["role"] == "tool"]
    assert logged_calls[-len(results) :] == [f"recall_{n}" for n in range(len(results))]
    assert len(memory.session("chat").messages()) == len(log)


def test_the_tools_follow_the_sessions_pinned_branch(tmp_path: Path) -> None:
    """A session pinned to a branch (``branch=``) gives tools that read that branch only."""
    memory = Memory(tmp_path / "cf.db")
    chat = memory.session("chat")
    first = chat.record([{"role": "user", "content": "plan alpha please"}])
    chat.record(
        [
            {"role": "user", "content": "plan alpha please"},
            {"role": "assistant", "content": "alpha done"},
        ]
    )
    chat.record([{"role": "user", "content": "plan bravo instead"}])
    assert first.at == 1
    pinned = ContextfoldSession.open(memory, "chat", branch=2)
    search = {t.name: t for t in pinned.recall_tools()}[SEARCH]

    async def ask(query: str) -> dict[str, Any]:
        out = await search.on_invoke_tool(None, json.dumps({"query": query}))  # type: ignore[arg-type]
        return json.loads(out)  # type: ignore[no-any-return]

    assert [h["seq"] for h in asyncio.run(ask("alpha"))["hits"]] == [2, 1]
    assert asyncio.run(ask("bravo"))["hits"] == []
    newest = {t.name: t for t in ContextfoldSession.open(memory, "chat").recall_tools()}[SEARCH]
    found = json.loads(asyncio.run(newest.on_invoke_tool(None, '{"query": "bravo"}')))  # type: ignore[arg-type]
    assert [h["seq"] for h in found["hits"]] == [3]
