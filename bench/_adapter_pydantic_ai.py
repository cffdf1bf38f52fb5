"""The Pydantic AI adapter over a run of turns, beside Pydantic AI's own trimming.

``measure(turns)`` runs an ``Agent`` (``OpenAIChatModel``, a ``read_file``
tool) for ``turns`` turns against a scripted Chat Completions server on
127.0.0.1, each run going on from the former's ``all_messages()``, with
``ContextfoldHistory`` on a SQLite session whose view folds (offline preset,
a runner on a thread, off the hot path as a service runs it). The server's requests are checked without trusting the
library: tool pairs broken and prompts over the budget by an independent
count; the log against the run's own history, message by message
(duplicated, missing). The overhead is the time the adapter takes per model
request (logging and rendering before it, logging the answer after it).

The peer is the keep-last-N history processor Pydantic AI's documentation
shows (``messages[-5:]``, under ``ProcessHistory``), timed the same way in the
same run over the same turns.

    python bench/_adapter_pydantic_ai.py [--quick] [--json]
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _common import ROOT, parse_args, report

sys.path.insert(0, str(ROOT / "tests"))

from fake_providers import FakeProvider
from prompt_checks import pairing_faults, prompt_tokens
from pydantic_ai import messages as pm
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.tools import RunContext
from pydantic_ai_agents import agent, run_turns, turn_replies

from contextfold import Memory
from contextfold.core.messages import Message, for_model
from contextfold.integrations.pydantic_ai import ContextfoldHistory, to_chat
from contextfold.runtime import ThreadRunner

BUDGET = 1200
KEEP = 5


class TimedHistory(ContextfoldHistory):
    """The adapter, each model request's share of its time recorded (ms)."""

    spent: list[float]

    def prompt(
        self, ctx: RunContext[Any], messages: Sequence[pm.ModelMessage]
    ) -> list[pm.ModelMessage]:
        started = time.perf_counter()
        prompt = super().prompt(ctx, messages)
        self.spent.append((time.perf_counter() - started) * 1000)
        return prompt

    def log_answer(self, ctx: RunContext[Any], response: pm.ModelResponse) -> None:
        started = time.perf_counter()
        super().log_answer(ctx, response)
        self.spent[-1] += (time.perf_counter() - started) * 1000


def keep_recent(messages: list[pm.ModelMessage]) -> list[pm.ModelMessage]:
    """Pydantic AI's documented example: only the last few messages."""
    return messages[-KEEP:] if len(messages) > KEEP else messages


def timed_peer(spent: list[float]) -> Callable[[list[pm.ModelMessage]], list[pm.ModelMessage]]:
    def processor(messages: list[pm.ModelMessage]) -> list[pm.ModelMessage]:
        started = time.perf_counter()
        kept = keep_recent(messages)
        spent.append((time.perf_counter() - started) * 1000)
        return kept

    return processor


def measure(turns: int) -> dict[str, Any]:
    """Figures of ``turns`` turns through the adapter and through the peer."""
    with tempfile.TemporaryDirectory() as folder:
        memory = Memory(Path(folder) / "bench.db")
        session = memory.session("bench")
        view = session.view("default", preset="offline", budget=BUDGET)
        runner = ThreadRunner(workers=1)
        runner.watch(view)
        history = TimedHistory(session)
        history.spent = []
        with FakeProvider("openai") as fake:
            for n in range(1, turns + 1):
                fake.add(*turn_replies(n))
            kept = run_turns(agent(fake.url, [history]), turns)
        runner.stop()
        logged = session.history()
        memory.close()
    sent = [request.body["messages"] for request in fake.requests]
    duplicated, missing = _log_faults(logged, to_chat(kept))

    peer_spent: list[float] = []
    with FakeProvider("openai") as peer_fake:
        for n in range(1, turns + 1):
            peer_fake.add(*turn_replies(n))
        run_turns(agent(peer_fake.url, [ProcessHistory(timed_peer(peer_spent))]), turns)

    return {
        "adapter": "pydantic-ai",
        "turns": turns,
        "pairs_broken": sum(1 for prompt in sent if pairing_faults(prompt)),
        "over_budget": sum(1 for prompt in sent if prompt_tokens(prompt) > BUDGET),
        "duplicated": duplicated,
        "missing": missing,
        "overhead_p50_ms": _percentile(history.spent, 50),
        "overhead_p99_ms": _percentile(history.spent, 99),
        "peer": f"keep-last-{KEEP} history processor (Pydantic AI docs)",
        "peer_p50_ms": _percentile(peer_spent, 50),
        "peer_p99_ms": _percentile(peer_spent, 99),
    }


def _log_faults(logged: Sequence[Message], conversation: Sequence[Message]) -> tuple[int, int]:
    """Messages the log holds more often than the conversation, and fewer."""
    have = Counter(json.dumps(for_model(m), sort_keys=True) for m in logged)
    want = Counter(json.dumps(for_model(m), sort_keys=True) for m in conversation)
    return sum((have - want).values()), sum((want - have).values())


def _percentile(values: Sequence[float], share: int) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[share - 1]


if __name__ == "__main__":
    args = parse_args("The Pydantic AI adapter's figures beside keep-last-N trimming.")
    report(measure(10 if args.quick else 50), args.json)
