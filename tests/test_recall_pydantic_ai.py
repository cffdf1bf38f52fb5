"""The recall tools in Pydantic AI's own loop (``ContextfoldHistory(..., recall_tools=True)``).

An ``Agent`` on ``OpenAIChatModel`` with a ``read_file`` tool and the
capability runs turns against a scripted Chat Completions server on 127.0.0.1,
its view folded by an inline runner; a file read early names a codeword. On
the last turn the scripted model reads its own input: it searches for the
codeword, expands the folded range the search names, and searches for a word
of another session (``recall_script``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_openai import openai_reply
from fake_providers import FakeProvider, Reply, Request
from prompt_checks import pairing_faults
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai_agents import SYSTEM, call_reply, file_text
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
from contextfold.integrations.pydantic_ai import ContextfoldHistory
from contextfold.memory.recall_tools import EXPAND, FOLDS, SEARCH
from contextfold.runtime import InlineRunner

BUDGET = 1500
TURNS = 8
RECALL_TOKENS = 300  # well within the budget: a result the prompt must clip is no use


def reviewer(base_url: str, history: ContextfoldHistory) -> Agent[Any, str]:
    model = OpenAIChatModel(
        "gpt-4o-mini", provider=OpenAIProvider(base_url=base_url, api_key="test-key")
    )
    built: Agent[Any, str] = Agent(model, system_prompt=SYSTEM, capabilities=[history])

    @built.tool_plain
    def read_file(path: str) -> str:
        """Read a source file."""
        return (secret_line if path.endswith("_1.py") else "") + file_text(path)

    return built


def recalling(model: RecallModel) -> Callable[[Request], Reply]:
    """The scripted model of the recall turn: its next call follows from its input."""

    def reply(request: Request) -> Reply:
        step = model.step(newest_result(request.body))
        if step is None:
            return openai_reply(ANSWER)
        name, arguments = step
        return call_reply(name, arguments, f"recall_{len(model.results)}")

    return reply


def test_the_agent_recalls_what_was_folded_and_nothing_of_another_session(
    tmp_path: Path,
) -> None:
    memory = Memory(tmp_path / "chat.db")
    other_session(memory.session("other"))
    session = memory.session("s1")
    runner = InlineRunner()
    runner.watch(session.view("default", preset="offline", budget=BUDGET))
    history = ContextfoldHistory(session, recall_tools=True, recall_max_tokens=RECALL_TOKENS)
    with FakeProvider("openai") as fake:
        for n in range(1, TURNS + 1):
            fake.add(
                call_reply("read_file", {"path": f"src/module_{n}.py"}, f"call_{n}"),
                openai_reply(f"Reviewed module_{n}."),
            )
        built = reviewer(fake.url, history)
        messages: list[Any] = []
        for n in range(1, TURNS + 1):
            text = f"Please review src/module_{n}.py."
            messages = built.run_sync(text, message_history=messages).all_messages()
        model = RecallModel()
        fake.answer("POST", "/v1/chat/completions", recalling(model))
        result = built.run_sync("What was the codeword?", message_history=messages)
        recall_turn = fake.requests[2 * TURNS :]
    runner.stop()

    assert result.output == ANSWER
    offered = [t["function"]["name"] for t in fake.requests[0].body["tools"]]
    assert sorted(offered) == sorted(["read_file", SEARCH, EXPAND, FOLDS])
    results = model.results
    assert len(recall_turn) == len(results) + 1  # each call's result reached the next request
    asked = [json.dumps(m) for m in recall_turn[0].body["messages"]]
    assert recall_faults(results, asked) == []
    assert results[1]["start"] == folded_hit(results[0])["folded"][0]  # type: ignore[index]
    for request in recall_turn:
        assert pairing_faults(request.body["messages"]) == []
    assert session.view("default").folds(), "the budget made it fold"
    log = session.history()
    logged_calls = [m["tool_call_id"] for m in log if m["role"] == "tool"]
    assert logged_calls[-len(results) :] == [f"recall_{n}" for n in range(len(results))]
    assert len(session.messages()) == len(log)  # once each, one branch


def test_a_run_reads_its_own_session_chosen_from_its_deps(tmp_path: Path) -> None:
    """``memory=`` with ``session_of``: each run's tools read that run's session only."""
    memory = Memory(tmp_path / "chat.db")
    history = ContextfoldHistory(
        memory=memory, session_of=lambda ctx: str(ctx.deps), recall_tools=True
    )
    with FakeProvider("openai") as fake:
        built = reviewer(fake.url, history)
        fake.add(openai_reply("Noted."))
        told = built.run_sync("Keep this private: the password is zanzibar.", deps="other")
        for _ in ("other", "s1"):
            fake.add(
                call_reply(SEARCH, {"query": "zanzibar password"}, "recall_search"),
                openai_reply("done"),
            )
        built.run_sync("Find it.", message_history=told.all_messages(), deps="other")
        built.run_sync("Find it.", deps="s1")
        answers = [newest_result(fake.requests[n].body) or {} for n in (2, 4)]
    theirs, mine = ([h["snippet"] for h in answer["hits"]] for answer in answers)
    assert any("the password is zanzibar" in t for t in theirs), theirs
    assert not [t for t in mine if "contextfold_search" not in t], mine  # only its own call


def test_recall_settings_are_checked(tmp_path: Path) -> None:
    session = Memory(tmp_path / "chat.db").session("s1")
    with pytest.raises(InvalidInput) as raised:
        ContextfoldHistory(session, recall_tools=True, recall_max_tokens=10)
    assert raised.value.field == "recall_max_tokens"
    with pytest.raises(InvalidInput) as raised:
        ContextfoldHistory(session, recall_tools="yes")  # type: ignore[arg-type]
    assert raised.value.field == "recall_tools"
    assert ContextfoldHistory(session).get_toolset() is None
