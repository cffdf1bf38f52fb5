"""LangChain's own agent loop (``create_agent``) with ``ContextfoldMiddleware``, against a
scripted OpenAI model on 127.0.0.1 (``langchain_scripted``), and an LCEL chain with
``ContextfoldChatMessageHistory``.

What each test checks is what a user relies on: every prompt the model server
got fits the budget by an independent count (``prompt_checks``), holds every
tool call with its results, and keeps the system prompt; the graph's state
keeps every message raw; the log holds each message once, in order.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain")

from fake_providers import FakeProvider
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_scripted import (
    agent_tools,
    chat_model,
    email_text,
    recall_text,
    scripted_reply,
    task_text,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from prompt_checks import pairing_faults, prompt_tokens

from contextfold import InvalidInput, Memory
from contextfold.integrations.langchain import (
    ContextfoldChatMessageHistory,
    ContextfoldMiddleware,
    langchain_to_chat,
)
from contextfold.memory.matching import digest
from contextfold.testing.models import FailingModel

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 900
SYSTEM = "You read notes and answer briefly."
SETTINGS = {"preset": "offline", "budget": BUDGET}


@pytest.fixture
def model_server() -> Iterator[FakeProvider]:
    with FakeProvider("openai") as server:
        server.answer("POST", "/v1/chat/completions", scripted_reply)
        yield server


def _prompts(server: FakeProvider, *, tools: bool = True) -> list[list[dict[str, Any]]]:
    return [
        r.body["messages"]
        for r in server.requests
        if r.path == "/v1/chat/completions" and bool(r.body.get("tools")) == tools
    ]


def _check_prompts(prompts: list[list[dict[str, Any]]], budget: int = BUDGET) -> None:
    for prompt in prompts:
        assert prompt_tokens(prompt) <= budget, prompt
        assert pairing_faults(prompt) == []
        assert prompt[0] == {"role": "system", "content": SYSTEM}


def _check_log(memory: Memory, session_id: str, state: list[BaseMessage]) -> None:
    """The log is the state, message for message, once each, with the system prompt first."""
    logged = [m.message for m in memory.existing_session(session_id).messages()]
    assert logged[0] == {"role": "system", "content": SYSTEM}
    wanted = [langchain_to_chat(m) for m in state]
    assert [digest(m) for m in logged[1:]] == [digest(m) for m in wanted]


def test_create_agent_over_several_turns_folds_and_keeps_the_state_raw(
    model_server: FakeProvider,
) -> None:
    memory = Memory()
    agent = create_agent(
        chat_model(model_server.url),
        tools=agent_tools(),
        system_prompt=SYSTEM,
        middleware=[ContextfoldMiddleware(memory=memory, settings=SETTINGS)],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "t1"}}
    turns = 8
    for turn in range(1, turns + 1):
        state = agent.invoke({"messages": [HumanMessage(task_text(turn, 2))]}, config)
        assert state["messages"][-1].content == f"done with task {turn}"

    messages = state["messages"]
    assert len(messages) == turns * 6  # user, (call, result) x 2, answer
    assert sum(isinstance(m, ToolMessage) for m in messages) == 2 * turns
    assert all("note" in m.content for m in messages if isinstance(m, ToolMessage))  # raw
    prompts = _prompts(model_server)
    assert len(prompts) == 3 * turns
    _check_prompts(prompts)
    # Folds happened: the last prompt is shorter than the conversation, and shows a fold.
    assert len(prompts[-1]) < len(messages) + 1
    assert prompt_tokens([langchain_to_chat(m) for m in messages]) > 2 * BUDGET
    assert memory.session("t1").view("default").folds()
    _check_log(memory, "t1", messages)


def test_a_tool_loop_of_many_calls_in_one_turn_stays_in_budget(
    model_server: FakeProvider,
) -> None:
    memory = Memory()
    middleware = ContextfoldMiddleware(
        memory=memory, thread_session="loop/{thread_id}", settings=SETTINGS
    )
    agent = create_agent(
        chat_model(model_server.url),
        tools=agent_tools(),
        system_prompt=SYSTEM,
        middleware=[middleware],
    )
    notes = 14
    config: Any = {"configurable": {"thread_id": "a"}, "recursion_limit": 4 * notes}
    state = agent.invoke({"messages": [{"role": "user", "content": task_text(1, notes)}]}, config)
    assert state["messages"][-1].content == "done with task 1"
    assert len(state["messages"]) == 2 + 2 * notes
    prompts = _prompts(model_server)
    assert len(prompts) == notes + 1
    _check_prompts(prompts)
    # The user's task stays in every prompt, and so does the newest result in full.
    for n, prompt in enumerate(prompts):
        assert prompt[1]["content"] == task_text(1, notes) or any(
            m.get("content") == task_text(1, notes) for m in prompt
        )
        if n:
            assert prompt[-1]["role"] == "tool" and "note 1." in prompt[-1]["content"]
    # Whole history resent notes + 1 times; logged once. A second run goes on from the state.
    _check_log(memory, "loop/a", state["messages"])
    state["messages"].append(HumanMessage(task_text(2, 3)))
    state = agent.invoke(state, config)
    assert state["messages"][-1].content == "done with task 2"
    _check_log(memory, "loop/a", state["messages"])


def test_the_async_loop_gives_the_same_prompts_as_the_sync_one() -> None:
    def run(use_async: bool) -> tuple[list[list[dict[str, Any]]], list[dict[str, Any]]]:
        memory = Memory()
        with FakeProvider("openai") as server:
            server.answer("POST", "/v1/chat/completions", scripted_reply)
            agent = create_agent(
                chat_model(server.url),
                tools=agent_tools(),
                system_prompt=SYSTEM,
                middleware=[ContextfoldMiddleware(memory=memory, settings=SETTINGS)],
            )
            config: Any = {"configurable": {"thread_id": "x"}}

            async def turns_async() -> None:
                state: dict[str, Any] = {"messages": []}
                for turn in range(1, 5):
                    state["messages"].append(HumanMessage(task_text(turn, 3)))
                    state = await agent.ainvoke(state, config)

            if use_async:
                asyncio.run(turns_async())  # one loop: ChatOpenAI keeps its client on it
            else:
                state: dict[str, Any] = {"messages": []}
                for turn in range(1, 5):
                    state["messages"].append(HumanMessage(task_text(turn, 3)))
                    state = agent.invoke(state, config)
            logged = [m.message for m in memory.session("x").messages()]
            return _prompts(server), logged

    sync_prompts, sync_log = run(False)
    async_prompts, async_log = run(True)
    assert async_prompts == sync_prompts
    _check_prompts(async_prompts)
    assert [digest(m) for m in async_log] == [digest(m) for m in sync_log]


def test_an_approval_call_is_never_folded_and_resumes_whole(model_server: FakeProvider) -> None:
    memory = Memory()
    agent = create_agent(
        chat_model(model_server.url),
        tools=agent_tools(),
        system_prompt=SYSTEM,
        middleware=[
            ContextfoldMiddleware(memory=memory, settings=SETTINGS),
            HumanInTheLoopMiddleware(interrupt_on={"send_email": True}),
        ],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "hitl"}}
    for turn in range(1, 6):
        agent.invoke({"messages": [HumanMessage(task_text(turn, 2))]}, config)
    paused = agent.invoke({"messages": [HumanMessage(email_text(6, "ann@x.org"))]}, config)
    assert "__interrupt__" in paused
    pending = paused["messages"][-1]
    assert isinstance(pending, AIMessage) and pending.tool_calls[0]["id"] == "mail_6"

    # While the human decides, the view folds (its budget shrinks) but the pending call is
    # not in the log yet: it is logged on resume, with its result, so no fold can take it.
    session = memory.session("hitl")
    view = session.view("default")
    assert not any(m.message.get("tool_calls") for m in session.messages()[-2:])
    folds_before = len(view.folds(include_superseded=True))
    view.update(budget=BUDGET // 2)
    view.compact()
    assert len(view.folds(include_superseded=True)) > folds_before
    edited = {
        "type": "edit",
        "edited_action": {"name": "send_email", "args": {"to": "bob@x.org", "body": "hi"}},
    }
    done = agent.invoke(Command(resume={"decisions": [edited]}), config)
    assert done["messages"][-1].content == "done after mail_6"
    # LangChain keeps the call the model made and tells it, in the result, what ran instead:
    # the last prompt holds that call with its result, whole.
    last = _prompts(model_server)[-1]
    at = next(
        i for i, m in enumerate(last) if (m.get("tool_calls") or [{}])[0].get("id") == "mail_6"
    )
    assert last[at + 1]["role"] == "tool" and last[at + 1]["tool_call_id"] == "mail_6"
    assert "sent to bob@x.org" in last[at + 1]["content"]
    _check_prompts(_prompts(model_server))
    # The call is logged once, right before its result; the edit started no branch.
    logged = [m.message for m in session.messages()]
    calls = [
        i for i, m in enumerate(logged) if (m.get("tool_calls") or [{}])[0].get("id") == "mail_6"
    ]
    assert len(calls) == 1 and logged[calls[0] + 1]["tool_call_id"] == "mail_6"
    assert all(f.end < calls[0] + 1 for f in view.folds())  # seq = index + 1: no fold reaches it
    _check_log(memory, "hitl", done["messages"])
    assert len(session.branches()) == 1


def test_a_summarizer_that_fails_never_breaks_the_turn(model_server: FakeProvider) -> None:
    memory = Memory()
    summarizer = _FailingModel()
    settings = {"preset": "chat", "budget": BUDGET, "llm": summarizer}
    middleware = ContextfoldMiddleware(memory=memory, settings=settings)
    agent = create_agent(
        chat_model(model_server.url),
        tools=agent_tools(),
        system_prompt=SYSTEM,
        middleware=[middleware],
    )
    config: Any = {"configurable": {"thread_id": "fail"}}
    state: dict[str, Any] = {"messages": []}
    for turn in range(1, 7):
        state["messages"].append(HumanMessage(task_text(turn, 2)))
        state = agent.invoke(state, config)
        assert state["messages"][-1].content == f"done with task {turn}"
    assert summarizer.calls  # it was asked, and failed
    _check_prompts(_prompts(model_server))
    _check_log(memory, "fail", state["messages"])


class _FailingModel(FailingModel):
    """A summarizer whose every call fails, as a provider outage does; counts the calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        raise ConnectionResetError("the summarizer is down")


def test_a_fixed_session_and_a_missing_thread_id() -> None:
    memory = Memory()
    with pytest.raises(InvalidInput) as both:
        ContextfoldMiddleware(memory=memory, session=memory.session("s"))
    assert both.value.field == "session"
    with pytest.raises(InvalidInput) as neither:
        ContextfoldMiddleware()
    assert neither.value.field == "session"
    for bad, field in (
        ({"budget": -5}, "budget"),
        ({"view": ""}, "view"),
        ({"settings": 3}, "settings"),
    ):
        with pytest.raises(InvalidInput) as caught:
            ContextfoldMiddleware(memory=memory, **bad)
        assert caught.value.field == field
    history = ContextfoldChatMessageHistory(memory, "h", settings={"budget": "big"})
    with pytest.raises(InvalidInput) as unknown:
        list(history.messages)
    assert unknown.value.field == "budget"
    with FakeProvider("openai") as server:
        server.answer("POST", "/v1/chat/completions", scripted_reply)
        threaded = create_agent(
            chat_model(server.url),
            tools=agent_tools(),
            middleware=[ContextfoldMiddleware(memory=memory)],
        )
        with pytest.raises(InvalidInput) as missing:
            threaded.invoke({"messages": [HumanMessage("hi")]})
        assert missing.value.field == "thread_id"
        fixed = create_agent(
            chat_model(server.url),
            tools=agent_tools(),
            middleware=[ContextfoldMiddleware(session=memory.session("fixed"))],
        )
        state = fixed.invoke({"messages": [HumanMessage("hi")]})
        assert state["messages"][-1].content == "I answer: hi"
    assert [m.message["content"] for m in memory.session("fixed").messages()] == [
        "hi",
        "I answer: hi",
    ]


def test_threads_map_to_sessions_by_a_function(model_server: FakeProvider) -> None:
    memory = Memory()
    middleware = ContextfoldMiddleware(
        memory=memory, thread_session=lambda thread: f"user-{thread.upper()}"
    )
    agent = create_agent(chat_model(model_server.url), tools=agent_tools(), middleware=[middleware])
    for thread in ("a", "b"):
        agent.invoke(
            {"messages": [HumanMessage(f"hello {thread}")]}, {"configurable": {"thread_id": thread}}
        )
    assert memory.sessions() == ["user-A", "user-B"]
    assert memory.session("user-B").messages()[0].message["content"] == "hello b"


def test_chat_history_with_runnable_with_message_history(model_server: FakeProvider) -> None:
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
    from langchain_core.runnables.history import RunnableWithMessageHistory

    memory = Memory()
    histories: dict[str, ContextfoldChatMessageHistory] = {}

    def history(session_id: str) -> ContextfoldChatMessageHistory:
        if session_id not in histories:
            histories[session_id] = ContextfoldChatMessageHistory(
                memory, session_id, system=SYSTEM, settings=SETTINGS
            )
        return histories[session_id]

    prompt = ChatPromptTemplate.from_messages(
        [MessagesPlaceholder("history"), ("human", "{question}")]
    )
    chain = RunnableWithMessageHistory(  # deprecated by LangChain for LangGraph; still served
        prompt | chat_model(model_server.url).bind_tools(agent_tools()),
        history,
        input_messages_key="question",
        history_messages_key="history",
    )
    questions = [
        f"question {n}: " + "tell me about the loader and its shards " * 8 for n in range(12)
    ]
    for question in questions:
        answer = chain.invoke({"question": question}, {"configurable": {"session_id": "c1"}})
        assert answer.content == f"I answer: {question[:40]}"
    prompts = _prompts(model_server)
    assert len(prompts) == len(questions)
    _check_prompts(prompts)
    assert len(prompts[-1]) < 2 * len(questions)  # folded
    logged = [m.message for m in memory.session("c1").messages()]
    assert [m["role"] for m in logged] == ["system"] + ["user", "assistant"] * len(questions)
    # The history hands back the very messages added (ids and metadata from the log).
    shown = histories["c1"].messages
    assert isinstance(shown[-1], AIMessage) and shown[-1].id is not None
    assert shown[-1].response_metadata.get("model_name")
    histories["c1"].clear()
    assert [m.message["role"] for m in memory.session("c1").messages()] == ["system"]
    assert [m.content for m in histories["c1"].messages] == [SYSTEM]


def test_the_example_runs(model_server: FakeProvider) -> None:
    env = {"OPENAI_BASE_URL": model_server.url, "OPENAI_API_KEY": "unused", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "langchain_agent.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "done with task 3" in done.stdout
    for prompt in _prompts(model_server):
        assert prompt_tokens(prompt) <= 1500
        assert pairing_faults(prompt) == []


def test_a_system_prompt_that_changes_each_call_neither_forks_the_log_nor_breaks_the_budget(
    model_server: FakeProvider,
) -> None:
    from langchain.agents.middleware import ModelRequest, dynamic_prompt

    calls: list[int] = []

    @dynamic_prompt
    def numbered(request: ModelRequest) -> str:
        calls.append(len(calls))
        return f"{SYSTEM} This is call {len(calls)}." + " Be careful." * (5 * len(calls))

    memory = Memory()
    agent = create_agent(
        chat_model(model_server.url),
        tools=agent_tools(),
        # Outer first: the prompt it sets is what the contextfold middleware sees and fits.
        middleware=[numbered, ContextfoldMiddleware(memory=memory, settings=SETTINGS)],
    )
    config: Any = {"configurable": {"thread_id": "dyn"}}
    state: dict[str, Any] = {"messages": []}
    for turn in range(1, 6):
        state["messages"].append(HumanMessage(task_text(turn, 2)))
        state = agent.invoke(state, config)
        assert state["messages"][-1].content == f"done with task {turn}"
    prompts = _prompts(model_server)
    for n, prompt in enumerate(prompts, 1):
        assert prompt[0]["content"].startswith(f"{SYSTEM} This is call {n}.")
        assert sum(str(m["content"]).startswith(SYSTEM) for m in prompt) == 1  # no other prompt
        assert prompt_tokens(prompt) <= BUDGET
        assert pairing_faults(prompt) == []
    session = memory.session("dyn")
    assert len(session.branches()) == 1
    logged = [m.message for m in session.messages()]
    assert logged[0]["content"].startswith(f"{SYSTEM} This is call 1.")
    assert [digest(m) for m in logged[1:]] == [
        digest(langchain_to_chat(m)) for m in state["messages"]
    ]


def test_a_runner_compacts_in_the_background(model_server: FakeProvider, tmp_path: Path) -> None:
    """With a runner watching the view, it folds in the background and every prompt still fits."""
    from contextfold import ThreadRunner

    memory = Memory(tmp_path / "bg.db")
    with ThreadRunner(workers=1) as runner:
        middleware = ContextfoldMiddleware(memory=memory, settings=SETTINGS, runner=runner)
        agent = create_agent(
            chat_model(model_server.url),
            tools=agent_tools(),
            system_prompt=SYSTEM,
            middleware=[middleware],
        )
        config: Any = {"configurable": {"thread_id": "bg"}}
        state: dict[str, Any] = {"messages": []}
        for turn in range(1, 7):
            state["messages"].append(HumanMessage(task_text(turn, 2)))
            state = agent.invoke(state, config)
            assert runner.wait_idle(30)
        assert [v.session.id for v in runner.watched()] == ["bg"]
    _check_prompts(_prompts(model_server))
    assert memory.session("bg").view("default").folds()
    _check_log(memory, "bg", state["messages"])


def test_the_bench_module_measures_both_middlewares() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import _adapter_langchain
    finally:
        sys.path.remove(str(ROOT / "bench"))
    figures = _adapter_langchain.measure(2)
    assert figures["adapter"] == "langchain" and figures["turns"] == 2
    assert figures["peer"] == "SummarizationMiddleware"
    for fault in ("pairs_broken", "over_budget", "duplicated", "missing"):
        assert figures[fault] == 0, fault
    assert 0 < figures["overhead_p50_ms"] <= figures["overhead_p99_ms"]
    assert 0 < figures["peer_p50_ms"] <= figures["peer_p99_ms"]


def test_recall_tools_let_the_model_search_what_was_folded(model_server: FakeProvider) -> None:
    memory = Memory()
    agent = create_agent(
        chat_model(model_server.url),
        tools=agent_tools(),
        system_prompt=SYSTEM,
        middleware=[ContextfoldMiddleware(memory=memory, settings=SETTINGS, recall_tools=True)],
    )
    config: Any = {"configurable": {"thread_id": "recall"}}
    state: dict[str, Any] = {"messages": []}
    for turn in range(1, 7):
        state["messages"].append(HumanMessage(task_text(turn, 2)))
        state = agent.invoke(state, config)
    session = memory.session("recall")
    assert session.view("default").folds()
    state["messages"].append(HumanMessage(recall_text(7, "w1x1")))
    state = agent.invoke(state, config)
    offered = {t["function"]["name"] for t in model_server.requests[-1].body["tools"]}
    assert {"contextfold_search", "contextfold_expand", "contextfold_folds"} <= offered
    # The first note, folded long ago, is found in the log (seq 4), beside the question.
    question = recall_text(7, "w1x1")
    asked = next(i for i, m in enumerate(state["messages"]) if m.content == question)
    assert state["messages"][-1].content == f"recalled seqs [4, {asked + 2}]"
    assert session.messages()[3].message["content"].startswith("note 1.1 of 2")
    _check_prompts(_prompts(model_server))
    _check_log(memory, "recall", state["messages"])
    # Another thread's session is not searched: its tools read their own log only.
    other = agent.invoke(
        {"messages": [HumanMessage(recall_text(1, "w1x1"))]},
        {"configurable": {"thread_id": "elsewhere"}},
    )
    assert other["messages"][-1].content == "recalled seqs [2]"  # its own question only
