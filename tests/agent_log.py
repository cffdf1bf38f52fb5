"""An agent's log for the pins tests and the proxy's: a request, a rule file read, a
to-do list rewritten between long reads (``agent_log``)."""

from __future__ import annotations

import json
from typing import Any

from contextfold.core.messages import Message

SYSTEM = "You are a coding agent."
FILLER = "Line of build output that says nothing worth keeping. " * 14
RULES = "RULES: never push to main; indent with tabs; run the tests before you commit."


def call(call_id: str, name: str, arguments: dict[str, Any], result: str | None) -> list[Message]:
    """A tool unit: the call, and its result unless it has not come yet."""
    out: list[Message] = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ],
        }
    ]
    if result is not None:
        out.append({"role": "tool", "tool_call_id": call_id, "content": result})
    return out


def todo(version: int) -> list[Message]:
    items = [f"step {n} of the fix, revision {version}" for n in range(3)]
    return call(f"todo{version}", "todo_write", {"todos": items}, f"todo list {version} saved")


def reads(first: int, count: int) -> list[Message]:
    return [m for i in range(first, first + count) for m in call(f"r{i}", "read", {"i": i}, FILLER)]


def agent_log(versions: int = 4) -> list[Message]:
    """A request, a read of the rule file, then the to-do list written ``versions``
    times with long reads between."""
    out: list[Message] = [{"role": "user", "content": "Fix the failing tests."}]
    out += call("rules", "Read", {"file_path": "/repo/CLAUDE.md"}, RULES)
    for version in range(versions):
        out += todo(version)
        out += reads(version * 10, 5)
    return out
