"""The LlamaIndex memory under LlamaIndex's own agent loop, and its message mapping.

``FunctionAgent`` runs turn after turn with real tools, its ``LiteLLM`` model
speaking Chat Completions to a scripted server on 127.0.0.1; the memory is
``ContextfoldMemory`` over a SQLite session whose view has a small budget, a
runner folding it as messages arrive. What the server received is checked with
the contract's own count and pairing check, never contextfold's: every prompt
whole (tool calls with their results), the memory's part within the budget, and
the log holding each message of the conversation exactly once.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_providers import FakeProvider
from llama_index.core.base.llms.types import (
    AudioBlock,
    CacheControl,
    CachePoint,
    ChatMessage,
    CitationBlock,
    DocumentBlock,
    ImageBlock,
    MessageRole,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    VideoBlock,
)
from llama_index_agents import SYSTEM, Task, agent
from llama_index_replies import streamed

from contextfold import InvalidInput, Memory
from contextfold.formats.checks import prompt_faults
from contextfold.integrations.llama_index import (
    META_KEY,
    ContextfoldMemory,
    from_llama_index,
    to_llama_index,
)
from contextfold.integrations.llama_index.messages import calls_in_of
from contextfold.runtime import InlineRunner
from contextfold.testing.adapter_contract_checks import log_faults, prompt_tokens, split_pairs

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 1500
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def memory_part(chat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the memory handed over: the request up to the run's user message. After it
    come the run's own tool steps, which LlamaIndex keeps outside the memory."""
    last_user = max(i for i, m in enumerate(chat) if m["role"] == "user")
    return chat[: last_user + 1]


def results_by_id(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with each run of consecutive tool results sorted by call id."""
    out: list[dict[str, Any]] = []
    run: list[dict[str, Any]] = []
    for message in [*messages, {"role": "end"}]:
        if message.get("role") == "tool":
            run.append(message)
            continue
        out += sorted(run, key=lambda m: str(m.get("tool_call_id")))
        run = []
        out.append(message)
    return out[:-1]


def test_function_agent_folds_within_budget_and_logs_each_message_once(tmp_path: Path) -> None:
    task = Task(tmp_path / "notes", turns=8)
    with Memory(tmp_path / "agent.db") as memory, FakeProvider("openai") as fake:
        kept = ContextfoldMemory.from_defaults(
            memory, "agent", system=SYSTEM, preset="offline", budget=BUDGET
        )
        runner = InlineRunner()
        runner.watch(kept.session.view("default"))
        llama_agent = agent(task, fake.url)

        async def turns() -> list[str]:
            answers = []
            for turn in range(1, task.turns + 1):
                fake.add(*task.replies(turn))
                answers.append(str(await llama_agent.run(task.question(turn), memory=kept)))
            return answers

        try:
            answers = asyncio.run(turns())
        finally:
            runner.stop()
        assert answers == [task.answer(t) for t in range(1, task.turns + 1)]
        chats = [request.body["messages"] for request in fake.requests]
        assert len(chats) == 2 * task.turns
        for i, chat in enumerate(chats):
            assert chat[0] == {"role": "system", "content": SYSTEM}, f"request {i}"
            assert split_pairs(chat, open_tail=False) == [], f"request {i}"
            assert prompt_faults(chat, "openai") == [], f"request {i}"
            assert prompt_tokens(memory_part(chat)) <= BUDGET, f"request {i}"
        history = kept.session.history()
        expected = [{"role": "system", "content": SYSTEM}]
        for turn in range(1, task.turns + 1):
            expected += task.expected(turn)
        # The agent runs a turn's two tools at once and puts each result as it finishes:
        # the results of one call are in either order, as any provider accepts them.
        assert log_faults(results_by_id(history), results_by_id(expected)) == []
        assert kept.session.view("default").folds(), "the run was meant to fold"
        last = memory_part(chats[-1])
        assert len(last) < len(history) - 3, "the last prompt shows the history folded"
        # The run's own steps follow the memory's part as LlamaIndex's agent made them.
        assert chats[-1][len(last) :] == [
            {k: v for k, v in m.items() if k != "meta"} | _index_of(m)
            for m in task.expected(task.turns)[1:-1]
        ]


def _index_of(message: dict[str, Any]) -> dict[str, Any]:
    """LiteLLM sends each tool call back with its stream index."""
    calls = message.get("tool_calls")
    if not calls:
        return {}
    return {"tool_calls": [{**c, "index": i} for i, c in enumerate(calls)]}


def test_chat_history_resent_every_turn_is_logged_once(tmp_path: Path) -> None:
    """A stateless app hands the agent its whole history each turn (``aset``) with a new
    memory object: what the log holds is matched, never logged again."""
    task = Task(tmp_path / "notes", turns=3)
    with Memory(tmp_path / "agent.db") as memory, FakeProvider("openai") as fake:
        session = memory.session("app", system=SYSTEM)
        session.view("default", preset="offline", budget=4000)
        llama_agent = agent(task, fake.url)

        async def turns() -> None:
            history: list[ChatMessage] = []
            for turn in range(1, task.turns + 1):
                fake.add(*task.replies(turn))
                fresh = ContextfoldMemory(memory.session("app"))
                await llama_agent.run(task.question(turn), chat_history=history, memory=fresh)
                history = await fresh.aget_all()

        asyncio.run(turns())
        expected = [{"role": "system", "content": SYSTEM}]
        for turn in range(1, task.turns + 1):
            expected += task.expected(turn)
        assert log_faults(session.history(), expected) == []
        assert [b.head for b in session.branches()] == [session.last_seq()]


ROUND_TRIP = {
    "text": ChatMessage(role="user", content="hello"),
    "empty": ChatMessage(role="assistant", content=""),
    "two texts": ChatMessage(role="user", blocks=[TextBlock(text="a"), TextBlock(text="b")]),
    "system": ChatMessage(role="system", content="be brief"),
    "developer": ChatMessage(role="developer", content="use tools"),
    "image url": ChatMessage(
        role="user", blocks=[TextBlock(text="what is it?"), ImageBlock(url="https://x.test/a.png")]
    ),
    "image bytes": ChatMessage(role="user", blocks=[ImageBlock(image=PNG, detail="low")]),
    "image in a tool result": ChatMessage(
        role="tool",
        blocks=[TextBlock(text="rendered"), ImageBlock(image=PNG)],
        additional_kwargs={"tool_call_id": "c1"},
    ),
    "audio": ChatMessage(role="user", blocks=[AudioBlock(audio=b"RIFF0000WAVE", format="wav")]),
    "document": ChatMessage(
        role="user",
        blocks=[
            DocumentBlock(data=b"%PDF-1.4 hi", title="a.pdf", document_mimetype="application/pdf")
        ],
    ),
    "thinking and a tool call": ChatMessage(
        role="assistant",
        blocks=[
            ThinkingBlock(content="look it up", additional_information={"signature": "sig=="}),
            ToolCallBlock(tool_call_id="c1", tool_name="search", tool_kwargs={"q": "fold"}),
        ],
    ),
    "tool call arguments as text": ChatMessage(
        role="assistant",
        blocks=[ToolCallBlock(tool_call_id="c2", tool_name="run", tool_kwargs="not json")],
    ),
    "openai tool calls": ChatMessage(
        role="assistant",
        content="checking",
        additional_kwargs={
            "tool_calls": [
                {"id": "c3", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ]
        },
    ),
    "tool result": ChatMessage(role="tool", content="42", additional_kwargs={"tool_call_id": "c1"}),
    "function role": ChatMessage(
        role=MessageRole.FUNCTION, content="42", additional_kwargs={"tool_call_id": "c1"}
    ),
    "chatbot role": ChatMessage(role=MessageRole.CHATBOT, content="hi"),
    "named": ChatMessage(role="user", content="hi", additional_kwargs={"name": "alice"}),
    "refusal": ChatMessage(role="assistant", content="", additional_kwargs={"refusal": "no"}),
    "video": ChatMessage(
        role="user", blocks=[TextBlock(text="watch"), VideoBlock(url="https://x.test/v.mp4")]
    ),
    "citation": ChatMessage(
        role="assistant",
        blocks=[
            TextBlock(text="as the report says"),
            CitationBlock(
                cited_content=TextBlock(text="folds never split a tool unit"),
                source="docs/architecture.md",
                title="Architecture",
                additional_location_info={"line": 40},
            ),
        ],
    ),
    "cache point": ChatMessage(
        role="user",
        blocks=[
            TextBlock(text="long context"),
            CachePoint(cache_control=CacheControl(type="ephemeral")),
        ],
    ),
    "other kwargs": ChatMessage(role="assistant", content="x", additional_kwargs={"run": {"n": 1}}),
}


@pytest.mark.parametrize("name", list(ROUND_TRIP))
def test_every_message_type_round_trips(name: str, tmp_path: Path) -> None:
    """Mapped, logged in a SQLite file, read back: the same ChatMessage, and the chat
    message a model is shown is valid for its role."""
    message = ROUND_TRIP[name]
    chat = from_llama_index(message)
    assert to_llama_index(chat) == message
    with Memory(tmp_path / "trip.db") as memory:
        session = memory.session("trip")
        if chat["role"] == "tool":
            session.append(
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ]}
            )  # fmt: skip
        session.append(chat)
    with Memory(tmp_path / "trip.db") as memory:
        stored = ContextfoldMemory(memory.session("trip")).get_all()[-1]
    assert stored == message


def _shown(chat: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in chat.items() if k != "meta"}


def test_what_a_model_sees_is_plain_chat_and_the_rest_rides_in_meta() -> None:
    assert from_llama_index(ROUND_TRIP["text"]) == {"role": "user", "content": "hello"}
    image = from_llama_index(ROUND_TRIP["image bytes"])
    assert image["content"][0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert "meta" not in image or META_KEY in image["meta"]
    thinking = from_llama_index(ROUND_TRIP["thinking and a tool call"])
    assert thinking["content"] is None
    assert thinking["tool_calls"] == [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "search", "arguments": '{"q": "fold"}'},
        }
    ]
    assert thinking["meta"][META_KEY]["blocks"][0]["additional_information"] == {
        "signature": "sig=="
    }
    tool_image = from_llama_index(ROUND_TRIP["image in a tool result"])
    assert tool_image["content"] == [
        {"type": "text", "text": "rendered"},
        {"type": "text", "text": "[image]"},
    ]
    assert from_llama_index(ROUND_TRIP["function role"])["role"] == "tool"


def test_get_restores_native_messages_and_folds_stay_plain(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.db") as memory:
        kept = ContextfoldMemory.from_defaults(
            memory, "s", system=SYSTEM, preset="offline", budget=400
        )
        kept.put(ChatMessage(role="user", content="look it up"))
        kept.put_messages(
            [
                ROUND_TRIP["thinking and a tool call"],
                ChatMessage(
                    role="tool", content="x " * 300, additional_kwargs={"tool_call_id": "c1"}
                ),
                ChatMessage(role="assistant", content="found it"),
            ]
        )
        before = kept.get()
        assert ROUND_TRIP["thinking and a tool call"] in before
        for n in range(6):
            kept.put(ChatMessage(role="user", content=f"and then {n}? " + "word " * 40))
            kept.put(ChatMessage(role="assistant", content=f"then {n}. " + "word " * 40))
        kept.session.view("default").compact()
        after = kept.get()
        assert after[0] == ChatMessage(role="system", content=SYSTEM)
        assert prompt_tokens([_shown(from_llama_index(m)) for m in after]) <= 400
        assert kept.session.view("default").folds()
        assert len(kept.get_all()) == 1 + 4 + 12


def test_messages_the_view_builds_carry_tool_calls_as_the_agent_s_do(tmp_path: Path) -> None:
    """LiteLLM's class reads tool calls from ``additional_kwargs`` only: a fold that keeps a
    call (its long result masked) must come back that way to a memory that saw them so."""
    call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    with Memory(tmp_path / "m.db") as memory:
        kept = ContextfoldMemory.from_defaults(
            memory, "s", system=SYSTEM, preset="offline", budget=1500
        )
        for n in range(4):
            call = {**call, "id": f"c{n}"}
            kept.put(ChatMessage(role="user", content=f"read file {n}"))
            kept.put_messages(
                [
                    ChatMessage(
                        role="assistant", content="", additional_kwargs={"tool_calls": [call]}
                    ),
                    ChatMessage(
                        role="tool",
                        content=" ".join(f"line {i} of file {n}." for i in range(60)),
                        additional_kwargs={"tool_call_id": f"c{n}"},
                    ),
                    ChatMessage(role="assistant", content=f"file {n} read"),
                ]
            )
            kept.session.view("default").compact()
        assert kept.session.view("default").folds()

        def built_with_blocks(got: list[ChatMessage]) -> list[ChatMessage]:
            return [m for m in got if any(isinstance(b, ToolCallBlock) for b in m.blocks)]

        as_blocks = ContextfoldMemory(memory.session("s"), tool_calls_in="blocks").get()
        assert built_with_blocks(as_blocks), "the view built no message with a tool call"
        for followed in (kept.get(), ContextfoldMemory(memory.session("s")).get()):
            assert built_with_blocks(followed) == []
            calls = [m for m in followed if m.additional_kwargs.get("tool_calls")]
            assert len(calls) == sum(1 for m in as_blocks if calls_in_of(m))
        assert to_llama_index(
            {"role": "assistant", "content": None, "tool_calls": [call]},
            calls_in="additional_kwargs",
        ).additional_kwargs == {"tool_calls": [call]}


def test_reset_starts_an_empty_branch_and_loses_nothing(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.db") as memory:
        kept = ContextfoldMemory.from_defaults(memory, "s", system=SYSTEM)
        kept.put(ChatMessage(role="user", content="first conversation"))
        kept.put(ChatMessage(role="assistant", content="noted"))
        kept.reset()
        assert kept.get() == [ChatMessage(role="system", content=SYSTEM)]
        assert kept.get_all() == [ChatMessage(role="system", content=SYSTEM)]
        kept.put(ChatMessage(role="user", content="second conversation"))
        assert [m.content for m in kept.get_all()] == [SYSTEM, "second conversation"]
        assert len(kept.session.branches()) == 2
        old = kept.session.history(branch=3)
        assert [m["content"] for m in old] == [SYSTEM, "first conversation", "noted"]
        kept.set([])
        assert kept.get() == [ChatMessage(role="system", content=SYSTEM)]


def test_reset_without_a_system_prompt_is_empty(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.db") as memory:
        kept = ContextfoldMemory(memory.session("s"))
        kept.put(ChatMessage(role="user", content="hi"))
        kept.reset()
        assert kept.get() == [] and kept.get_all() == []
        kept.put(ChatMessage(role="user", content="again"))
        assert [m.content for m in kept.get_all()] == ["again"]
        assert len(kept.session.history(branch=1)) == 1


def test_set_with_an_edited_list_starts_a_branch(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.db") as memory:
        kept = ContextfoldMemory.from_defaults(memory, "s", system=SYSTEM)
        said = [ChatMessage(role="user", content="a"), ChatMessage(role="assistant", content="b")]
        kept.set(said)
        kept.set(said)
        assert kept.session.last_seq() == 3
        kept.set([said[0], ChatMessage(role="assistant", content="b, again")])
        assert [m.content for m in kept.get_all()] == [SYSTEM, "a", "b, again"]
        assert kept.session.last_seq() == 4 and len(kept.session.branches()) == 2


def test_async_twins_do_what_the_sync_methods_do(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.db") as memory:
        sync = ContextfoldMemory.from_defaults(memory, "sync", system=SYSTEM)
        aio = ContextfoldMemory.from_defaults(memory, "aio", system=SYSTEM)
        said = [ChatMessage(role="user", content="a"), ChatMessage(role="assistant", content="b")]
        sync.put(said[0])
        sync.put_messages(said[1:])
        sync.set([*said, ChatMessage(role="user", content="c")])

        async def twin() -> tuple[list[ChatMessage], list[ChatMessage]]:
            await aio.aput(said[0])
            await aio.aput_messages(said[1:])
            await aio.aset([*said, ChatMessage(role="user", content="c")])
            return await aio.aget(), await aio.aget_all()

        got, everything = asyncio.run(twin())
        assert got == sync.get() and everything == sync.get_all()
        asyncio.run(aio.areset())
        sync.reset()
        assert aio.get() == sync.get()


def test_bad_input_names_the_field_and_stores_nothing(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.db") as memory:
        kept = ContextfoldMemory.from_defaults(memory, "s", system=SYSTEM)
        orphan = ChatMessage(role="tool", content="42")
        with pytest.raises(InvalidInput) as caught:
            kept.put_messages([ChatMessage(role="user", content="fine"), orphan])
        assert caught.value.field == "tool_call_id"
        assert caught.value.index == 1
        with pytest.raises(InvalidInput) as caught:
            kept.put(
                ChatMessage(role="tool", content="42", additional_kwargs={"tool_call_id": "x"})
            )
        assert caught.value.field == "tool_call_id"
        with pytest.raises(InvalidInput) as caught:
            kept.put(ChatMessage(role="user", blocks=[]))
        assert caught.value.field == "content"
        with pytest.raises(InvalidInput) as caught:
            kept.put("hello")  # type: ignore[arg-type]
        assert kept.session.last_seq() == 1
        with pytest.raises(InvalidInput) as caught:
            to_llama_index({"role": "wizard", "content": "abracadabra"})
        assert caught.value.field == "role"
        with pytest.raises(InvalidInput) as caught:
            to_llama_index({"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]})
        assert caught.value.field is not None and caught.value.field.startswith("tool_calls")
        with pytest.raises(InvalidInput) as caught:
            ContextfoldMemory(memory.session("s"), budget=0)
        assert caught.value.field == "budget"
        with pytest.raises(InvalidInput) as caught:
            ContextfoldMemory.from_defaults("agent.db", "s")  # type: ignore[arg-type]
        assert caught.value.field == "memory"


def test_to_dict_and_back_over_the_store(tmp_path: Path) -> None:
    """A workflow context serializes its memory with ``to_dict``: ids and settings."""
    with Memory(tmp_path / "m.db") as memory:
        kept = ContextfoldMemory.from_defaults(memory, "s", system=SYSTEM, budget=900)
        kept = ContextfoldMemory(kept.session, budget=800, tool_calls_in="additional_kwargs")
        kept.put(ChatMessage(role="user", content="hi"))
        data = json.loads(kept.to_json())
        with pytest.raises(InvalidInput) as caught:
            ContextfoldMemory.from_dict(data)
        assert caught.value.field == "memory"
        back = ContextfoldMemory.from_dict(data, memory=memory)
        assert (back.session_id, back.view_name, back.budget, back.tool_calls_in) == (
            "s",
            "default",
            800,
            "additional_kwargs",
        )
        assert back.get() == kept.get()


def test_a_second_process_gets_the_same_prompt(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.db") as memory:
        kept = ContextfoldMemory.from_defaults(
            memory, "s", system=SYSTEM, preset="offline", budget=300
        )
        for n in range(8):
            kept.put(ChatMessage(role="user", content=f"question {n} " + "word " * 30))
            kept.put(ChatMessage(role="assistant", content=f"answer {n} " + "word " * 30))
        kept.session.view("default").compact()
        here = [from_llama_index(m) for m in kept.get()]
    code = (
        "import json, sys\n"
        "from contextfold import Memory\n"
        "from contextfold.integrations.llama_index import ContextfoldMemory, from_llama_index\n"
        "with Memory(sys.argv[1]) as memory:\n"
        "    kept = ContextfoldMemory(memory.session('s'))\n"
        "    print(json.dumps([from_llama_index(m) for m in kept.get()]))\n"
    )
    there = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "m.db")],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    assert json.loads(there.stdout) == here
    assert len(here) < 17


def test_without_the_extra_the_import_names_it() -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'llama_index' or name.startswith('llama_index.'):\n"
        "            raise ImportError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import contextfold\n"
        "assert not any(m.startswith('llama_index') for m in sys.modules)\n"
        "try:\n"
        "    import contextfold.integrations.llama_index\n"
        "except contextfold.MissingExtra as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert "llama-index" in done.stdout


def test_the_example_runs_against_a_scripted_server(tmp_path: Path) -> None:
    with FakeProvider("openai") as fake:
        for turn, (path, needle) in enumerate(EXAMPLE_TURNS, 1):
            fake.add(
                streamed(
                    "Searching.", [(f"call_{turn}", "grep", {"path": path, "needle": needle})]
                ),
                streamed(f"Found {needle} in {path}."),
            )
        env = {**os.environ, "OPENAI_BASE_URL": fake.url, "OPENAI_API_KEY": "test-key",
               "LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # fmt: skip
        done = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "llama_index_agent.py"), str(tmp_path)],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        assert len(fake.requests) == 2 * len(EXAMPLE_TURNS)
    lines = done.stdout.splitlines()
    assert lines[-1].startswith("log: ") and "folds: " in lines[-1]
    for i, (path, needle) in enumerate(EXAMPLE_TURNS):
        assert f"Found {needle} in {path}." in lines[i]


EXAMPLE_TURNS = [
    ("src/contextfold/core/render.py", "def render"),
    ("src/contextfold/core/units.py", "def "),
    ("src/contextfold/memory/view.py", "class View"),
    ("src/contextfold/memory/session.py", "class Session"),
]
