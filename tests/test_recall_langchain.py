"""The recall tools in LangChain's own agent loop (``ContextfoldMiddleware(recall_tools=True)``)
and beside a chain's chat history (``ContextfoldChatMessageHistory.recall_tools``).

``create_agent`` with a ``read_file`` tool and the middleware runs turns against a
scripted Chat Completions server on 127.0.0.1; the middleware folds its view
inline; a file read early names a codeword. On the last turn the scripted model
reads its own input: it searches for the codeword, expands the folded range the
search names, and searches for a word of another session (``recall_script``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain")
from fake_openai import openai_reply
from fake_providers import FakeProvider, Reply, Request
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langchain_scripted import call_reply, chat_model
from prompt_checks import pairing_faults
from recall_script import (
    ANSWER,
    RecallModel,
    folded_hit,
    newest_result,
    other_session,
    recall_faults,
    secret_line,
)

from contextfold import InvalidInput, Memory
from contextfold.integrations.langchain import ContextfoldChatMessageHistory, ContextfoldMiddleware
from contextfold.memory.recall_tools import EXPAND, FOLDS, SEARCH

BUDGET = 1500
TURNS = 8
RECALL_TOKENS = 300  # well within the budget: a result the prompt must clip is no use
SYSTEM = "You read files and answer briefly."
FILE_TEXT = "The loader reads each shard, checks its header and keeps the index. " * 20


@tool
def read_file(path: str) -> str:
    """Read a file of the project."""
    return f"contents of {path}: " + (secret_line if path == "f1.py" else "") + FILE_TEXT


class Script:
    """The model: reads the file a user message names, then answers; on the recall question
    runs ``RecallModel``, its next call following from its input."""

    def __init__(self) -> None:
        self.model = RecallModel()
        self.recall_requests: list[dict[str, Any]] = []

    def __call__(self, request: Request) -> Reply:
        messages = request.body["messages"]
        last = messages[-1]
        asked = next(m["content"] for m in reversed(messages) if m["role"] == "user")
        if asked.startswith("What was the codeword"):
            self.recall_requests.append(request.body)
            step = self.model.step(newest_result(request.body))
            if step is None:
                return openai_reply(ANSWER)
            name, arguments = step
            return call_reply([(name, arguments, f"recall_{len(self.model.results)}")])
        path = asked.split()[-1].rstrip("?")
        if last["role"] == "user":
            return call_reply([("read_file", {"path": path}, f"call_{path}")])
        return openai_reply(f"{path} holds the loader.")


def test_the_agent_recalls_what_was_folded_and_nothing_of_another_session() -> None:
    memory = Memory()
    other_session(memory.session("other"))
    middleware = ContextfoldMiddleware(
        memory=memory,
        settings={"preset": "offline", "budget": BUDGET},
        recall_tools=True,
        recall_max_tokens=RECALL_TOKENS,
    )
    script = Script()
    with FakeProvider("openai") as server:
        server.answer("POST", "/v1/chat/completions", script)
        agent = create_agent(
            chat_model(server.url), tools=[read_file], system_prompt=SYSTEM, middleware=[middleware]
        )
        config: Any = {"configurable": {"thread_id": "chat"}}
        state: dict[str, Any] = {"messages": []}
        for n in range(TURNS):
            state["messages"].append(HumanMessage(f"What is in f{n}.py?"))
            state = agent.invoke(state, config)
        state["messages"].append(HumanMessage("What was the codeword?"))
        state = agent.invoke(state, config)
        offered = [t["function"]["name"] for t in server.requests[0].body["tools"]]

    assert state["messages"][-1].content == ANSWER
    assert sorted(offered) == sorted(["read_file", SEARCH, EXPAND, FOLDS])
    results = script.model.results
    assert len(script.recall_requests) == len(results) + 1  # each result reached the next request
    asked = [json.dumps(m) for m in script.recall_requests[0]["messages"]]
    assert recall_faults(results, asked) == []
    assert results[1]["start"] == folded_hit(results[0])["folded"][0]  # type: ignore[index]
    for body in script.recall_requests:
        assert pairing_faults(body["messages"]) == []
    session = memory.session("chat")
    assert session.view("default").folds(), "the budget made it fold"
    log = session.history()
    logged_calls = [m["tool_call_id"] for m in log if m["role"] == "tool"]
    assert logged_calls[-len(results) :] == [f"recall_{n}" for n in range(len(results))]
    assert len(session.messages()) == len(log)  # once each, one branch


def test_a_chat_history_gives_the_same_tools_over_its_session(tmp_path: Path) -> None:
    memory = Memory(tmp_path / "chat.db")
    other_session(memory.session("other"))
    history = ContextfoldChatMessageHistory(memory, "chain", system=SYSTEM)
    history.add_messages([HumanMessage("plan alpha please")])
    tools = {t.name: t for t in history.recall_tools(max_tokens=RECALL_TOKENS)}
    assert sorted(tools) == sorted([SEARCH, EXPAND, FOLDS])
    found = json.loads(tools[SEARCH].invoke({"query": "alpha"}))
    assert [h["seq"] for h in found["hits"]] == [2]
    assert json.loads(tools[SEARCH].invoke({"query": "zanzibar"}))["hits"] == []
    expanded = json.loads(tools[EXPAND].invoke({"start": 1, "end": 2}))
    assert [m["content"] for m in expanded["messages"]] == [SYSTEM, "plan alpha please"]


def test_recall_max_tokens_is_checked() -> None:
    with pytest.raises(InvalidInput) as raised:
        ContextfoldMiddleware(memory=Memory(), recall_tools=True, recall_max_tokens=5)
    assert raised.value.field == "recall_max_tokens"
