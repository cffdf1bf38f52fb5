"""Agents through the proxy: Claude Code and Codex CLI, unmodified, on a scripted task.

Per client (``tests/client_rig.py``): the client's scripted upstream on
127.0.0.1 (Anthropic Messages for Claude Code, OpenAI Responses for Codex,
both streamed) asks it for ``--steps`` shell commands, each printing
``--lines`` lines, then answers in text; the client runs them through the
contextfold service (API keys on, the background runner compacting), whose
proxy views get a budget of ``--room`` tokens over what the client's system
prompt and first message take, so the growing task must be compacted. Each
client is run ``--turns`` times on a new prompt, each run resuming the
conversation (``claude -p --continue``, ``codex exec resume --last``; an
in-process agent goes on from the conversation it kept).
``make agent-clis`` installs the CLIs. Three more rows run the same task with a
minimal agent on each official SDK (``anthropic_sdk`` on the Messages API,
``openai_sdk`` on the Responses API, ``openai_chat`` on Chat Completions, all
streamed; ``tests/sdk_agents.py``), and two with a framework's own agent loop
(``agents_sdk``: the OpenAI Agents SDK with its defaults, the Responses API;
``langchain``: ``create_agent`` over ``ChatOpenAI``; ``tests/framework_agents.py``).

Figures per client, each goal 0 but ``calls_made`` and ``folds_made``:
``calls_made`` (calls the client made to the proxy, the service's count),
``calls_failed`` (answered with another status than 200, plus 1 for a run that
did not finish), ``prompts_over_budget`` (forwarded prompts larger than the
view's budget, counted in contextfold's tokens on the prompt read back),
``tool_pairs_broken`` (a forwarded tool call without its result, or result
without its call), ``log_messages_missing_or_duplicated`` (the session's log,
read through the REST API, against the task's conversation logged once, in
order); ``folds_made`` (superseded ones included) shows compaction happened,
``largest_prompt_tokens`` and ``budget`` how close it came.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, parse_args, report

sys.path.insert(0, str(ROOT / "tests"))

from agent_clis import BIN, CLIENTS, PROGRAM
from client_rig import AGENTS, ROOM, through_proxy


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=None, help="tool calls in the task")
    parser.add_argument("--lines", type=int, default=200, help="lines each command prints")
    parser.add_argument(
        "--room", type=int, default=ROOM, help="budget tokens beyond the system prompt"
    )
    parser.add_argument(
        "--turns", type=int, default=2, help="user prompts per client, each run resuming the last"
    )


def main() -> None:
    args = parse_args(__doc__ or "", options)
    steps = args.steps or (6 if args.quick else 16)
    missing = [str(BIN / PROGRAM[c]) for c in CLIENTS if not (BIN / PROGRAM[c]).exists()]
    if missing:
        raise SystemExit(f"missing {', '.join(missing)}: run make agent-clis")
    figures: dict[str, int | float] = {
        "steps": steps,
        "lines_per_step": args.lines,
        "turns": args.turns,
    }
    for client in AGENTS:
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"bench-{client}-") as folder:
            outcome = through_proxy(
                client,
                Path(folder) / "work",
                steps=steps,
                lines=args.lines,
                room=args.room,
                turns=args.turns,
            )
        seconds = time.monotonic() - started
        codes = [r.code for r in outcome.runs]
        print(f"{client}: {args.turns} run(s), exits {codes}, {seconds:.1f} s", flush=True)
        for problem in outcome.problems():
            print(f"  {problem}")
        figures.update({f"{client}_{k}": v for k, v in outcome.figures().items()})
        figures[f"{client}_seconds"] = round(seconds, 1)
    report(figures, args.json)


if __name__ == "__main__":
    main()
