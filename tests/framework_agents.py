"""Agents run by a framework's own loop, for the client rig's framework rows.

Unlike ``sdk_agents``, nothing here keeps the conversation or calls the tool:
the framework does, as its users run it, and only its client is pointed at the
proxy. The OpenAI Agents SDK with its defaults (the Responses API): an
``Agent`` with a ``function_tool``, ``Runner.run_streamed``, the client set
with ``set_default_openai_client`` and tracing off. LangChain: ``create_agent``
over ``ChatOpenAI`` (Chat Completions, streamed) with a ``@tool``. Both offer
the shell tool the OpenAI scripts call (``exec_command``, its argument
``cmd``). ``kept`` holds the conversation between runs, as each framework
hands it back (``to_input_list()``, the graph's ``messages``): a later run goes
on from it with a new prompt. A run ends as a CLI's does (``agent_clis.Run``).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import openai
from agent_clis import Run
from sdk_agents import MAX_CALLS, shell

INSTRUCTIONS = "You are a careful agent."


def agents_sdk_agent(
    base_url: str, prompt: str, work: Path, *, key: str, session: str, kept: list[Any]
) -> Run:
    """The OpenAI Agents SDK's ``Runner.run_streamed`` (``base_url`` with ``/v1``)."""
    import agents

    agents.set_tracing_disabled(True)

    @agents.function_tool
    def exec_command(cmd: str) -> str:
        """Run a shell command."""
        return shell(cmd, work)

    agent = agents.Agent(name="shell", instructions=INSTRUCTIONS, tools=[exec_command])

    async def run() -> Any:
        """The run, its client closed on the loop it was opened on."""
        async with openai.AsyncOpenAI(
            base_url=base_url,
            api_key=key,
            max_retries=0,
            default_headers={"X-Contextfold-Session": session},
        ) as client:
            agents.set_default_openai_client(client, use_for_tracing=False)
            given = [*kept, {"role": "user", "content": prompt}] if kept else prompt
            result = agents.Runner.run_streamed(agent, given, max_turns=MAX_CALLS)
            async for _ in result.stream_events():
                pass
            return result

    try:
        result = asyncio.run(run())
    except (openai.APIError, agents.AgentsException) as exc:
        return Run(1, "", repr(exc), "")
    kept[:] = result.to_input_list()
    return Run(0, json.dumps(kept, default=str), "", str(result.final_output))


def langchain_agent(
    base_url: str, prompt: str, work: Path, *, key: str, session: str, kept: list[Any]
) -> Run:
    """LangChain's ``create_agent`` over a streamed ``ChatOpenAI`` (``base_url`` with ``/v1``)."""
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.errors import GraphRecursionError

    @tool
    def exec_command(cmd: str) -> str:
        """Run a shell command."""
        return shell(cmd, work)

    model = ChatOpenAI(
        model="gpt-4o-mini",
        base_url=base_url,
        api_key=key,  # type: ignore[arg-type]
        default_headers={"X-Contextfold-Session": session},
        max_retries=0,
        streaming=True,
    )
    agent = create_agent(model, tools=[exec_command], system_prompt=INSTRUCTIONS)
    try:
        state = agent.invoke(
            {"messages": [*kept, {"role": "user", "content": prompt}]},
            {"recursion_limit": 2 * MAX_CALLS + 1},
        )
    except (openai.APIError, GraphRecursionError) as exc:
        return Run(1, "", repr(exc), "")
    kept[:] = state["messages"]
    answer = kept[-1]
    return Run(0, answer.model_dump_json(), "", str(answer.content))
