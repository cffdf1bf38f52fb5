"""``contextfold eval``: the command line skin over ``load_conversations``, ``evaluate`` and
``write_report``; it parses, runs, and prints a table or one JSON object.

The progress bar is rich's (rich is a core dependency, and ``compact`` draws
its bar with it), drawn on stderr only when stderr is a terminal, unless
``--progress`` or ``--no-progress`` says otherwise, and never with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from contextfold.core.errors import InvalidInput
from contextfold.evaluation.budgets import parse_budgets
from contextfold.evaluation.inputs import load_conversations
from contextfold.evaluation.plots import require_matplotlib
from contextfold.evaluation.report import (
    agreement_notes,
    column_notes,
    cost_notes,
    probe_notes,
    probe_rows,
    table_rows,
    write_report,
)
from contextfold.evaluation.run import EvalSettings, evaluate, total_steps
from contextfold.options import positive_int, positive_seconds
from contextfold.strategies.presets import preset_names


def add_eval_command(sub: Any) -> None:
    """Register ``eval`` on the CLI's subparsers."""
    cmd = sub.add_parser(
        "eval", help="replay your conversations through presets x budgets and measure them"
    )
    cmd.add_argument(
        "path",
        metavar="PATH",
        help="one conversation as JSON (a list of messages or {'messages': [...]}), JSONL "
        "(one {'messages': [...], 'questions'?: [...]} a line), or a ChatGPT export "
        "(conversations.json or the export's .zip)",
    )
    cmd.add_argument("--presets", default="offline,keep-recent", help="comma-separated presets")
    cmd.add_argument(
        "--budgets",
        default="5%,10%,20%",
        help="comma-separated budgets: a share of each conversation's tokens (10%%) or tokens; "
        "a conversation a budget cannot hold (its system prompt plus last user message) is "
        "skipped at that budget and counted",
    )
    cmd.add_argument(
        "--samples",
        type=positive_int,
        default=10,
        metavar="N",
        help="turns at which each prompt is compacted and rendered (default 10, the last "
        "the end of the conversation)",
    )
    cmd.add_argument(
        "--limit", type=positive_int, metavar="N", help="only the first N conversations"
    )
    cmd.add_argument("--encoding", default="o200k_base", help="o200k_base, cl100k_base, approx")
    cmd.add_argument(
        "--model",
        metavar="SPEC",
        help="the model the model strategies call, and that answers with --judge "
        "(openai:gpt-4o-mini, anthropic:MODEL, openai-compatible:URL#MODEL; default: the "
        "offline stand-in)",
    )
    cmd.add_argument(
        "--judge",
        metavar="SPEC",
        help="grade --model's answers to the questions (LoCoMo categories 1-4) against the "
        "gold answers with this model: QA accuracy per arm and for the full context",
    )
    cmd.add_argument(
        "--questions",
        type=positive_int,
        default=20,
        metavar="N",
        help="with --judge, grade at most N questions a conversation (default 20); each costs "
        "2 calls per arm plus 2 for the full context",
    )
    cmd.add_argument(
        "--probes",
        type=_count,
        metavar="N",
        help="at most N probes a conversation (recall, artifact, continuation, decision "
        "questions made from the folded part; agent runs too): graded offline by exact match "
        "in each prompt, or with --model and --judge asked and judged (default 0: off; with "
        "--judge, 8 on a conversation without questions); adds keep-recent as the baseline",
    )
    cmd.add_argument(
        "--timeout",
        type=positive_seconds,
        metavar="SECONDS",
        help="seconds an answer or a grade may take (default: 60 plus the prompt's tokens at "
        "50 a second); a call that fails is counted, never fatal",
    )
    cmd.add_argument(
        "--results",
        type=Path,
        metavar="FILE",
        help="write every replay, answer and grade to FILE (JSONL) as it comes; run again with "
        "the same FILE to resume: what is done is read back, not asked again",
    )
    cmd.add_argument(
        "--hand-grades",
        type=Path,
        metavar="FILE",
        help='JSONL of {"id": AUDIT_ID, "correct": true|false}: the judge\'s agreement '
        "with your own grades on them",
    )
    cmd.add_argument(
        "--suggest",
        action="store_true",
        help="recommend a preset and a budget, and say why; needs questions with gold answers "
        "(or --judge) to measure what each preset keeps, and refuses without them",
    )
    cmd.add_argument(
        "--report",
        type=Path,
        metavar="DIR",
        help="write results.json, retention.png, tokens.png and a self-contained report.html "
        "(needs pip install 'contextfold[eval]')",
    )
    cmd.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        help="draw a progress bar on stderr (default: when stderr is a terminal; never with "
        "--json)",
    )
    cmd.add_argument("--json", action="store_true", help="print one JSON object of all results")
    cmd.set_defaults(command=run_eval)


def _count(text: str) -> int:
    """A whole number, 0 or more (an argparse ``type``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _presets(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    known = preset_names()
    for name in names:
        if name not in known:
            raise InvalidInput(
                f"unknown preset {name!r}; known: {', '.join(known)}", field="presets"
            )
    if not names:
        raise InvalidInput("no presets given", field="presets")
    if len(set(names)) != len(names):
        raise InvalidInput(f"a preset is given twice in {text!r}", field="presets")
    return names


def run_eval(args: argparse.Namespace, out: Console, err: Console) -> None:
    settings = EvalSettings(
        presets=_presets(args.presets),
        budgets=parse_budgets(args.budgets),
        samples=args.samples,
        encoding=args.encoding,
        model=args.model,
        judge=args.judge,
        questions=args.questions,
        suggest=args.suggest,
        report=args.report is not None,
        probes=args.probes,
        timeout=args.timeout,
        results=args.results,
        hand_grades=args.hand_grades,
    )
    if args.report is not None:
        require_matplotlib()
    inputs = load_conversations(args.path, limit=args.limit)
    shown = not args.json and (err.is_terminal if args.progress is None else args.progress)
    bar_console = (
        err if err.is_terminal or not shown else Console(file=err.file, force_terminal=True)
    )
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=bar_console,
        transient=True,
        disable=not shown,
    ) as bar:
        task = bar.add_task("replaying", total=total_steps(inputs, settings))
        summary = evaluate(inputs, settings, path=str(args.path), on_step=lambda: bar.advance(task))
    if args.report is not None:
        written = write_report(args.report, summary)
        if not args.json:
            err.print(Text(f"report: {', '.join(str(p) for p in written)}"))
    if args.json:
        sys.stdout.write(json.dumps(summary, ensure_ascii=False) + "\n")
        return
    out.print(_table(summary))
    out.print(Text(_notes(summary)))
    if summary.get("probes"):
        out.print(_table(summary, probe_rows(summary), "probes"))
        out.print(Text(probe_notes(summary)))
    if agreement_notes(summary):
        out.print(Text(agreement_notes(summary)))
    if "suggestion" in summary:
        out.print(Text(f"suggestion: {summary['suggestion']['reason']}"))


def _table(
    summary: dict[str, Any],
    cells: tuple[list[str], list[list[str]]] | None = None,
    title: str = "contextfold eval",
) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    header, rows = table_rows(summary) if cells is None else cells
    labels = 2 if cells is None else 1
    for i, name in enumerate(header):
        table.add_column(name, justify="left" if i < labels else "right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    return table


def _notes(summary: dict[str, Any]) -> str:
    """What the table's figures rest on, under it."""
    questions = summary["questions"]
    notes = (
        f"{summary['conversations']} conversations ({summary['format']}), "
        f"{summary['messages']:,} messages, {summary['tokens']:,} tokens before; {questions} "
        "questions with answer key words"
        + (f" (full-context recall {summary['full_recall']:.2f})" if questions else "")
        + f"; {summary['seconds']:.1f} s."
    )
    if summary["skipped"]:
        left_out = summary["skipped"].items()
        notes += " Left out of the input: " + ", ".join(f"{n} {why}" for why, n in left_out) + "."
    notes += "\n" + column_notes(summary)
    stand_in = sum(row["stand_in_calls"] for row in summary["results"])
    if stand_in:
        notes += f" {stand_in} offline stand-in calls (no model paid)."
    if summary.get("judge"):
        notes += (
            f"\nQA: {summary['qa_questions']} questions graded (at most "
            f"{summary['questions_per_conversation']} a conversation), answers by "
            f"{summary['model']} ({summary['qa_model_calls']} calls, "
            f"{summary['qa_model_tokens']:,} tokens), grades by {summary['judge']} "
            f"({summary['judge_calls']} calls, {summary['judge_tokens']:,} tokens)"
            + (
                f", {summary['unclear_verdicts']} unclear verdicts"
                if summary["unclear_verdicts"]
                else ""
            )
            + "."
        )
        if summary.get("full") and not summary.get("probes"):
            notes += " " + cost_notes(summary)
    return notes
