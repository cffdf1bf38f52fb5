"""A Pydantic AI agent whose history is kept by contextfold.

The agent reads files with a tool over several turns; each run goes on from
the former's whole history (``message_history=result.all_messages()``).
``ContextfoldHistory`` logs every message once to a SQLite session and hands
each model request the view: older turns folded, recent ones verbatim, within
the budget. An ``InlineRunner`` folds the view as the log grows (a service
would use ``ThreadRunner``).

Run it against OpenAI (``OPENAI_API_KEY``) or any Chat Completions server
(``OPENAI_BASE_URL``)::

    python examples/pydantic_ai_agent.py chat.db
"""

from __future__ import annotations

import sys

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from contextfold import Memory
from contextfold.integrations.pydantic_ai import ContextfoldHistory
from contextfold.runtime import InlineRunner


def read_file(path: str) -> str:
    """Read a source file (here: made-up lines, long enough to need folding)."""
    return "\n".join(f"{path}:{n}: value_{n} = compute({n}, '{path}')" for n in range(1, 25))


def main(db: str) -> None:
    memory = Memory(db)
    session = memory.session("review")
    view = session.view("default", preset="offline", budget=1200)
    runner = InlineRunner()
    runner.watch(view)

    agent = Agent(
        OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider()),
        system_prompt="You are a careful code reviewer.",
        tools=[read_file],
        capabilities=[ContextfoldHistory(session, "default")],
    )
    history: list[ModelMessage] = []
    for n in range(1, 4):
        result = agent.run_sync(f"Please review src/module_{n}.py.", message_history=history)
        history = result.all_messages()
        print(f"turn {n}: {result.output}")

    runner.stop()
    print(f"logged {session.last_seq()} messages, {len(view.folds())} folds in the view")
    memory.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "pydantic_ai_chat.db")
