"""A Pydantic AI agent on ``OpenAIChatModel``, its model a scripted Chat Completions server.

``agent`` builds an ``Agent`` with a ``read_file`` tool (its result some
hundred tokens, so a few turns outgrow a small budget) on a provider pointed
at ``FakeProvider("openai")``; ``turn_replies`` scripts one turn: a tool call,
then a text answer. ``run_turns`` runs turns with ``agent.run_sync``, each
passing the former run's ``all_messages()`` as its history, as an application
keeping its conversation does.
"""

from __future__ import annotations

import json
from typing import Any

from fake_openai import openai_reply
from fake_providers import Reply
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

SYSTEM = "You are a careful code reviewer."


def file_text(path: str) -> str:
    """What ``read_file`` returns: numbered lines naming the file (~300 tokens)."""
    return "\n".join(f"{path}:{n}: value_{n} = compute({n}, '{path}')" for n in range(1, 25))


def call_reply(name: str, arguments: dict[str, Any], call_id: str) -> Reply:
    """A chat completion that calls one tool."""
    reply = openai_reply("")
    choice = reply.body["choices"][0]
    choice["message"]["content"] = None
    choice["message"]["tool_calls"] = [
        {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
    ]
    choice["finish_reason"] = "tool_calls"
    return reply


def turn_replies(n: int) -> list[Reply]:
    """Turn ``n``: read one file, then answer about it."""
    return [
        call_reply("read_file", {"path": f"src/module_{n}.py"}, f"call_{n}"),
        openai_reply(f"Reviewed module_{n}: it computes {n} values."),
    ]


def agent(
    base_url: str, capabilities: list[AbstractCapability[Any]], *, approvals: bool = False
) -> Agent[Any, Any]:
    """The agent, its tool run by Pydantic AI's own loop; with ``approvals``, also a
    ``deploy`` tool a human must approve (the run then ends with ``DeferredToolRequests``)."""
    model = OpenAIChatModel(
        "gpt-4o-mini", provider=OpenAIProvider(base_url=base_url, api_key="test-key")
    )
    output: Any = [str, DeferredToolRequests] if approvals else str
    built: Agent[Any, Any] = Agent(
        model,
        system_prompt=SYSTEM,
        capabilities=capabilities,
        deps_type=object,
        output_type=output,
    )

    @built.tool_plain
    def read_file(path: str) -> str:
        """Read a source file."""
        return file_text(path)

    if approvals:

        @built.tool_plain(requires_approval=True)
        def deploy(target: str) -> str:
            """Deploy to a target, once a human approves."""
            return f"deployed to {target}"

    return built


def run_turns(built: Agent[Any, Any], turns: int, deps: Any = None) -> list[ModelMessage]:
    """``turns`` runs, each going on from the former's whole history."""
    history: list[ModelMessage] = []
    for n in range(1, turns + 1):
        result = built.run_sync(
            f"Please review src/module_{n}.py.", message_history=history, deps=deps
        )
        history = result.all_messages()
    return history
