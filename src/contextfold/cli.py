"""The ``contextfold`` command: parse, call the library, print.

::

    contextfold compact conversation.json --budget 8000 [--preset offline] [--json]
    contextfold compact data.jsonl --index 3 --budget 4000 --out prompt.json
    contextfold demo
    contextfold presets
    contextfold eval conversations.jsonl [--presets offline,keep-recent] [--budgets 5%,10%,20%] [--json]
        [--suggest] [--report DIR] [--model SPEC [--judge SPEC --questions N]]
    contextfold serve [--host 127.0.0.1] [--port 8765] [--database URL] [--no-auth] [--demo]
    contextfold keys create --tenant T [--label L] [--database URL] | keys list | keys revoke ID
    contextfold mcp [--store URL] [--tenant T] [--http [--host 127.0.0.1] [--port 8766]]
    contextfold worker --database URL --broker redis://...
    contextfold --version

Every command parses on the core install; one whose extra is missing (``serve``,
``worker``, ``mcp``, ``eval --report``) says which to install (``MissingExtra``). Library
errors (``ContextfoldError``) become a one-line message and exit code 2 in
``main``, the one place where they are caught. ``compact`` exits 3 when it
had to degrade (a job's model failed; the prompt printed still fits).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.resources
import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from contextfold.core.errors import ContextfoldError
from contextfold.core.messages import Message, text_of
from contextfold.evaluation.commands import add_eval_command
from contextfold.llm.budget import JobLimits
from contextfold.memory.one_shot import (
    CompactResult,
    ProgressCallback,
    compact_file,
    compact_messages,
    write_prompt,
)
from contextfold.options import positive_int, positive_seconds
from contextfold.redact import redact
from contextfold.server.commands import add_commands
from contextfold.server.mcp_command import add_mcp_command
from contextfold.strategies.presets import DEFAULT_PRESET, describe_presets
from contextfold.workers.commands import add_worker_command

DEMO_RESOURCE = "data/demo_session.json"
DEMO_BUDGET = 12_000
EXIT_ERROR = 2
EXIT_DEGRADED = 3
CLI_TIMEOUT_S = 120.0
_ABRIDGE = 200


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse has printed its message already
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    out = Console(highlight=False)
    err = Console(stderr=True, highlight=False)
    try:
        code: int | None = args.command(args, out, err)
    except ContextfoldError as exc:
        err.print(f"[bold red]contextfold: error:[/] {escape(redact(str(exc)))}", soft_wrap=True)
        return EXIT_ERROR
    return code or 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="contextfold", description="Keep an LLM conversation inside a token budget."
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"contextfold {importlib.metadata.version('contextfold')}",
    )
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    compact = sub.add_parser("compact", help="fold a conversation file until it fits a budget")
    compact.add_argument("file", metavar="FILE", help="JSON list of messages, or JSONL")
    compact.add_argument("--budget", type=positive_int, required=True, help="target prompt tokens")
    compact.add_argument(
        "--preset",
        default=DEFAULT_PRESET,
        help=f"preset name (see 'presets'; default {DEFAULT_PRESET})",
    )
    compact.add_argument("--encoding", default="o200k_base", help="o200k_base, cl100k_base, approx")
    compact.add_argument("--index", type=int, help="which JSONL line (conversation) to take")
    compact.add_argument(
        "--model",
        help="summarizer: openai:MODEL, anthropic:MODEL, openai-compatible:URL#MODEL "
        "(default: the offline stand-in)",
    )
    compact.add_argument(
        "--timeout",
        type=positive_seconds,
        default=CLI_TIMEOUT_S,
        metavar="SECONDS",
        help=f"the most one compaction job may take, its model calls included "
        f"(default {CLI_TIMEOUT_S:g})",
    )
    compact.add_argument("--out", type=Path, help="write the rendered prompt (JSON list) here")
    compact.add_argument("--json", action="store_true", help="print one JSON object")
    compact.set_defaults(command=_compact)

    demo = sub.add_parser("demo", help="compact the coding-agent session shipped as a demo")
    demo.set_defaults(command=_demo)

    presets = sub.add_parser(
        "presets", help="list the presets: what each does and whether it needs a model"
    )
    presets.add_argument("--json", action="store_true", help="print one JSON list")
    presets.set_defaults(command=_presets)
    add_commands(sub)
    add_mcp_command(sub)
    add_worker_command(sub)
    add_eval_command(sub)
    return parser


def _compact(args: argparse.Namespace, out: Console, err: Console) -> int:
    with _progress(err) as progress:
        result = compact_file(
            args.file,
            budget=args.budget,
            preset=args.preset,
            encoding=args.encoding,
            index=args.index,
            model=args.model,
            progress=progress,
            limits=JobLimits(deadline_s=args.timeout),
        )
    code = 0
    if result.degraded:
        code = EXIT_DEGRADED
        for strategy, reason in zip(result.failed, result.reasons, strict=True):
            err.print(Text(f"contextfold: degraded: {strategy} failed: {reason}"), soft_wrap=True)
    if result.stand_in:
        err.print(
            "note: no --model given; model strategies ran on the offline stand-in "
            "(extractive answers, usage model 'offline')"
        )
    elif result.degraded:
        err.print(Text(redact(_failed_with_model(result))), soft_wrap=True)
    if args.out is not None:
        write_prompt(args.out, result.messages)
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict(), ensure_ascii=False) + "\n")
        return code
    for i, message in enumerate(result.messages):
        out.print(Text(f"--- {i} {message['role']}", style="bold cyan"))
        out.print(Text(text_of(message)))
    out.print(_report_table(result))
    return code


def _demo(args: argparse.Namespace, out: Console, err: Console) -> None:
    text = importlib.resources.files("contextfold").joinpath(DEMO_RESOURCE).read_text("utf-8")
    messages = json.loads(text)
    with _progress(err) as progress:
        result = compact_messages(
            messages, budget=DEMO_BUDGET, preset=DEFAULT_PRESET, progress=progress
        )
    out.print(
        f"Demo: a coding-agent session of {result.messages_before} messages "
        f"({result.tokens_before:,} tokens), compacted to a budget of {DEMO_BUDGET:,} tokens."
    )
    out.print(_report_table(result))
    out.print(Text("Rendered prompt (abridged)", style="bold"))
    for i, message in enumerate(result.messages):
        line = Text(f"{i:>4} {message['role']:<9} ", style="cyan")
        line.append(_abridge(message))  # Text, not markup: prompts are full of [brackets]
        line.truncate(max(out.width, 40), overflow="ellipsis")
        out.print(line, no_wrap=True)


def _presets(args: argparse.Namespace, out: Console, err: Console) -> None:
    presets = describe_presets()
    if args.json:
        rows = [{**asdict(p), "default": p.name == DEFAULT_PRESET} for p in presets]
        sys.stdout.write(json.dumps(rows, ensure_ascii=False) + "\n")
        return
    table = Table(
        title="Presets",
        caption="model: its strategies call one (--model; without it, the offline stand-in)",
    )
    table.add_column("name", no_wrap=True)
    table.add_column("model", no_wrap=True)
    table.add_column("description")
    for p in presets:
        name = f"{p.name} (default)" if p.name == DEFAULT_PRESET else p.name
        table.add_row(name, "yes" if p.model else "no", Text(p.description))
    out.print(table)


def _failed_with_model(result: CompactResult) -> str:
    """What became of the jobs that failed with the model given."""
    jobs = len(result.failed)
    # A job's reason lists each attempt's ("summary rejected: a; b"): each is said once.
    attempts = (
        part
        for reason in result.reasons
        for part in reason.removeprefix("summary rejected: ").split("; ")
    )
    reasons = "; ".join(dict.fromkeys(attempts))
    then = (
        "their ranges were folded by the offline rescue"
        if result.rescued
        else "the view kept its previous folds"
    )
    return (
        f"note: {jobs} job{'s' if jobs != 1 else ''} failed with {result.model} ({reasons}); {then}"
    )


def _report_table(result: CompactResult) -> Table:
    table = Table(title=f"Compaction with preset {result.preset!r}")
    table.add_column("", style="bold")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    table.add_row("messages", f"{result.messages_before:,}", f"{result.messages_after:,}")
    table.add_row("tokens", f"{result.tokens_before:,}", f"{result.tokens_after:,}")
    table.add_row("budget", "", f"{result.budget:,}")
    table.add_row("model", "", result.model or ("offline stand-in" if result.stand_in else "none"))
    table.add_row("folds", "", f"{len(result.folds)} ({result.folds_made} made)")
    kinds: dict[str, int] = {}
    for fold in result.folds:
        kinds[fold.kind] = kinds.get(fold.kind, 0) + 1
    for kind, count in sorted(kinds.items()):
        table.add_row(f"  {kind}", "", str(count))
    if result.degraded:
        table.add_row("failed jobs", "", ", ".join(result.failed))
    table.add_row("left out by the cut", "", str(result.omitted))
    table.add_row("clipped", "", str(len(result.clipped)))
    table.add_row("time", "", f"{result.seconds:.2f} s")
    return table


def _abridge(message: Message) -> str:
    text = " ".join(text_of(message).split())
    return text if len(text) <= _ABRIDGE else text[: _ABRIDGE - 1] + "…"


@contextmanager
def _progress(err: Console) -> Iterator[ProgressCallback | None]:
    """A progress callback drawing a transient bar on a terminal, else doing nothing."""
    if not err.is_terminal:
        yield None
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as bar:
        tasks: dict[str, TaskID] = {}

        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done, total=total)

        yield update


if __name__ == "__main__":
    sys.exit(main())
