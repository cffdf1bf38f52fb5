"""A LlamaIndex ``FunctionAgent`` task over real files, scripted turn by turn.

The agent is LlamaIndex's own loop: ``FunctionAgent`` with two Python tools
(``read_file``, ``count_lines`` over a folder the task writes) and LlamaIndex's
``LiteLLM`` class speaking Chat Completions to a ``FakeProvider`` on 127.0.0.1.
Each turn the user asks about one file; the model reads it (on every other turn
it counts another file's lines in the same message: two calls at once), then
answers. ``replies(turn)`` is what the server answers for that turn, and
``expected(turn)`` the chat messages the turn adds to the conversation, tool
results computed by the tools themselves, to compare with the log.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fake_providers import Reply
from llama_index_replies import Call, streamed

# LiteLLM fetches a price list from the internet on import unless told not to.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.tools import FunctionTool
from llama_index.llms.litellm import LiteLLM

SYSTEM = "You are a careful agent. Read the files you are asked about and answer briefly."
LINES = 30


class Task:
    """The files, the tools over them and the script of each turn."""

    def __init__(self, folder: Path, turns: int) -> None:
        self.folder = folder
        self.turns = turns
        folder.mkdir(parents=True, exist_ok=True)
        for turn in range(1, turns + 2):
            body = "\n".join(
                f"note {turn}.{n}: the {_WORDS[(turn + n) % len(_WORDS)]} handler keeps "
                f"{_WORDS[(turn * n) % len(_WORDS)]} records for shard {n}"
                for n in range(1, LINES + 1)
            )
            (folder / f"notes_{turn}.txt").write_text(body + "\n", encoding="utf-8")

    def read_file(self, name: str) -> str:
        """Read a text file of the notes folder."""
        return (self.folder / name).read_text(encoding="utf-8")

    def count_lines(self, name: str) -> int:
        """Count the lines of a text file of the notes folder."""
        return len((self.folder / name).read_text(encoding="utf-8").splitlines())

    def tools(self) -> list[FunctionTool]:
        return [
            FunctionTool.from_defaults(self.read_file),
            FunctionTool.from_defaults(self.count_lines),
        ]

    def question(self, turn: int) -> str:
        return f"What does notes_{turn}.txt say about shard 3?"

    def calls(self, turn: int) -> list[Call]:
        found: list[Call] = [(f"call_{turn}_read", "read_file", {"name": f"notes_{turn}.txt"})]
        if turn % 2 == 0:
            found.append((f"call_{turn}_count", "count_lines", {"name": f"notes_{turn + 1}.txt"}))
        return found

    def answer(self, turn: int) -> str:
        return f"Turn {turn}: shard 3 of notes_{turn}.txt is noted; see line {turn}.3."

    def replies(self, turn: int) -> list[Reply]:
        return [
            streamed(f"Reading notes_{turn}.txt.", self.calls(turn), key=f"{turn}a"),
            streamed(self.answer(turn), key=f"{turn}b"),
        ]

    def expected(self, turn: int) -> list[dict[str, Any]]:
        """The chat messages one turn adds: question, call, results, answer."""
        calls = self.calls(turn)
        out: list[dict[str, Any]] = [
            {"role": "user", "content": self.question(turn)},
            {
                "role": "assistant",
                "content": f"Reading notes_{turn}.txt.",
                "tool_calls": [
                    {
                        "id": i,
                        "type": "function",
                        "function": {"name": n, "arguments": json.dumps(a)},
                    }
                    for i, n, a in calls
                ],
            },
        ]
        for call_id, name, arguments in calls:
            result = getattr(self, name)(**arguments)
            out.append({"role": "tool", "tool_call_id": call_id, "content": str(result)})
        out.append({"role": "assistant", "content": self.answer(turn)})
        return out


def agent(task: Task, base_url: str) -> FunctionAgent:
    """LlamaIndex's ``FunctionAgent`` (streaming, its default) over ``LiteLLM`` at ``base_url``."""
    llm = LiteLLM(model="openai/gpt-4o-mini", api_key="test-key", api_base=base_url, max_retries=0)
    return FunctionAgent(tools=task.tools(), llm=llm)


_WORDS = (
    "loader", "parser", "config", "cache", "retry", "session", "token", "budget", "fold",
    "branch", "index", "queue", "schema", "column", "record", "buffer", "stream", "window",
)  # fmt: skip
