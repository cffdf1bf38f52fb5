"""End to end against a real OpenAI-compatible server on 127.0.0.1 (optional; CI skips it).

The other benchmarks need no model. This one runs the shipped demo session
(215 messages of a coding agent) through a model-backed preset with
``get_model("openai-compatible:<url>#<model>")``, so the adapter, the retry
loop, JSON mode and usage accounting meet a real server. Start one with a small
GGUF model file, for example with llama.cpp's Python server::

    pip install 'llama-cpp-python[server]'
    python -m llama_cpp.server --model "$CONTEXTFOLD_E2E_GGUF" \\
        --host 127.0.0.1 --port 8080 --n_ctx 8192 --model_alias qwen

(or llama.cpp's own ``llama-server -m "$CONTEXTFOLD_E2E_GGUF" --port 8080 -c 8192``;
vLLM and Ollama serve the same protocol), then::

    CONTEXTFOLD_E2E_BASE_URL=http://127.0.0.1:8080/v1 CONTEXTFOLD_E2E_MODEL=qwen \\
        python bench/e2e_openai_compatible.py [--quick] [--json]

Without both variables it prints why it skipped (``{"skipped": true}`` with
``--json``) and exits 0. The model-backed preset is ``rolling`` when one is
registered; otherwise the model-free ``offline`` preset runs, with a note.
Either way one JSON-mode call probes the server first; if that call fails the
run stops with exit code 1, since nothing else could be measured.

Figures: folds made, model calls (retries included), input and output tokens,
median call latency, prompt tokens before and after, the run's seconds.
``--quick`` compacts the first 80 messages instead of all.
"""

from __future__ import annotations

import importlib.resources
import json
import os
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from _common import parse_args, report

from contextfold import ContextfoldError, Memory, preset_names
from contextfold.core.messages import Message
from contextfold.llm import LLM, Completion, Usage, get_model

BUDGET = 6_000
QUICK_MESSAGES = 80
MODEL_PRESET = "rolling"
PROBE_SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


class Recorder:
    """An ``LLM`` that passes calls on and keeps each completion's usage."""

    def __init__(self, llm: LLM) -> None:
        self.llm = llm
        self.name = llm.name
        self.usages: list[Usage] = []

    def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        completion = self.llm.complete(messages, max_tokens=max_tokens, schema=schema)
        self.usages.append(completion.usage)
        return completion

    async def acomplete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        completion = await self.llm.acomplete(messages, max_tokens=max_tokens, schema=schema)
        self.usages.append(completion.usage)
        return completion


def demo_messages(limit: int | None) -> list[Message]:
    text = (
        importlib.resources.files("contextfold")
        .joinpath("data/demo_session.json")
        .read_text("utf-8")
    )
    messages: list[Message] = json.loads(text)
    return messages[:limit] if limit else messages


def model_preset() -> str:
    if MODEL_PRESET in preset_names():
        return MODEL_PRESET
    print(f"note: no {MODEL_PRESET!r} preset is registered; running 'offline' (no model calls)")
    return "offline"


def run(url: str, model: str, quick: bool) -> dict[str, Any]:
    llm = Recorder(get_model(f"openai-compatible:{url}#{model}", timeout=120.0))
    started = time.perf_counter()
    probe = llm.complete(
        [{"role": "user", "content": 'Reply with the JSON object {"ok": true}.'}],
        max_tokens=32,
        schema=PROBE_SCHEMA,
    )
    preset = model_preset()
    session = Memory().session("e2e")
    session.extend(demo_messages(QUICK_MESSAGES if quick else None))
    view = session.view("default", preset=preset, budget=BUDGET, llm=llm)
    compaction = view.compact()
    calls = llm.usages[1:]  # the probe apart
    latencies = [u.latency_s for u in calls]
    return {
        "model": model,
        "preset": preset,
        "probe_json_ok": probe.data is not None,
        "folds_made": len(compaction.folds),
        "failed_jobs": len(compaction.failed),
        "model_calls": sum(u.calls for u in calls),
        "input_tokens": sum(u.input_tokens for u in calls),
        "output_tokens": sum(u.output_tokens for u in calls),
        "latency_p50_s": statistics.median(latencies) if latencies else 0.0,
        "tokens_before": compaction.tokens_before,
        "tokens_after": compaction.tokens_after,
        "seconds": time.perf_counter() - started,
    }


def main() -> int:
    args = parse_args("End-to-end run against an OpenAI-compatible server on 127.0.0.1.")
    url = os.environ.get("CONTEXTFOLD_E2E_BASE_URL")
    model = os.environ.get("CONTEXTFOLD_E2E_MODEL")
    if not url or not model:
        print("skipped: set CONTEXTFOLD_E2E_BASE_URL and CONTEXTFOLD_E2E_MODEL")
        if args.json:
            print(json.dumps({"skipped": True}))
        return 0
    try:
        figures = run(url, model, args.quick)
    except ContextfoldError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    report(figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
