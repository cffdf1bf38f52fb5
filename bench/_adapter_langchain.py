"""The LangChain adapter's figures: ``measure(turns)`` runs LangChain's own agent loop
(``create_agent`` over ``ChatOpenAI``) against a scripted OpenAI server on 127.0.0.1, once with
``ContextfoldMiddleware`` and once with LangChain's ``SummarizationMiddleware``, in one run.

Each turn asks the agent to read three notes (three tool calls with long
results, then an answer: four model calls a turn). The scripted model
(``tests/langchain_scripted.py``) answers from the prompt it is sent, so it
plays the same turns whatever either middleware makes of the history.

- ``pairs_broken``, ``over_budget``: prompts the server got with a tool call
  apart from its results, or over the budget by an independent count
  (``contextfold.testing.adapter_contract_checks``: tiktoken's own encoding);
- ``duplicated``, ``missing``: messages of the graph's final state logged more
  than once, or not at all;
- ``overhead_p50_ms``/``p99``: what the middleware adds to a model call: the
  time between an outer and an inner stopwatch middleware less the model call
  (recording, compacting inline with the offline preset, rendering, mapping);
- ``peer_p50_ms``/``p99``: ``SummarizationMiddleware``'s ``before_model`` hook
  per model call, its summarizer (``ChatOpenAI``) on the same scripted server.

``python bench/_adapter_langchain.py [turns]`` prints the figures as JSON.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from fake_providers import FakeProvider  # noqa: E402
from langchain.agents import create_agent  # noqa: E402
from langchain.agents.middleware import (  # noqa: E402
    AgentMiddleware,
    ModelRequest,
    SummarizationMiddleware,
)
from langchain_core.messages import HumanMessage  # noqa: E402
from langchain_scripted import agent_tools, chat_model, scripted_reply, task_text  # noqa: E402

from contextfold import Memory  # noqa: E402
from contextfold.integrations.langchain import ContextfoldMiddleware, langchain_to_chat  # noqa: E402
from contextfold.memory.matching import digest  # noqa: E402
from contextfold.testing.adapter_contract_checks import prompt_tokens, split_pairs  # noqa: E402

BUDGET = 2000
NOTES = 3
SYSTEM = "You read every note of a task, one at a time, then say you are done."


class _Stopwatch(AgentMiddleware):  # type: ignore[type-arg]
    """Notes when each model call enters and leaves this layer of the middleware stack."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self._name = name
        self.spans: list[float] = []

    @property
    def name(self) -> str:
        return self._name

    def wrap_model_call(self, request: ModelRequest[Any], handler: Callable[..., Any]) -> Any:
        started = time.perf_counter()
        try:
            return handler(request)
        finally:
            self.spans.append(time.perf_counter() - started)


class _TimedSummarization(SummarizationMiddleware):
    """LangChain's summarization, its ``before_model`` hook timed."""

    spans: list[float]

    def before_model(self, state: Any, runtime: Any) -> Any:
        started = time.perf_counter()
        try:
            return super().before_model(state, runtime)
        finally:
            self.spans.append(time.perf_counter() - started)


def _run(agent: Any, turns: int, config: dict[str, Any]) -> list[Any]:
    state: dict[str, Any] = {"messages": []}
    for turn in range(1, turns + 1):
        state["messages"].append(HumanMessage(task_text(turn, NOTES)))
        state = agent.invoke(state, config)
        if state["messages"][-1].content != f"done with task {turn}":
            raise RuntimeError(f"turn {turn} ended with {state['messages'][-1].content!r}")
    return list(state["messages"])


def _ms(spans: list[float], share: float) -> float:
    ordered = sorted(spans)
    return round(1000 * ordered[min(len(ordered) - 1, int(share * len(ordered)))], 3)


def measure(turns: int) -> dict[str, Any]:
    """Run ``turns`` turns through each middleware and return the figures."""
    with FakeProvider("openai") as server, tempfile.TemporaryDirectory() as folder:
        server.answer("POST", "/v1/chat/completions", scripted_reply)
        memory = Memory(Path(folder) / "bench.db")
        outer, inner = _Stopwatch("outer"), _Stopwatch("inner")
        ours = ContextfoldMiddleware(
            memory=memory, settings={"preset": "offline", "budget": BUDGET}
        )
        agent = create_agent(
            chat_model(server.url),
            tools=agent_tools(),
            system_prompt=SYSTEM,
            middleware=[outer, ours, inner],
        )
        state = _run(agent, turns, {"configurable": {"thread_id": "bench"}, "recursion_limit": 99})
        prompts = [r.body["messages"] for r in server.requests if r.body.get("tools")]
        logged = Counter(digest(m) for m in memory.session("bench").history())
        memory.close()
        wanted = Counter(digest(langchain_to_chat(m)) for m in state)
        wanted[digest({"role": "system", "content": SYSTEM})] += 1
        overhead = [o - i for o, i in zip(outer.spans, inner.spans, strict=True)]

        server.requests.clear()
        peer = _TimedSummarization(
            model=chat_model(server.url),
            trigger=("tokens", BUDGET),
            keep=("tokens", int(0.7 * BUDGET)),
        )
        peer.spans = []
        peer_agent = create_agent(
            chat_model(server.url), tools=agent_tools(), system_prompt=SYSTEM, middleware=[peer]
        )
        _run(peer_agent, turns, {"recursion_limit": 99})
    return {
        "adapter": "langchain",
        "turns": turns,
        "pairs_broken": sum(bool(split_pairs(p, open_tail=False)) for p in prompts),
        "over_budget": sum(prompt_tokens(p) > BUDGET for p in prompts),
        "duplicated": sum((logged - wanted).values()),
        "missing": sum((wanted - logged).values()),
        "overhead_p50_ms": round(1000 * statistics.median(overhead), 3),
        "overhead_p99_ms": _ms(overhead, 0.99),
        "peer": "SummarizationMiddleware",
        "peer_p50_ms": round(1000 * statistics.median(peer.spans), 3),
        "peer_p99_ms": _ms(peer.spans, 0.99),
    }


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 20), indent=2))
