"""Framework adapters, each driven through its framework's own agent loop.

One row per adapter (``bench/_adapter_<framework>.py``): the OpenAI Agents SDK
session, the LangChain agent middleware, the LlamaIndex memory and the Pydantic
AI history processor, each running a scripted tool-using task over several
turns against a scripted model on 127.0.0.1, with a view whose budget forces
folds. Figures per adapter: ``turns`` run, ``pairs_broken`` (a prompt the
model received with a tool call and its result apart; goal 0),
``over_budget`` (prompts over the view's budget by an independent tiktoken
count; goal 0), ``duplicated`` and ``missing`` (the log against every message
the framework produced, once each; goal 0), and the time the adapter adds per
turn (``overhead_p50_ms``, ``overhead_p99_ms``) beside the framework's own
trimming or summarization where it has one (``peer``, ``peer_p50_ms``,
``peer_p99_ms``), measured in the same run.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from _common import ROOT, parse_args, report

sys.path.insert(0, str(ROOT / "tests"))

ADAPTERS = ("openai_agents", "langchain", "llama_index", "pydantic_ai")


def main() -> None:
    args = parse_args(__doc__ or "")
    turns = 6 if args.quick else 30
    figures: dict[str, Any] = {"turns_per_adapter": turns}
    for name in ADAPTERS:
        row = importlib.import_module(f"_adapter_{name}").measure(turns)
        for key, value in row.items():
            if key != "adapter":
                figures[f"{name}.{key}"] = value
    report(figures, args.json)


if __name__ == "__main__":
    main()
