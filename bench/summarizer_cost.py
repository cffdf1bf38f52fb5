"""What summarizing costs: summarizer input tokens and model calls per strategy.

A 500-turn session is built from the tau-bench airline runs, one after the
other (real user turns, tool calls and results). Each preset compacts it the way
a live agent would: after every turn, inline. The model is the offline stand-in,
wrapped to count what each call is sent with the session's o200k encoding. So
the figures are the prompt sizes a real model would be billed for, whatever it
answered.

``input_ratio`` is cumulative summarizer input tokens / session tokens: how
many times, in all, the history is read back to the summarizer, retries and
the engine's rescue (when a preset's own strategies leave the view over its
budget) included. Incremental strategies feed the previous summary plus only
the new messages, so their ratio stays near 1 (goal <= 1.2 for every model
preset). A preset whose calls came from more than one strategy also gets
``input_ratio_<preset>_<strategy>``, what each read (``rescue`` among them).
``final_view_tokens`` is the view after the last turn, unclipped (render cuts
it to the budget); ``seconds_total`` is the time all presets took.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from _common import conversations, parse_args, report

from contextfold import Memory, get_counter, get_preset
from contextfold.core.events import Event
from contextfold.core.messages import Message
from contextfold.core.tokens import TokenCounter
from contextfold.llm.base import Completion
from contextfold.llm.offline import OfflineModel

PRESETS = {
    "round_compressor": "round-compressor",
    "rolling": "rolling",
    "tool_calls": "tool-calls",
    "threshold": "threshold",
    "goal_batch": "goal-batch",
    "adr_0041": "adr-0041",
    "token_budget": "token-budget",
    "whole_history": "whole-history",
    "retrieve_facts": "retrieve-facts",
}
INCREMENTAL = (
    "round_compressor",
    "rolling",
    "adr_0041",
    "token_budget",
    "whole_history",
    "retrieve_facts",
)
BUDGET = 8000


@dataclass
class CountingModel:
    """The offline stand-in, counting each call's prompt tokens as a provider would."""

    counter: TokenCounter
    inner: OfflineModel = field(default_factory=OfflineModel)
    name: str = "offline"
    calls: int = 0
    input_tokens: int = 0
    strategy: str = ""
    by_strategy: dict[str, int] = field(default_factory=dict)

    def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        tokens = self.counter.messages(messages)
        self.calls += 1
        self.input_tokens += tokens
        self.by_strategy[self.strategy] = self.by_strategy.get(self.strategy, 0) + tokens
        return self.inner.complete(messages, max_tokens=max_tokens, schema=schema)

    async def acomplete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        return self.complete(messages, max_tokens=max_tokens, schema=schema)


def taubench_session(count: int) -> tuple[Message, list[list[Message]]]:
    """The first run's system prompt and ``count`` turns (a user message and what follows)."""
    system: Message | None = None
    out: list[list[Message]] = []
    for row in conversations("taubench_airline_dev"):
        for message in row["messages"]:
            if message["role"] == "system":
                system = system or message
                continue
            if message["role"] == "user":
                if len(out) == count:
                    assert system is not None
                    return system, out
                out.append([])
            if out:
                out[-1].append(message)
    raise SystemExit(f"the data holds only {len(out)} turns, {count} asked for")


def run(
    preset: str, session_turns: list[list[Message]], system: Message
) -> tuple[dict[str, float], dict[str, float]]:
    """The preset's figures, and what each tier of a pipeline of several read."""
    counter = get_counter("o200k_base")
    model = CountingModel(counter)
    session = Memory().session("bench")
    session.append(system)
    pipeline = get_preset(preset)
    view = session.view("default", pipeline=pipeline, budget=BUDGET, llm=model)

    def attribute(event: Event) -> None:
        if event.kind == "started":
            model.strategy = event.strategy

    view.on_event.append(attribute)
    started = time.perf_counter()
    for turn in session_turns:
        session.extend(turn)
        view.compact()
    session_tokens = counter.messages(session.history())
    figures = {
        "input_ratio": model.input_tokens / session_tokens,
        "calls_per_100_turns": 100 * model.calls / len(session_turns),
        "final_view_tokens": view.state().tokens,
        "seconds": time.perf_counter() - started,
        "session_tokens": session_tokens,
    }
    tiers = {name: tokens / session_tokens for name, tokens in model.by_strategy.items()}
    return figures, tiers if len(tiers) > 1 else {}


def main() -> None:
    args = parse_args(__doc__ or "")
    count = 100 if args.quick else 500
    system, session_turns = taubench_session(count)
    figures: dict[str, Any] = {"turns": len(session_turns)}
    for key, preset in PRESETS.items():
        result, tiers = run(preset, session_turns, system)
        figures["session_tokens"] = result["session_tokens"]
        figures[f"input_ratio_{key}"] = round(result["input_ratio"], 3)
        figures[f"calls_per_100_turns_{key}"] = round(result["calls_per_100_turns"], 1)
        figures[f"final_view_tokens_{key}"] = result["final_view_tokens"]
        figures[f"seconds_{key}"] = round(result["seconds"], 2)
        for name, ratio in tiers.items():
            figures[f"input_ratio_{key}_{name}"] = round(ratio, 3)
    figures["max_input_ratio_incremental"] = max(figures[f"input_ratio_{k}"] for k in INCREMENTAL)
    figures["max_input_ratio"] = max(figures[f"input_ratio_{k}"] for k in PRESETS)
    figures["seconds_total"] = round(sum(figures[f"seconds_{k}"] for k in PRESETS), 2)
    report(figures, args.json)


if __name__ == "__main__":
    main()
