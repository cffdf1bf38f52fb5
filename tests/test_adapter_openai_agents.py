"""The OpenAI Agents SDK's session protocol over a contextfold view (``ContextfoldSession``).

The SDK's own loop runs: an ``Agent`` with a function tool, ``Runner.run`` (and
``run_streamed``, ``run_sync``) on the SDK's default API, the Responses API,
against a scripted Responses server on 127.0.0.1. The view has a small budget
and an inline runner folds it, so the prompts the server receives are
compacted: each is checked within the budget by an independent token count
(``prompt_checks``), its calls and outputs paired, and the log holds every
message once. The items themselves round-trip exactly, for every item type.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import called, responses_reply, responses_stream, said
from fake_providers import FakeProvider
from hypothesis import given, settings
from hypothesis import strategies as st
from prompt_checks import pairing_faults, prompt_tokens

from contextfold import InvalidInput, Memory, MissingExtra
from contextfold.core.messages import for_model
from contextfold.formats.responses import read_items
from contextfold.runtime import InlineRunner

agents = pytest.importorskip("agents")
from contextfold.integrations.openai_agents import ContextfoldSession  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 500
FILE_TEXT = "lorem ipsum dolor sit amet " * 60


@pytest.fixture
def upstream() -> Iterator[FakeProvider]:
    with FakeProvider("responses") as fake:
        client = agents.AsyncOpenAI(base_url=fake.url, api_key="sk-scripted", max_retries=0)
        agents.set_default_openai_client(client, use_for_tracing=False)
        agents.set_tracing_disabled(True)
        yield fake


def reader(read: list[str]) -> Any:
    @agents.function_tool
    def read_file(path: str) -> str:
        """Read a file of the project."""
        read.append(path)
        return f"contents of {path}: {FILE_TEXT}"

    return agents.Agent(
        name="reader", instructions="Answer from the files.", tools=[read_file], model="gpt-5"
    )


def script(fake: FakeProvider, turns: range, *, stream: bool = False) -> None:
    """Each turn: the model reads a file (a reasoning item, a text, a call), then answers."""
    make = responses_stream if stream else responses_reply
    for n in turns:
        reasoning = {"type": "reasoning", "id": f"rs_{n}", "summary": []}
        opening = [said(f"Reading f{n}.py.", f"msg_{n}a")]
        call = [called("read_file", json.dumps({"path": f"f{n}.py"}), f"call_{n}")]
        fake.add(
            make([*([] if stream else [reasoning]), *opening, *call], response_id=f"r{n}a"),
            make([said(f"f{n}.py holds lorem ipsum.", f"msg_{n}b")], response_id=f"r{n}b"),
        )


def item_faults(items: list[dict[str, Any]]) -> list[str]:
    """Responses pairing read on the items themselves: every output answers a call made
    before it, every call is answered."""
    calls = {i["call_id"] for i in items if i.get("type") == "function_call"}
    outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    faults = [f"output {c} without its call" for c in outputs if c not in calls]
    return faults + [f"call {c} unanswered" for c in sorted(calls - set(outputs))]


async def run_turn(agent: Any, text: str, session: ContextfoldSession, *, stream: bool) -> Any:
    config = agents.RunConfig(call_model_input_filter=session.call_model_input_filter)
    if not stream:
        return await agents.Runner.run(agent, text, session=session, run_config=config)
    result = agents.Runner.run_streamed(agent, text, session=session, run_config=config)
    async for _ in result.stream_events():
        pass
    return result


def folded_memory(path: Path) -> tuple[Memory, InlineRunner]:
    memory = Memory(path)
    view = memory.session("chat").view("default", preset="offline", budget=BUDGET)
    runner = InlineRunner()
    runner.watch(view)
    return memory, runner


@pytest.mark.parametrize("stream", [False, True], ids=["run", "run_streamed"])
def test_runner_runs_turns_with_tools_on_the_compacted_view(
    upstream: FakeProvider, tmp_path: Path, stream: bool
) -> None:
    turns = 8
    script(upstream, range(turns), stream=stream)
    memory, runner = folded_memory(tmp_path / "cf.db")
    session = ContextfoldSession.open(memory, "chat")
    read: list[str] = []
    agent = reader(read)

    async def conversation() -> list[Any]:
        return [
            await run_turn(agent, f"What is in f{n}.py?", session, stream=stream)
            for n in range(turns)
        ]

    with runner:
        results = asyncio.run(conversation())
    assert [r.final_output for r in results] == [
        f"f{n}.py holds lorem ipsum." for n in range(turns)
    ]
    assert read == [f"f{n}.py" for n in range(turns)]
    sent = [r.body for r in upstream.requests]
    assert len(sent) == 2 * turns
    for n, body in enumerate(sent):
        assert body["instructions"] == "Answer from the files."
        assert item_faults(body["input"]) == [], n
        prompt = [for_model(m) for m in read_items(body["input"], continued=True)]
        assert pairing_faults(prompt) == [], n
        assert prompt_tokens(prompt) <= BUDGET, n
    assert memory.session("chat").view("default").folds(), "the budget made it fold"
    whole = sum(prompt_tokens([m]) for m in memory.session("chat").history())
    assert whole > 3 * BUDGET  # the log holds far more than any prompt

    log = memory.session("chat").history()
    assert [m["role"] for m in log] == ["user", "assistant", "tool", "assistant"] * turns
    assert [m["content"] for m in log if m["role"] == "user"] == [
        f"What is in f{n}.py?" for n in range(turns)
    ]
    assert [m["tool_call_id"] for m in log if m["role"] == "tool"] == [
        f"call_{n}" for n in range(turns)
    ]
    assert len(memory.session("chat").messages()) == len(log)  # once each, one branch


def test_run_sync_runs_turns_on_the_session(upstream: FakeProvider, tmp_path: Path) -> None:
    script(upstream, range(2))
    memory = Memory(tmp_path / "cf.db")
    session = ContextfoldSession.open(memory, "chat")
    agent = reader([])
    answers = []
    for text in ("What is in f0.py?", "And f1.py?"):
        # run_sync runs each turn on a loop of its own: a client bound to none per turn
        client = agents.AsyncOpenAI(base_url=upstream.url, api_key="sk-scripted", max_retries=0)
        agents.set_default_openai_client(client, use_for_tracing=False)
        answers.append(agents.Runner.run_sync(agent, text, session=session).final_output)
    assert answers == ["f0.py holds lorem ipsum.", "f1.py holds lorem ipsum."]
    second = upstream.requests[2].body["input"]
    assert second[0] == {"role": "user", "content": "What is in f0.py?"}
    assert second[-1] == {"role": "user", "content": "And f1.py?"}
    assert len(memory.session("chat").messages()) == 8


def test_a_call_the_session_cannot_vouch_for_goes_unchanged(
    upstream: FakeProvider, tmp_path: Path
) -> None:
    """A ``session_input_callback`` that drops history: the filter sends the SDK's input."""
    script(upstream, range(2))
    memory = Memory(tmp_path / "cf.db")
    session = ContextfoldSession.open(memory, "chat")
    agent = reader([])

    def newest_only(history: list[Any], new: list[Any]) -> list[Any]:
        return new

    async def conversation() -> None:
        await run_turn(agent, "What is in f0.py?", session, stream=False)
        config = agents.RunConfig(
            call_model_input_filter=session.call_model_input_filter,
            session_input_callback=newest_only,
        )
        await agents.Runner.run(agent, "And f1.py?", session=session, run_config=config)

    asyncio.run(conversation())
    assert upstream.requests[2].body["input"] == [{"role": "user", "content": "And f1.py?"}]
    assert len(memory.session("chat").messages()) == 8  # logged all the same


def test_a_call_waiting_for_approval_stays_pending_until_the_run_resumes(
    upstream: FakeProvider, tmp_path: Path
) -> None:
    """A tool that needs a human's approval: the run stops with the call unanswered, the
    session shows it as it was (no stand-in result), and the resumed run logs its result."""

    @agents.function_tool(needs_approval=True)
    def deploy(target: str) -> str:
        """Deploy the build."""
        return f"deployed to {target}"

    call = called("deploy", json.dumps({"target": "production"}), "call_deploy")
    upstream.add(
        responses_reply([said("Deploying.", "msg_d1"), call], response_id="rd1"),
        responses_reply([said("Deployed.", "msg_d2")], response_id="rd2"),
    )
    memory = Memory(tmp_path / "cf.db")
    session = ContextfoldSession.open(memory, "chat")
    agent = agents.Agent(name="ops", instructions="Ship it.", tools=[deploy], model="gpt-5")
    config = agents.RunConfig(call_model_input_filter=session.call_model_input_filter)

    async def conversation() -> tuple[Any, list[Any], Any]:
        first = await agents.Runner.run(agent, "Ship the fix.", session=session, run_config=config)
        waiting = await session.get_items()
        state = first.to_state()
        for interruption in first.interruptions:
            state.approve(interruption)
        resumed = await agents.Runner.run(agent, state, session=session, run_config=config)
        return first, waiting, resumed

    first, waiting, resumed = asyncio.run(conversation())
    assert [i.raw_item.call_id for i in first.interruptions] == ["call_deploy"]
    assert waiting[-1] == call  # pending, verbatim, no result made up for it
    assert resumed.final_output == "Deployed."
    second = upstream.requests[1].body["input"]
    assert item_faults(second) == []
    assert second[-1] == {
        "type": "function_call_output",
        "call_id": "call_deploy",
        "output": "deployed to production",
    }
    log = memory.session("chat").messages()
    assert [m.role for m in log] == ["user", "assistant", "tool", "assistant"]


# -- items round trip ----------------------------------------------------------------------

ITEMS: dict[str, list[dict[str, Any]]] = {
    "easy user message": [{"role": "user", "content": "hi"}],
    "typed user message with parts": [
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "look"},
                {"type": "input_image", "image_url": "https://x/cat.png", "detail": "high"},
                {"type": "input_file", "file_id": "file_1", "filename": "a.pdf"},
                {"type": "input_file", "file_data": "data:application/pdf;base64,QUJD"},
            ],
        }
    ],
    "image by file id": [
        {
            "role": "user",
            "content": [{"type": "input_image", "file_id": "file_9", "detail": "auto"}],
        }
    ],
    "system and developer": [
        {"role": "system", "content": "be brief"},
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "d"}]},
        {"role": "user", "content": "go"},
    ],
    "assistant output, reasoning and calls": [
        {"role": "user", "content": "go"},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "think"}],
            "encrypted_content": "gAAAA==",
        },
        said("calling", "msg_1"),
        called("f", '{"a": 1}', "call_1"),
        called("g", "{}", "call_2"),
        {"type": "function_call_output", "call_id": "call_1", "output": "one"},
        {
            "type": "function_call_output",
            "call_id": "call_2",
            "output": [{"type": "input_text", "text": "two"}],
        },
        {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
    ],
    "custom tool call": [
        {"role": "user", "content": "go"},
        {"type": "custom_tool_call", "call_id": "ct_1", "name": "grammar", "input": "x+1"},
        {"type": "custom_tool_call_output", "call_id": "ct_1", "output": "2"},
        {"role": "assistant", "content": "done"},
    ],
    "unknown and client items": [
        {"role": "user", "content": "go"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {}},
        {"type": "mcp_approval_request", "id": "mr_1", "name": "rm", "arguments": "{}"},
        {"type": "mcp_approval_response", "approval_request_id": "mr_1", "approve": False},
        {"type": "item_reference", "id": "msg_0"},
        {"type": "compaction", "id": "cmp_1", "encrypted_content": "opaque"},
    ],
}


@pytest.mark.parametrize("kind", list(ITEMS))
def test_items_come_back_exactly_as_added(kind: str) -> None:
    items = ITEMS[kind]
    session = ContextfoldSession.open(Memory(), "s")
    asyncio.run(session.add_items(json.loads(json.dumps(items))))
    assert asyncio.run(session.get_items()) == items
    assert asyncio.run(session.get_items(limit=2)) == items[-2:]
    # a second adapter (what another process opens) reads the same items
    again = ContextfoldSession(session.session)
    assert asyncio.run(again.get_items()) == items


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=60, deadline=None)
@given(
    said_text=TEXT,
    arguments=TEXT,
    output=TEXT,
    call_id=st.text("abcdefgh0123456789_", min_size=1, max_size=12),
    ids=st.booleans(),
)
def test_a_turn_round_trips_whatever_its_text(
    said_text: str, arguments: str, output: str, call_id: str, ids: bool
) -> None:
    answer = said(said_text, "msg_x") if ids else {"role": "assistant", "content": said_text}
    call = called("tool", arguments, call_id)
    if not ids:
        call = {k: v for k, v in call.items() if k not in ("id", "status")}
    items = [
        {"role": "user", "content": said_text},
        answer,
        call,
        {"type": "function_call_output", "call_id": call_id, "output": output},
    ]
    session = ContextfoldSession.open(Memory(), "s")
    asyncio.run(session.add_items(items))
    assert asyncio.run(session.get_items()) == items


# -- once, pop and clear ----------------------------------------------------------------------

TURN = [
    {"role": "user", "content": "q"},
    {"type": "reasoning", "id": "rs_1", "summary": []},
    said("calling", "msg_1"),
    called("f", "{}", "call_1"),
    {"type": "function_call_output", "call_id": "call_1", "output": "r"},
]


def test_the_same_items_at_the_same_place_are_logged_once(tmp_path: Path) -> None:
    path = tmp_path / "cf.db"
    first = ContextfoldSession.open(Memory(path), "s")
    asyncio.run(first.add_items(TURN[:1]))
    asyncio.run(first.add_items(TURN[1:]))
    assert len(Memory(path).session("s").messages()) == 3
    # another process retries the batch where it was added (after the user message)
    retry = ContextfoldSession.open(Memory(path), "s", branch=1)
    asyncio.run(retry.add_items(TURN[1:]))
    assert len(Memory(path).session("s").messages()) == 3
    assert asyncio.run(retry.get_items()) == asyncio.run(first.get_items()) == TURN
    # the SDK's rewind: pop the newest items, add them again
    assert asyncio.run(first.pop_item()) == TURN[4]
    assert asyncio.run(first.pop_item()) == TURN[3]
    asyncio.run(first.add_items(TURN[3:]))
    assert len(Memory(path).session("s").messages()) == 3
    assert asyncio.run(first.get_items()) == TURN


def test_pop_returns_the_newest_item_and_moves_the_head_back() -> None:
    memory = Memory()
    memory.session("s", system="You read files.")
    session = ContextfoldSession.open(memory, "s")
    asyncio.run(session.add_items(TURN))
    logged = [m.message for m in memory.session("s").messages()]
    assert session.head == 4
    assert asyncio.run(session.pop_item()) == TURN[-1]
    assert asyncio.run(session.pop_item()) == TURN[3]  # the call, out of its message's items
    system = {"role": "system", "content": "You read files."}
    assert asyncio.run(session.get_items()) == [system, *TURN[:3]]
    assert asyncio.run(session.pop_item()) == TURN[2]
    assert asyncio.run(session.pop_item()) == TURN[1]
    assert asyncio.run(session.pop_item()) == TURN[0]
    assert asyncio.run(session.pop_item()) is None  # the system prompt is the session's
    assert asyncio.run(session.get_items()) == [system]
    assert session.head == 1
    assert [m.message for m in memory.session("s").messages()] == logged  # nothing written
    # an item other than the popped one starts a branch; the popped ones come back as logged
    asyncio.run(session.add_items([{"role": "user", "content": "other"}]))
    assert session.head == 5
    asyncio.run(session.pop_item())
    asyncio.run(session.add_items(TURN[:1]))
    asyncio.run(session.add_items(TURN[1:]))
    assert asyncio.run(session.get_items()) == [system, *TURN]
    assert session.head == 4
    assert len(memory.session("s").messages()) == len(logged) + 1


def test_clear_starts_an_empty_branch_and_deletes_nothing() -> None:
    memory = Memory()
    memory.session("s", system="You read files.")
    session = ContextfoldSession.open(memory, "s")
    asyncio.run(session.add_items(TURN))
    before = [m.message for m in memory.session("s").messages()]
    asyncio.run(session.clear_session())
    assert asyncio.run(session.get_items()) == [{"role": "system", "content": "You read files."}]
    assert asyncio.run(session.pop_item()) is None
    asyncio.run(session.add_items([{"role": "user", "content": "again"}]))
    assert asyncio.run(session.get_items())[1:] == [{"role": "user", "content": "again"}]
    after = memory.session("s").messages()
    assert [m.message for m in after[: len(before)]] == before
    assert after[-1].parent == 1  # a branch from the system prompt
    # a session without a system prompt clears to nothing
    bare = ContextfoldSession.open(Memory(), "t")
    asyncio.run(bare.add_items(TURN[:1]))
    asyncio.run(bare.clear_session())
    assert asyncio.run(bare.get_items()) == []


def test_a_pinned_branch_reads_that_branch() -> None:
    memory = Memory()
    session = ContextfoldSession.open(memory, "s")
    asyncio.run(session.add_items([{"role": "user", "content": "a"}]))
    asyncio.run(session.add_items([{"role": "assistant", "content": "b"}]))
    early = ContextfoldSession.open(memory, "s", branch=1)
    assert asyncio.run(early.get_items()) == [{"role": "user", "content": "a"}]
    assert asyncio.run(ContextfoldSession.open(memory, "s").get_items())[-1]["content"] == "b"


# -- bad input, settings, the extra ---------------------------------------------------------


def test_bad_items_name_the_item_and_store_nothing() -> None:
    memory = Memory()
    session = ContextfoldSession.open(memory, "s")
    asyncio.run(session.add_items([{"role": "user", "content": "q"}]))
    bad = [
        {"role": "user", "content": "fine"},
        {"type": "function_call", "name": "f", "arguments": "{}"},
    ]
    with pytest.raises(InvalidInput) as caught:
        asyncio.run(session.add_items(bad))
    assert (caught.value.index, caught.value.field) == (1, "call_id")
    late = [{"type": "function_call_output", "call_id": "nowhere", "output": "x"}]
    with pytest.raises(InvalidInput) as caught:
        asyncio.run(session.add_items(late))
    assert caught.value.field == "tool_call_id"
    with pytest.raises(InvalidInput) as caught:
        asyncio.run(session.add_items("hello"))  # type: ignore[arg-type]
    assert caught.value.field == "items"
    with pytest.raises(InvalidInput) as caught:
        asyncio.run(session.get_items(limit=-1))
    assert caught.value.field == "limit"
    assert len(memory.session("s").messages()) == 1
    with pytest.raises(InvalidInput) as caught:
        ContextfoldSession.open(memory, "s", branch=9)
    assert caught.value.field == "branch"
    with pytest.raises(InvalidInput) as caught:
        ContextfoldSession("s")  # type: ignore[arg-type]
    assert caught.value.field == "session"


def test_session_settings_limit_applies_when_no_limit_is_given() -> None:
    session = ContextfoldSession.open(
        Memory(), "s", session_settings=agents.SessionSettings(limit=1)
    )
    asyncio.run(session.add_items(TURN))
    assert asyncio.run(session.get_items()) == TURN[-1:]
    assert asyncio.run(session.get_items(limit=3)) == TURN[-3:]
    assert isinstance(session, agents.memory.Session)  # the SDK's runtime protocol check


def test_without_the_sdk_the_adapter_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "agents.memory", None)
    with pytest.raises(MissingExtra, match="openai-agents"):
        ContextfoldSession.open(Memory(), "s")


def test_importing_contextfold_and_the_adapter_module_does_not_import_the_sdk() -> None:
    code = (
        "import sys, contextfold, contextfold.integrations.openai_agents\n"
        "print('agents' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_the_example_runs_against_the_scripted_server(
    upstream: FakeProvider, tmp_path: Path
) -> None:
    script(upstream, range(3))
    env = {
        **os.environ,
        "OPENAI_BASE_URL": upstream.url,
        "OPENAI_API_KEY": "sk-scripted",
        "CONTEXTFOLD_DB": str(tmp_path / "example.db"),
    }
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "openai_agents_session.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "f2.py holds lorem ipsum." in done.stdout
    assert len(upstream.requests) == 6
    for body in (r.body for r in upstream.requests):
        prompt = read_items(body["input"], continued=True)
        assert pairing_faults([for_model(m) for m in prompt]) == []
    log = Memory(tmp_path / "example.db").session("example").messages()
    assert [m.role for m in log] == ["user", "assistant", "tool", "assistant"] * 3
