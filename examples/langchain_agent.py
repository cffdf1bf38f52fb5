"""A LangChain agent whose model sees contextfold's compacted view while the graph keeps everything.

Run it against any OpenAI-compatible server::

    pip install 'contextfold[langchain]' langchain-openai
    OPENAI_BASE_URL=https://api.openai.com/v1 OPENAI_API_KEY=sk-... python examples/langchain_agent.py

The agent reads notes, task after task, on one LangGraph thread. Its tool
results are long, and the view's budget is small on purpose (1,500 tokens), so
old rounds are folded after a few tasks: the model gets a prompt within the
budget, the graph's state (and its checkpointer) keeps every message, and the
contextfold log keeps each message once.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from contextfold import Memory
from contextfold.integrations.langchain import ContextfoldMiddleware

NOTE = "The loader reads each shard, checks its header and keeps the index in memory. " * 6


@tool
def read_note(task: int, step: int, of: int) -> str:
    """Read note number `step` (of `of` notes) of task `task`."""
    return f"note {task}.{step} of {of}: {NOTE}"


def main() -> None:
    model = ChatOpenAI(
        model=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"),
        base_url=os.environ.get("OPENAI_BASE_URL"),
        api_key=os.environ["OPENAI_API_KEY"],  # type: ignore[arg-type]
    )
    with tempfile.TemporaryDirectory() as folder:
        memory = Memory(Path(folder) / "agents.db")
        contextfold = ContextfoldMiddleware(
            memory=memory,
            thread_session="notes/{thread_id}",
            settings={"preset": "offline", "budget": 1500},
        )
        agent = create_agent(
            model,
            tools=[read_note],
            system_prompt="You read every note of a task with read_note, one at a time, "
            "then say 'done with task N'.",
            middleware=[contextfold],
            checkpointer=InMemorySaver(),
        )
        config = {"configurable": {"thread_id": "demo"}}
        for task in (1, 2, 3):
            state = agent.invoke({"messages": [HumanMessage(f"task {task}: read 3 notes")]}, config)
            print(f"task {task}: {state['messages'][-1].content}")

        session = memory.session("notes/demo")
        view = session.view("default")
        prompt = view.render()
        print(f"graph state: {len(state['messages'])} messages")
        print(f"log: {session.last_seq()} messages, {len(view.folds())} folds")
        print(f"prompt now: {len(prompt)} messages, {session.counter.messages(prompt)} tokens")
        memory.close()


if __name__ == "__main__":
    main()
