"""A LlamaIndex agent whose memory is contextfold: the log keeps everything, the
model gets the folded view within its budget.

Run against any OpenAI-compatible server (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``)::

    pip install "contextfold[llama-index]" llama-index-llms-litellm
    python examples/llama_index_agent.py /tmp/agent

Each turn the agent greps a file of this repository with a real Python tool;
the session lives in a SQLite file in the folder given, so a second run goes on
with the same conversation.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price list download

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.llms.litellm import LiteLLM

from contextfold import Memory
from contextfold.integrations.llama_index import ContextfoldMemory
from contextfold.runtime import ThreadRunner

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = [
    "Where is render defined in src/contextfold/core/render.py?",
    "Which functions does src/contextfold/core/units.py define?",
    "Where is the View class in src/contextfold/memory/view.py?",
    "Where is the Session class in src/contextfold/memory/session.py?",
]


def grep(path: str, needle: str) -> str:
    """The lines of a repository file that contain ``needle``, with their numbers."""
    lines = (REPO / path).read_text(encoding="utf-8").splitlines()
    return "\n".join(f"{n}: {line}" for n, line in enumerate(lines, 1) if needle in line)


async def main(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with Memory(folder / "agent.db") as memory:
        agent_memory = ContextfoldMemory.from_defaults(
            memory,
            "repo-questions",
            system="You answer questions about a repository, using the grep tool.",
            preset="offline",  # folds without a model; give model="openai:gpt-4o-mini" for summaries
            budget=1200,
        )
        runner = ThreadRunner()  # folds in the background, never inside the agent's turn
        runner.watch(agent_memory.session.view("default"))
        llm = LiteLLM(
            model="openai/gpt-4o-mini",
            api_base=os.environ.get("OPENAI_BASE_URL"),
            api_key=os.environ.get("OPENAI_API_KEY"),
            max_retries=0,
        )
        agent = FunctionAgent(tools=[grep], llm=llm)
        try:
            for question in QUESTIONS:
                answer = await agent.run(question, memory=agent_memory)
                print(answer)
        finally:
            runner.stop(timeout=10)
        view = agent_memory.session.view("default")
        print(f"log: {len(agent_memory.get_all())} messages, folds: {len(view.folds())}")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1] if len(sys.argv) > 1 else "agent-session")))
