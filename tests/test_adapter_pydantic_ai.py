"""The Pydantic AI adapter, driven by Pydantic AI's own agent loop.

An ``Agent`` on ``OpenAIChatModel`` talks to a scripted Chat Completions
server on 127.0.0.1; ``ContextfoldHistory`` logs its runs and hands each model
request the view. What the server received is checked without trusting the
library: an independent token count against the budget and the tool-pairing
rule the provider enforces. The log is checked against the run's own history:
every message once, and the original ``ModelMessage``s back from it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fake_openai import openai_reply
from fake_providers import FakeProvider, Reply, Request
from prompt_checks import pairing_faults, prompt_tokens
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai import messages as pm
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai_agents import agent, call_reply, run_turns, turn_replies
from scripted_agents import Step, replies

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


def every_part() -> list[pm.ModelMessage]:
    """A conversation holding every part type a chat can carry, and the ones it cannot."""
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    )
    return [
        pm.ModelRequest(
            parts=[
                pm.SystemPromptPart("You review code.", timestamp=at),
                pm.SystemPromptPart("Answer in English.", timestamp=at),
                pm.UserPromptPart(
                    [
                        "Look at these:",
                        pm.ImageUrl(url="https://example.com/cat.png"),
                        pm.BinaryContent(data=png, media_type="image/png"),
                        pm.BinaryContent(data=b"%PDF-1.4 small", media_type="application/pdf"),
                        pm.DocumentUrl(url="https://example.com/spec.pdf"),
                        pm.AudioUrl(url="https://example.com/note.mp3"),
                        pm.BinaryContent(data=b"RIFF....WAVE", media_type="audio/wav"),
                        pm.CachePoint(),
                    ],
                    timestamp=at,
                ),
            ],
            timestamp=at,
            instructions="Be brief.",
            run_id="run-1",
            metadata={"tenant": "a"},
        ),
        pm.ModelResponse(
            parts=[
                pm.ThinkingPart("The image first.", signature="sig-1", provider_name="openai"),
                pm.TextPart("Reading the file."),
                pm.ToolCallPart("read_file", {"path": "a.py"}, tool_call_id="call-1"),
                pm.NativeToolCallPart("web_search", {"q": "pep8"}, "ws-1", provider_name="openai"),
                pm.NativeToolReturnPart("web_search", {"hits": 3}, "ws-1", provider_name="openai"),
                pm.FilePart(pm.BinaryContent(data=png, media_type="image/png")),
            ],
            model_name="gpt-4o-mini",
            timestamp=at,
            finish_reason="tool_call",
            provider_response_id="chatcmpl-1",
        ),
        pm.ModelRequest(
            parts=[
                pm.ToolReturnPart("read_file", {"lines": 12}, "call-1", timestamp=at),
                pm.UserPromptPart("And the tests?", timestamp=at),
            ],
            timestamp=at,
        ),
        pm.ModelResponse(
            parts=[pm.ToolCallPart("read_file", '{"path": 1}', tool_call_id="call-2")],
            timestamp=at,
        ),
        pm.ModelRequest(
            parts=[
                pm.ToolReturnPart(
                    "read_file",
                    "path must be a string",
                    "call-2",
                    outcome="retried",
                    timestamp=at,
                ),
            ],
            timestamp=at,
        ),
        pm.ModelResponse(parts=[pm.CompactionPart("earlier: a.py read")], timestamp=at),
        # Nothing in it a model reads: kept with the message before it.
        pm.ModelRequest(parts=[pm.CompactionPart("the app's own summary")], timestamp=at),
        pm.ModelRequest(
            parts=[
                pm.RetryFeedbackPart(
                    "answer with text", retry=pm.RetryInfo("model_retry"), timestamp=at
                )
            ],
            timestamp=at,
        ),
        pm.ModelResponse(parts=[pm.TextPart("a.py is fine.")], timestamp=at),
    ]


def test_every_part_type_comes_back_from_the_log(tmp_path: Path) -> None:
    memory = Memory(tmp_path / "parts.db")
    session = memory.session("parts")
    original = every_part()
    recorded = session.record(to_chat(original))
    assert recorded.matched == 0
    logged = session.history()
    assert dumped(from_chat(logged)) == dumped(original)
    # What the model reads of each: the chat messages contextfold counts and folds.
    assert [m["role"] for m in logged] == [
        "system", "user", "assistant", "tool", "user", "assistant", "tool", "assistant",
        "user", "assistant",
    ]  # fmt: skip
    assert logged[0]["content"] == "You review code.\n\nAnswer in English."
    kinds = [p["type"] for p in logged[1]["content"]]
    assert kinds == ["text", "image_url", "image_url", "file", "text", "text", "input_audio"]
    assert logged[2]["tool_calls"][0]["function"] == {
        "name": "read_file",
        "arguments": '{"path":"a.py"}',
    }
    # Sent again, whole or as a run goes on: nothing is logged twice.
    again = session.record(to_chat([*original, pm.ModelRequest(parts=[pm.UserPromptPart("more")])]))
    assert [m.seq for m in again.logged] == [11]


def test_a_message_partly_shown_keeps_its_other_fields() -> None:
    """A request whose tool result was folded comes back with its user prompt alone."""
    original = every_part()
    chat = to_chat(original)
    without_result = chat[:3] + chat[4:]
    back = from_chat(without_result)
    request = back[2]
    assert isinstance(request, pm.ModelRequest)
    assert [p.part_kind for p in request.parts] == ["user-prompt"]
    assert request.timestamp == original[2].timestamp
    # A chat message that keeps nothing (a fold's summary) becomes a part the model reads.
    folded = from_chat([{"role": "user", "content": "[folded: seq 2-5] a.py was read"}, *chat[4:]])
    assert isinstance(folded[0], pm.ModelRequest)
    assert folded[0].parts[0] == pm.UserPromptPart(
        "[folded: seq 2-5] a.py was read", timestamp=folded[0].parts[0].timestamp
    )


def test_as_a_history_processor_the_run_keeps_the_view(tmp_path: Path) -> None:
    """Under ``ProcessHistory`` Pydantic AI keeps the processed list as the run's history;
    what it hands back is recognised, so no fold is ever logged as a message."""
    memory, session = folding_session(tmp_path)
    runner = InlineRunner()
    runner.watch(session.view("default"))
    history = ContextfoldHistory(session)
    with FakeProvider("openai") as fake:
        for n in range(1, TURNS + 1):
            fake.add(*turn_replies(n))
        kept = run_turns(agent(fake.url, [ProcessHistory(history)]), TURNS)
    runner.stop()
    check_prompts(fake)
    assert session.view("default").folds()
    logged = session.history()
    roles = [m["role"] for m in logged]
    # The last run's answer goes to no later request: a processor sees it next run.
    assert roles == ["system", *(["user", "assistant", "tool", "assistant"] * TURNS)][:-1]
    asked = [m["content"] for m in logged if m["role"] == "user"]
    assert asked == [f"Please review src/module_{n}.py." for n in range(1, TURNS + 1)]
    # The run's history is the view now: shorter than the log, ending as the log does.
    assert len(to_chat(kept)) < len(logged)
    assert for_model(to_chat(kept)[-2]) == for_model(logged[-1])
    memory.close()


def test_a_kept_view_handed_back_elsewhere_logs_only_what_is_new(tmp_path: Path) -> None:
    """The view a ``ProcessHistory`` run kept, saved as JSON and resumed by another
    adapter (as another process would): its folds are recognised by their mark, and
    nothing is logged twice nor as a branch."""
    memory, session = folding_session(tmp_path)
    runner = InlineRunner()
    runner.watch(session.view("default"))
    with FakeProvider("openai") as fake:
        for n in range(1, TURNS + 2):
            fake.add(*turn_replies(n))
        kept = run_turns(agent(fake.url, [ProcessHistory(ContextfoldHistory(session))]), TURNS)
        assert any((m.metadata or {}).get("contextfold") for m in kept), "nothing was folded"
        saved = pm.ModelMessagesTypeAdapter.dump_json(kept)
        elsewhere = agent(fake.url, [ProcessHistory(ContextfoldHistory(session))])
        elsewhere.run_sync(
            f"Please review src/module_{TURNS + 1}.py.",
            message_history=pm.ModelMessagesTypeAdapter.validate_json(saved),
        )
    runner.stop()
    check_prompts(fake)
    logged = session.history()
    expected = ["system", *(["user", "assistant", "tool", "assistant"] * (TURNS + 1))][:-1]
    assert [m["role"] for m in logged] == expected
    assert len(session.branches()) == 1
    memory.close()


def test_a_call_awaiting_approval_is_kept_while_the_view_folds(tmp_path: Path) -> None:
    """Pydantic AI's own approval flow: the run ends on a call a human must approve;
    the view folds meanwhile; the next run, given the approval, sends the call and its
    result together, and the log holds both once."""
    memory, session = folding_session(tmp_path)
    runner = InlineRunner()
    runner.watch(session.view("default"))
    with FakeProvider("openai") as fake:
        for n in range(1, TURNS + 1):
            fake.add(*turn_replies(n))
        fake.add(call_reply("deploy", {"target": "production"}, "call_deploy"))
        fake.add(openai_reply("Deployed to production."))
        built = agent(fake.url, [ContextfoldHistory(session)], approvals=True)
        kept = run_turns(built, TURNS)
        waiting = built.run_sync("Ship it.", message_history=kept)
        assert isinstance(waiting.output, DeferredToolRequests)
        assert [m["role"] for m in session.history()[-2:]] == ["user", "assistant"]
        done = built.run_sync(
            message_history=waiting.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals={"call_deploy": True}),
        )
    runner.stop()
    check_prompts(fake)
    assert session.view("default").folds()
    last = fake.requests[-1].body["messages"]
    assert last[-2]["tool_calls"][0]["id"] == "call_deploy"
    assert last[-1] == {
        "role": "tool",
        "tool_call_id": "call_deploy",
        "content": "deployed to production",
    }
    assert dumped(from_chat(session.history())) == dumped(done.all_messages())
    memory.close()


def test_session_of_picks_each_conversation_s_session(tmp_path: Path) -> None:
    memory = Memory(tmp_path / "many.db")
    history = ContextfoldHistory(memory=memory, session_of=lambda ctx: f"user-{ctx.deps}")
    with FakeProvider("openai") as fake:
        built = agent(fake.url, [history])
        for deps in ("ann", "bob"):
            fake.add(*turn_replies(1))
            run_turns(built, 1, deps=deps)
    for deps in ("ann", "bob"):
        logged = memory.existing_session(f"user-{deps}").history()
        assert [m["role"] for m in logged] == ["system", "user", "assistant", "tool", "assistant"]
    memory.close()


def test_async_runs_of_two_sessions_at_once(tmp_path: Path) -> None:
    """``agent.run`` on one event loop, two conversations interleaved: each session's
    log is its own conversation, once, exactly."""
    memory = Memory(tmp_path / "async.db")
    history = ContextfoldHistory(memory=memory, session_of=lambda ctx: str(ctx.deps))

    def answer(request: Request) -> Reply:
        """A tool call for a question, an answer once the tool's result is in."""
        last = request.body["messages"][-1]
        if last["role"] == "user":
            path = last["content"].split()[-1].rstrip(".")
            return call_reply("read_file", {"path": path}, f"call_{abs(hash(path))}")
        return openai_reply("Reviewed it.")

    async def conversation(built: Agent[Any, str], name: str) -> list[pm.ModelMessage]:
        kept: list[pm.ModelMessage] = []
        for n in range(1, 4):
            question = f"Please review src/{name}_{n}.py."
            kept = (await built.run(question, message_history=kept, deps=name)).all_messages()
        return kept

    async def both(built: Agent[Any, str]) -> list[list[pm.ModelMessage]]:
        return list(await asyncio.gather(*(conversation(built, n) for n in ("ann", "bob"))))

    with FakeProvider("openai") as fake:
        fake.answer("POST", "/v1/chat/completions", answer)
        kept = asyncio.run(both(agent(fake.url, [history])))
    for name, messages in zip(("ann", "bob"), kept, strict=True):
        logged = memory.existing_session(name).history()
        assert dumped(from_chat(logged)) == dumped(messages)
        assert all(name in json.dumps(m["content"]) for m in logged if m["role"] == "user")
    memory.close()


def test_a_streamed_run_logs_its_answer_as_the_run_keeps_it(tmp_path: Path) -> None:
    memory = Memory(tmp_path / "stream.db")
    session = memory.session("stream")
    with FakeProvider("openai") as fake:
        fake.add(*replies("chat", [Step("s1", "streamed", None, "Streamed: all fine.")]))
        built = agent(fake.url, [ContextfoldHistory(session)])

        async def streamed() -> list[pm.ModelMessage]:
            async with built.run_stream("Anything to fix?") as run:
                assert await run.get_output() == "Streamed: all fine."
            return run.all_messages()

        kept = asyncio.run(streamed())
    logged = session.history()
    assert [m["role"] for m in logged] == ["system", "user", "assistant"]
    assert dumped(from_chat(logged)) == dumped(kept)
    memory.close()


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({}, "session"),
        ({"session": "s1"}, "session"),
        ({"memory": "chat.db", "session_of": str}, "memory"),
        ({"memory": None, "session_of": None, "session": None}, "session"),
        ({"memory": Memory()}, "session_of"),
        ({"session": Memory().session("s"), "view": ""}, "view"),
        ({"session": Memory().session("s"), "budget": -5}, "budget"),
    ],
)
def test_bad_settings_name_the_field(given: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        ContextfoldHistory(**given)
    assert caught.value.field == field


def test_a_bad_session_id_names_session_of(tmp_path: Path) -> None:
    memory = Memory()
    history = ContextfoldHistory(memory=memory, session_of=lambda ctx: None)  # type: ignore[arg-type,return-value]
    with FakeProvider("openai") as fake, pytest.raises(InvalidInput) as caught:
        agent(fake.url, [history]).run_sync("hi")
    assert caught.value.field == "session_of"
    assert memory.sessions() == []


def test_without_the_extra_the_import_names_it() -> None:
    code = (
        "import sys; sys.modules['pydantic_ai'] = None\n"
        "try:\n"
        "    import contextfold.integrations.pydantic_ai\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.startswith("MissingExtra")
    assert "contextfold[pydantic-ai]" in done.stdout


def test_the_example_runs_against_the_scripted_server(tmp_path: Path) -> None:
    with FakeProvider("openai") as fake:
        for n in range(1, 4):
            fake.add(*turn_replies(n))
        env = {**os.environ, "OPENAI_BASE_URL": fake.url, "OPENAI_API_KEY": "test-key"}
        done = subprocess.run(
            [
                sys.executable,
                str(ROOT / "examples" / "pydantic_ai_agent.py"),
                str(tmp_path / "ex.db"),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=240,
        )
    assert done.returncode == 0, done.stderr
    assert "Reviewed module_3" in done.stdout
    assert "logged 13 messages" in done.stdout
    check_prompts(fake)


def test_the_bench_measures_a_short_run() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from _adapter_pydantic_ai import measure

    figures = measure(3)
    assert figures["turns"] == 3
    faults = ("pairs_broken", "over_budget", "duplicated", "missing")
    assert {key: figures[key] for key in faults} == dict.fromkeys(faults, 0)
    assert 0 < figures["overhead_p50_ms"] <= figures["overhead_p99_ms"]
    assert 0 < figures["peer_p50_ms"] <= figures["peer_p99_ms"]
