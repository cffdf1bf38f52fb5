"""The OpenAI Agents SDK session (``ContextfoldSession``) under ``Runner.run``, beside the
SDK's own sessions, in one run.

An agent with a file-reading tool runs ``turns`` runs of one conversation
against a scripted Responses server on 127.0.0.1 (each run: the model calls
the tool, then answers). The view folds with the offline preset on a
``ThreadRunner``, within ``BUDGET`` tokens, and every model call goes through
the session's ``call_model_input_filter``. Counted on what the server
received and what the log holds: prompts with a tool pair broken, prompts
over the budget by an independent count (``tests/prompt_checks``), messages
logged twice or never. The overhead is the time the session's own calls take
in a turn (``get_items``, ``add_items`` and the filter), p50 and p99 over the
turns; the peer's is the same for the SDK's ``SQLiteSession`` in a file, and,
when the installed SDK has it, its ``OpenAIResponsesCompactionSession`` over
one (its ``responses.compact`` calls answered by the same server).

``measure(turns)`` returns the figures as a dict.
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _common import ROOT

sys.path.insert(0, str(ROOT / "tests"))

from fake_compaction import OpenAICompaction
from fake_openai import called, responses_reply, said
from fake_providers import FakeProvider, Reply, Request
from prompt_checks import pairing_faults, prompt_tokens

from contextfold import Memory, ThreadRunner
from contextfold.core.messages import Message, for_model
from contextfold.formats.responses import read_items

BUDGET = 1500
_ASKED = re.compile(r"What is in f(\d+)\.py")
FILE_TEXT = "lorem ipsum dolor sit amet, consectetur adipiscing elit " * 40


def _answer(request: Request) -> Reply:
    """The model: a question about a file gets a call reading it, the call's output the
    answer."""
    last = request.body["input"][-1]
    if last.get("type") == "function_call_output":
        call = last["call_id"]
        return responses_reply([said(f"{call} read.", f"msg_{call}_b")], response_id=f"r_{call}b")
    n = int(_ASKED.findall(json.dumps(last))[-1])
    return responses_reply(
        [
            {"type": "reasoning", "id": f"rs_{n}", "summary": []},
            said(f"Reading f{n}.py.", f"msg_{n}_a"),
            called("read_file", json.dumps({"path": f"f{n}.py"}), f"call_{n}"),
        ],
        response_id=f"r_{n}a",
    )


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


class _Timed:
    """Wraps a session's protocol calls, adding their wall time to the current turn."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.session_id = inner.session_id
        self.session_settings = getattr(inner, "session_settings", None)
        self.spent = 0.0

    async def _timed(self, call: Awaitable[Any]) -> Any:
        start = time.perf_counter()
        try:
            return await call
        finally:
            self.spent += time.perf_counter() - start

    async def get_items(self, limit: int | None = None) -> Any:
        return await self._timed(self.inner.get_items(limit))

    async def add_items(self, items: list[Any]) -> None:
        await self._timed(self.inner.add_items(items))

    async def pop_item(self) -> Any:
        return await self._timed(self.inner.pop_item())

    async def clear_session(self) -> None:
        await self._timed(self.inner.clear_session())

    async def filter(self, data: Any) -> Any:
        return await self._timed(self.inner.call_model_input_filter(data))


class _TimedCompaction(_Timed):
    """``_Timed`` for the compaction session: its compaction after a turn timed too."""

    async def run_compaction(self, args: Any = None) -> None:
        await self._timed(self.inner.run_compaction(args))


def _expected(turns: int) -> list[Message]:
    out: list[Message] = []
    for n in range(turns):
        out += [
            {"role": "user", "content": f"What is in f{n}.py?"},
            {
                "role": "assistant",
                "content": f"Reading f{n}.py.",
                "tool_calls": [
                    {
                        "id": f"call_{n}",
                        "type": "function",
                        "function": {
                            "name": "read_file",
                            "arguments": json.dumps({"path": f"f{n}.py"}),
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"call_{n}", "content": f"f{n}.py: {FILE_TEXT}"},
            {"role": "assistant", "content": f"call_{n} read."},
        ]
    return out


def _key(message: Message) -> str:
    return json.dumps(for_model(message), sort_keys=True)


async def _drive(
    agents: Any, url: str, make: Callable[[Any], _Timed], turns: int, config: Any
) -> list[float]:
    """``turns`` runs of the agent on the session ``make`` opens with the run's client;
    the session's time in each, in ms."""

    @agents.function_tool
    def read_file(path: str) -> str:
        """Read a file of the project."""
        return f"{path}: {FILE_TEXT}"

    agent = agents.Agent(
        name="reader", instructions="Answer from the files.", tools=[read_file], model="gpt-5"
    )
    spent: list[float] = []
    async with agents.AsyncOpenAI(base_url=url, api_key="sk-bench", max_retries=0) as client:
        agents.set_default_openai_client(client, use_for_tracing=False)
        session = make(client)
        for n in range(turns):
            session.spent = 0.0
            await agents.Runner.run(
                agent, f"What is in f{n}.py?", session=session, run_config=config
            )
            spent.append(session.spent * 1000)
    return spent


def measure(turns: int) -> dict[str, Any]:
    """The figures of one run of ``turns`` turns, the adapter's and its peer's."""
    import agents
    from agents import SQLiteSession

    from contextfold.integrations.openai_agents import ContextfoldSession

    agents.set_tracing_disabled(True)
    with tempfile.TemporaryDirectory() as folder, FakeProvider("responses") as server:
        compaction = OpenAICompaction(server)
        compaction.agent = _answer

        memory = Memory(Path(folder) / "cf.db")
        view = memory.session("bench").view("default", preset="offline", budget=BUDGET)
        adapter = _Timed(ContextfoldSession.open(memory, "bench"))
        config = agents.RunConfig(call_model_input_filter=adapter.filter)
        with ThreadRunner() as runner:
            runner.watch(view)
            ours = asyncio.run(_drive(agents, server.url, lambda _: adapter, turns, config))
        sent = [r.body for r in server.requests if r.path == "/v1/responses"]
        prompts = [[for_model(m) for m in read_items(b["input"], continued=True)] for b in sent]
        log = [for_model(m) for m in memory.session("bench").history()]
        expected = Counter(_key(m) for m in _expected(turns))
        logged = Counter(_key(m) for m in log)
        figures: dict[str, Any] = {
            "adapter": "openai-agents",
            "turns": turns,
            "calls": len(sent),
            "pairs_broken": sum(1 for p in prompts if pairing_faults(p)),
            "over_budget": sum(1 for p in prompts if prompt_tokens(p) > BUDGET),
            "duplicated": sum((logged - expected).values()),
            "missing": sum((expected - logged).values()),
            "folds": len(memory.session("bench").view("default").folds(include_superseded=True)),
            "overhead_p50_ms": round(statistics.median(ours), 3),
            "overhead_p99_ms": round(_percentile(ours, 0.99), 3),
        }

        plain = _Timed(SQLiteSession("bench", str(Path(folder) / "sdk.db")))
        theirs = asyncio.run(_drive(agents, server.url, lambda _: plain, turns, agents.RunConfig()))
        figures |= {
            "peer": "SQLiteSession",
            "peer_p50_ms": round(statistics.median(theirs), 3),
            "peer_p99_ms": round(_percentile(theirs, 0.99), 3),
        }
        compacting = _compaction_peer(agents, server.url, folder, turns)
        if compacting is not None:
            figures |= {**compacting, "peer_compactions": compaction.compactions}
    return figures


def _compaction_peer(agents: Any, url: str, folder: str, turns: int) -> dict[str, Any] | None:
    """The SDK's own compaction session over a SQLite one, when the SDK has it."""
    made: Callable[..., Any] | None = getattr(agents, "OpenAIResponsesCompactionSession", None)
    if made is None:
        return None
    from agents import SQLiteSession

    underlying = SQLiteSession("bench-compacted", str(Path(folder) / "sdk-compacted.db"))

    def make(client: Any) -> _Timed:
        session = made(
            "bench-compacted", underlying, client=client, model="gpt-5", compaction_mode="input"
        )
        return _TimedCompaction(session)

    spent = asyncio.run(_drive(agents, url, make, turns, agents.RunConfig()))
    return {
        "peer_compaction": "OpenAIResponsesCompactionSession",
        "peer_compaction_p50_ms": round(statistics.median(spent), 3),
        "peer_compaction_p99_ms": round(_percentile(spent, 0.99), 3),
    }
