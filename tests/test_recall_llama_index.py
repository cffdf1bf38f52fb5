"""The recall tools in LlamaIndex's own loop (``ContextfoldMemory.recall_tools``).

A ``FunctionAgent`` on ``LiteLLM`` with the notes task's tools and the recall
tools runs turns against a scripted, streaming Chat Completions server on
127.0.0.1, its memory's view folded by an inline runner; a file read early
names a codeword. On the last turn the scripted model reads its own input: it
searches for the codeword, expands the folded range the search names, and
searches for a word of another session (``recall_script``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from fake_providers import FakeProvider, Reply, Request
from recall_script import (
    ANSWER,
    SECRET,
    RecallModel,
    folded_hit,
    newest_result,
    other_session,
    recall_faults,
    secret_line,
)

pytest.importorskip("llama_index.core")
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.llms.litellm import LiteLLM
from llama_index_agents import SYSTEM, Task
from llama_index_replies import streamed

from contextfold import Memory
from contextfold.integrations.llama_index import ContextfoldMemory
from contextfold.memory.recall_tools import EXPAND, FOLDS, SEARCH
from contextfold.runtime import InlineRunner
from contextfold.testing.adapter_contract_checks import split_pairs

BUDGET = 1500
TURNS = 8
RECALL_TOKENS = 300  # well within the budget: a result the prompt must clip is no use


def recalling(model: RecallModel) -> Callable[[Request], Reply]:
    """The scripted model of the recall turn: its next call follows from its input."""

    def reply(request: Request) -> Reply:
        step = model.step(newest_result(request.body))
        if step is None:
            return streamed(ANSWER, key="done")
        name, arguments = step
        call_id = f"recall_{len(model.results)}"
        return streamed("", [(call_id, name, arguments)], key=call_id)

    return reply


def test_the_agent_recalls_what_was_folded_and_nothing_of_another_session(
    tmp_path: Path,
) -> None:
    task = Task(tmp_path / "notes", turns=TURNS)
    secret_file = task.folder / "notes_2.txt"
    secret_file.write_text(secret_line + secret_file.read_text(encoding="utf-8"))
    with Memory(tmp_path / "agent.db") as memory, FakeProvider("openai") as fake:
        other_session(memory.session("other"))
        kept = ContextfoldMemory.from_defaults(
            memory, "agent", system=SYSTEM, preset="offline", budget=BUDGET
        )
        runner = InlineRunner()
        runner.watch(kept.session.view("default"))
        llm = LiteLLM(
            model="openai/gpt-4o-mini", api_key="test-key", api_base=fake.url, max_retries=0
        )
        tools = [*task.tools(), *kept.recall_tools(max_tokens=RECALL_TOKENS)]
        llama_agent = FunctionAgent(tools=tools, llm=llm)
        model = RecallModel()

        async def turns() -> str:
            for turn in range(1, TURNS + 1):
                fake.add(*task.replies(turn))
                await llama_agent.run(task.question(turn), memory=kept)
            fake.answer("POST", "/v1/chat/completions", recalling(model))
            return str(await llama_agent.run("What was the codeword?", memory=kept))

        try:
            answer = asyncio.run(turns())
        finally:
            runner.stop()
        recall_turn = fake.requests[2 * TURNS :]
        assert answer == ANSWER
        offered = [t["function"]["name"] for t in fake.requests[0].body["tools"]]
        assert offered == ["read_file", "count_lines", SEARCH, EXPAND, FOLDS]
        results = model.results
        assert len(recall_turn) == len(results) + 1  # each result reached the next request
        asked = [json.dumps(m) for m in recall_turn[0].body["messages"]]
        assert recall_faults(results, asked) == []
        assert results[1]["start"] == folded_hit(results[0])["folded"][0]  # type: ignore[index]
        for request in recall_turn:
            assert split_pairs(request.body["messages"], open_tail=False) == []
        assert kept.session.view("default").folds(), "the budget made it fold"
        log = kept.session.history()
        logged_calls = [m["tool_call_id"] for m in log if m["role"] == "tool"]
        assert logged_calls[-len(results) :] == [f"recall_{n}" for n in range(len(results))]
        assert SECRET in json.dumps(log)  # the codeword is in the log, found by the search


def test_the_tools_follow_the_memorys_branch(tmp_path: Path) -> None:
    """After ``reset`` the memory is on an empty branch: its tools no longer read the old
    conversation, which stays in the log."""
    with Memory(tmp_path / "agent.db") as memory:
        kept = ContextfoldMemory.from_defaults(memory, "s", system=SYSTEM)
        kept.session.record([{"role": "user", "content": "plan alpha please"}])
        search = {t.metadata.name: t for t in kept.recall_tools()}[SEARCH]
        found = json.loads(str(search.call(query="alpha")))
        assert [h["role"] for h in found["hits"]] == ["user"]
        kept.reset()
        after = json.loads(str(asyncio.run(search.acall(query="alpha"))))
        assert after["hits"] == []
        mistake = json.loads(str(search.call(query="alpha", colour="red")))
        assert mistake["field"] == "colour"
