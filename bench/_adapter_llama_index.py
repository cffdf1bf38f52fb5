"""The LlamaIndex adapter under LlamaIndex's own agent loop, beside LlamaIndex's own memory.

``measure(turns)`` runs the scripted ``FunctionAgent`` task of the tests
(``tests/llama_index_agents.py``: real tools over files, LiteLLM speaking Chat
Completions to a scripted server on 127.0.0.1) twice in one process: once with
``ContextfoldMemory`` over a SQLite file (offline folds, a ``ThreadRunner``
compacting in the background), once with LlamaIndex's ``Memory`` and the same
token limit (its default store, SQLite in RAM). Every request the server got is
checked with the adapter contract's own count and pairing check; the log is
compared with the conversation the task made. The overhead is the time each
agent turn spends inside the memory's methods (``aget``, ``aput``,
``aput_messages``, ``aset``), per turn.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _common import ROOT

sys.path.insert(0, str(ROOT / "tests"))

from fake_providers import FakeProvider
from llama_index.core.memory import Memory as LlamaIndexMemory
from llama_index.core.memory.types import BaseMemory
from llama_index_agents import SYSTEM, Task, agent

from contextfold import Memory
from contextfold.integrations.llama_index import ContextfoldMemory
from contextfold.runtime import ThreadRunner
from contextfold.testing.adapter_contract_checks import (
    prompt_tokens,
    seen,
    split_pairs,
)

BUDGET = 1500
_TIMED = ("aget", "aput", "aput_messages", "aset")


def timed(base: type[BaseMemory]) -> type[BaseMemory]:
    """``base`` with its async methods timed into ``spent`` (seconds, since last read)."""

    def wrap(name: str) -> Any:
        async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return await getattr(super(cls, self), name)(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - start

        return method

    spent = [0.0]
    cls = type(f"Timed{base.__name__}", (base,), {name: wrap(name) for name in _TIMED})
    cls.spent = spent  # type: ignore[attr-defined]
    return cls


def _memory_part(chat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    last_user = max(i for i, m in enumerate(chat) if m["role"] == "user")
    return chat[: last_user + 1]


async def _run(task: Task, memory: BaseMemory, fake: FakeProvider) -> list[float]:
    """Every turn through the agent; the milliseconds each spent inside the memory."""
    llama_agent = agent(task, fake.url)
    spent = type(memory).spent  # type: ignore[attr-defined]
    per_turn = []
    for turn in range(1, task.turns + 1):
        fake.add(*task.replies(turn))
        spent[0] = 0.0
        await llama_agent.run(task.question(turn), memory=memory)
        per_turn.append(spent[0] * 1000)
    return per_turn


def _prompts(fake: FakeProvider) -> tuple[int, int]:
    """Tool pairs broken and memory parts over the budget, over every request."""
    chats = [request.body["messages"] for request in fake.requests]
    broken = sum(len(split_pairs(chat, open_tail=False)) for chat in chats)
    over = sum(prompt_tokens(_memory_part(chat)) > BUDGET for chat in chats)
    return broken, over


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(share * len(ordered)))], 3)


def measure(turns: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        task = Task(Path(folder) / "notes", turns=turns)
        with Memory(Path(folder) / "agent.db") as memory, FakeProvider("openai") as fake:
            ours = timed(ContextfoldMemory).from_defaults(
                memory, "bench", system=SYSTEM, preset="offline", budget=BUDGET
            )
            runner = ThreadRunner()
            runner.watch(ours.session.view("default"))
            try:
                overhead = asyncio.run(_run(task, ours, fake))
            finally:
                runner.stop(timeout=10)
            broken, over = _prompts(fake)
            expected = [{"role": "system", "content": SYSTEM}]
            for turn in range(1, turns + 1):
                expected += task.expected(turn)
            want = Counter(repr(sorted(seen(m).items())) for m in expected)
            have = Counter(repr(sorted(seen(m).items())) for m in ours.session.history())
        with FakeProvider("openai") as fake:
            peer = timed(LlamaIndexMemory).from_defaults(session_id="bench", token_limit=BUDGET)
            peer_overhead = asyncio.run(_run(task, peer, fake))
            peer_broken, peer_over = _prompts(fake)
    return {
        "adapter": "llama_index",
        "turns": turns,
        "pairs_broken": broken,
        "over_budget": over,
        "duplicated": sum((have - want).values()),
        "missing": sum((want - have).values()),
        "overhead_p50_ms": _percentile(overhead, 0.5),
        "overhead_p99_ms": _percentile(overhead, 0.99),
        "peer": f"llama_index.core.memory.Memory(token_limit={BUDGET})",
        "peer_p50_ms": _percentile(peer_overhead, 0.5),
        "peer_p99_ms": _percentile(peer_overhead, 0.99),
        "peer_pairs_broken": peer_broken,
        "peer_over_budget": peer_over,
    }


if __name__ == "__main__":
    import json

    print(json.dumps(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 20)))
