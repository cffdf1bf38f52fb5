"""An OpenAI Agents SDK agent whose session is a contextfold view.

The agent reads files with a tool, over three runs of one conversation. Its
session is ``ContextfoldSession``: every item the SDK adds is logged once, raw,
and every model call is sent the view's compacted prompt, within its budget (a
``ThreadRunner`` folds the view in the background). The SDK's client reads
``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` from the environment as usual::

    pip install 'contextfold[openai-agents]'
    OPENAI_API_KEY=sk-... python examples/openai_agents_session.py

``CONTEXTFOLD_DB`` names the SQLite file (``agents.db`` by default): run it
again and the conversation goes on where it stopped, compacted.
"""

from __future__ import annotations

import asyncio
import os

from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled

from contextfold import Memory, ThreadRunner
from contextfold.integrations.openai_agents import ContextfoldSession

FILES = {f"f{n}.py": f"# module f{n}\n" + "lorem ipsum dolor sit amet\n" * 40 for n in range(3)}


@function_tool
def read_file(path: str) -> str:
    """Read a file of the project."""
    return FILES.get(path, f"no such file: {path}")


async def main() -> None:
    set_tracing_disabled(True)  # no traces sent to OpenAI from this example
    memory = Memory(os.environ.get("CONTEXTFOLD_DB", "agents.db"))
    # The view is yours to set: its budget, how it folds, with which model.
    view = memory.session("example").view("default", preset="offline", budget=4000)
    session = ContextfoldSession.open(memory, "example")
    # Each model call of a run gets the view's prompt, not only the run's first.
    config = RunConfig(call_model_input_filter=session.call_model_input_filter)
    agent = Agent(name="reader", instructions="Answer from the files.", tools=[read_file])
    with ThreadRunner() as runner:
        runner.watch(view)
        for n in range(3):
            result = await Runner.run(
                agent, f"What is in f{n}.py?", session=session, run_config=config
            )
            print(f"> What is in f{n}.py?\n{result.final_output}")
    print(f"logged: {len(memory.session('example').messages())} messages")


if __name__ == "__main__":
    asyncio.run(main())
