"""The Pydantic AI adapter, driven by Pydantic AI's own agent loop.

An ``Agent`` on ``OpenAIChatModel`` talks to a scripted Chat Completions
server on 127.0.0.1; ``ContextfoldHistory`` logs its runs and hands each model
request the view. What the server received is checked without trusting the
library: an independent token count against the budget and the tool-pairing
rule the provider enforces. The log is checked against the run's own history:
every message once, and the original ``ModelMessage``s back from it.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fake_providers import FakeProvider
from prompt_checks import pairing_faults, prompt_tokens
from pydantic_ai import messages as pm
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai_agents import SYSTEM, agent, run_turns, turn_replies

from contextfold import InvalidInput, Memory
from contextfold.core.messages import for_model
from contextfold.integrations.pydantic_ai import ContextfoldHistory, from_chat, to_chat
from contextfold.runtime import InlineRunner

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 1200
TURNS = 8


def dumped(messages: list[pm.ModelMessage]) -> list[dict[str, Any]]:
    return pm.ModelMessagesTypeAdapter.dump_python(messages, mode="json")


def folding_session(tmp_path: Path, name: str = "s1") -> tuple[Memory, Any]:
    memory = Memory(tmp_path / "chat.db")
    session = memory.session(name)
    session.view("default", preset="offline", budget=BUDGET)
    return memory, session


def check_prompts(fake: FakeProvider) -> None:
    """Every request the server got fits the budget by an independent count, its tool
    pairs whole."""
    assert fake.requests
    for request in fake.requests:
        sent = request.body["messages"]
        assert prompt_tokens(sent) <= BUDGET, sent
        assert pairing_faults(sent) == [], sent


def test_turns_fold_within_budget_and_log_each_message_once(tmp_path: Path) -> None:
    memory, session = folding_session(tmp_path)
    runner = InlineRunner()
    runner.watch(session.view("default"))
    with FakeProvider("openai") as fake:
        for n in range(1, TURNS + 1):
            fake.add(*turn_replies(n))
        history = run_turns(agent(fake.url, [ContextfoldHistory(session)]), TURNS)
    runner.stop()
    check_prompts(fake)
    assert len(fake.requests) == 2 * TURNS
    # Folds happened and the model was shown them in place of the turns they cover.
    folds = session.view("default").folds()
    assert folds
    last = fake.requests[-1].body["messages"]
    raw = [for_model(m) for m in to_chat(history)]
    assert len(last) < len(raw)
    fold_texts = {json.dumps(m.get("content")) for f in folds for m in f.messages}
    assert any(json.dumps(m.get("content")) in fold_texts for m in last)
    # The run's history stayed raw, and the log holds it once, exactly.
    logged = session.history()
    assert [for_model(m) for m in logged] == raw
    assert dumped(from_chat(logged)) == dumped(history)
    memory.close()
