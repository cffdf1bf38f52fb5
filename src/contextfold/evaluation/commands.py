"""``contextfold eval``: the command line skin over ``load_conversations``, ``replay`` and
``summarize``; it parses, runs, and prints a table or one JSON object."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from contextfold.core.checks import positive_int
from contextfold.core.errors import InvalidInput
from contextfold.evaluation.budgets import parse_budgets
from contextfold.evaluation.inputs import load_conversations
from contextfold.evaluation.replay import replay, sample_turns
from contextfold.evaluation.results import summarize
from contextfold.strategies.presets import preset_names


def add_eval_command(sub: Any) -> None:
    """Register ``eval`` on the CLI's subparsers."""
    cmd = sub.add_parser(
        "eval", help="replay your conversations through presets x budgets and measure them"
    )
    cmd.add_argument(
        "path",
        metavar="PATH",
        help="one conversation as JSON (a list of messages or {'messages': [...]}), or JSONL "
        "(one {'messages': [...], 'questions'?: [...]} a line)",
    )
    cmd.add_argument("--presets", default="offline,keep-recent", help="comma-separated presets")
    cmd.add_argument(
        "--budgets",
        default="5%,10%,20%",
        help="comma-separated budgets: a share of each conversation's tokens (10%%) or tokens",
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
    cmd.add_argument("--json", action="store_true", help="print one JSON object of all results")
    cmd.set_defaults(command=run_eval)


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
    started = time.perf_counter()
    presets = _presets(args.presets)
    budgets = parse_budgets(args.budgets)
    conversations = load_conversations(args.path, limit=args.limit)
    steps = sum(len(sample_turns(len(c.messages), args.samples)) for c in conversations)
    results = []
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=args.json,
    ) as bar:
        task = bar.add_task("replaying", total=steps)
        for conversation in conversations:
            bar.update(task, description=f"replaying {conversation.id}")
            results.append(
                replay(
                    conversation,
                    presets,
                    budgets,
                    samples=args.samples,
                    encoding=args.encoding,
                    on_step=lambda: bar.advance(task),
                )
            )
    summary = summarize(results)
    summary.update(
        path=str(args.path),
        presets=presets,
        budgets=[b.label for b in budgets],
        samples=args.samples,
        encoding=args.encoding,
        seconds=round(time.perf_counter() - started, 3),
    )
    if args.json:
        sys.stdout.write(json.dumps(summary, ensure_ascii=False) + "\n")
        return
    out.print(_table(summary))
    out.print(Text(_notes(summary)))


def _table(summary: dict[str, Any]) -> Table:
    table = Table(
        title="contextfold eval", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True
    )
    for name in ("preset", "budget"):
        table.add_column(name, no_wrap=True)
    for name in ("prompt", "ratio", "folds", "model\ncalls/tok", "render ms\np50/p99", "retention"):
        table.add_column(name, justify="right", no_wrap=True)
    for row in summary["results"]:
        compression = row["compression"]
        kept = row["retention"]
        table.add_row(
            row["preset"],
            row["budget"],
            f"{row['tokens_after']:,}",
            "-" if compression is None else f"{compression:.1f}x",
            str(row["folds"]),
            f"{row['model_calls']}/{row['model_tokens']:,}",
            f"{row['render_p50_ms']:.2f}/{row['render_p99_ms']:.2f}",
            "-" if kept is None else f"{kept:.2f}",
        )
    return table


def _notes(summary: dict[str, Any]) -> str:
    """What the table's figures are, under it."""
    questions = summary["questions"]
    notes = (
        f"{summary['conversations']} conversations, {summary['messages']:,} messages, "
        f"{summary['tokens']:,} tokens before; {questions} questions with answer key words"
        + (f" (full-context recall {summary['full_recall']:.2f})" if questions else "")
        + f"; {summary['seconds']:.1f} s.\nprompt: tokens rendered at the end; model: calls and "
        "tokens spent; render: at the sampled turns; retention: answer recall in the prompt "
        "over the full conversation's."
    )
    stand_in = sum(row["stand_in_calls"] for row in summary["results"])
    if stand_in:
        notes += f" {stand_in} offline stand-in calls (no model paid)."
    return notes
