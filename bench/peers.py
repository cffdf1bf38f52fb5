"""contextfold against its peers, in one run, with one scripted model and one token counter.

Rows: contextfold (``chat``, on the scripted model; ``offline``, no model),
LangChain's ``SummarizationMiddleware`` and ``trim_messages``, langmem's
``summarize_messages``, LlamaIndex's ``ChatSummaryMemoryBuffer`` and ``Memory``
(with a fact-extraction block on the scripted model). How each is driven is in
``bench/_peers_drivers.py`` and docs/peers.md. Figures per row:

- per-turn cost: one append and the next prompt, p50 over turns, with 1k and
  10k messages already in the history (budget 8,000), an instant model;
  contextfold folds on a ThreadRunner; again with the library's own default
  counter where it has one that needs no download (LangChain's and langmem's
  ``count_tokens_approximately``);
- a slow model (2 s; ``--quick`` 0.2 s): a LoCoMo conversation replayed one
  message a turn at a budget of 2,000 tokens; the turn on which the model is
  first called, that turn's wall time, and the p50 of the other turns;
- the shared agent runs (tau-bench airline dev, OpenHands) replayed, a prompt
  before each assistant message, at the system prompt plus half of the rest of
  each run's tokens, and at 2,000 (contextfold refuses a budget below the
  system prompt plus the latest user message with ``BudgetError``; counted):
  prompts that split a tool unit, prompts without the system prompt, prompts
  over the budget (share and largest overshoot, counted with one counter);
- answer-recall retention on LoCoMo dev at 10% of each conversation's tokens,
  of the final prompt after a replay, and of one prompt over the whole
  conversation (``contextfold.evaluation.retention``); every library gets the
  messages without their ``meta`` (the same text for all).

A second table repeats the agent-run checks for the libraries that keep the
system prompt beside their memory, with it first in the history instead.

Needs ``pip install 'contextfold[peers]'``; without it, says so and exits 0.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from _common import conversations, parse_args, report

from contextfold import BudgetError, get_counter
from contextfold.core.messages import Message
from contextfold.core.units import tool_unit_faults
from contextfold.evaluation.retention import answer_keys, prompt_words, recall

PEERS = ("langchain", "langchain-core", "langmem", "llama-index-core")
CATEGORIES = frozenset({1, 2, 3, 4})
SYSTEM = "You are a helpful assistant. Answer from the conversation."
TURN_BUDGET = 8000
SLOW_BUDGET = 2000
TIGHT_BUDGET = 2000
NA_TRIM = "n/a: trim_messages never summarizes"
NA_OFFLINE = "n/a: offline calls no model"


def missing_peers() -> list[str]:
    missing = []
    for name in PEERS:
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    return missing


def p50_ms(seconds: Sequence[float]) -> float:
    return statistics.median(seconds) * 1000


def cycled(messages: Sequence[Message], n: int) -> list[Message]:
    return list(itertools.islice(itertools.cycle(messages), n))


def turn_cost(make: Callable[..., Any], chat: list[Message], size: int, turns: int) -> float:
    """p50 of append + prompt with ``size`` messages in the history (ms)."""
    driver = make(SYSTEM, TURN_BUDGET, background=True)
    history = cycled(chat, size + turns)
    try:
        driver.prefill(history[:size])
        driver.prompt()
        driver.settle()
        seconds = []
        for message in history[size:]:
            start = time.perf_counter()
            driver.append(message)
            driver.prompt()
            seconds.append(time.perf_counter() - start)
        return p50_ms(seconds)
    finally:
        driver.close()


def slow_turns(make: Callable[..., Any], chat: list[Message], after: int) -> dict[str, Any]:
    """Replay ``chat`` a message a turn; stop ``after`` turns past the model's first call."""
    driver = make(SYSTEM, SLOW_BUDGET, background=True)
    spans: list[tuple[float, float]] = []
    try:
        for message in chat:
            start = time.perf_counter()
            driver.append(message)
            driver.prompt()
            spans.append((start, time.perf_counter()))
            starts = driver.summarizer.starts
            if starts and len(spans) - first_turn(spans, starts[0]) > after:
                break
    finally:
        driver.close()
    walls = [end - start for start, end in spans]
    out: dict[str, Any] = {"turn_max_s": max(walls)}
    if not driver.summarizer.starts:
        out.update(fire_turn="none", fire_turn_s="none", other_p50_ms=p50_ms(walls))
        return out
    fired = first_turn(spans, driver.summarizer.starts[0])
    out.update(
        fire_turn=fired + 1,
        fire_turn_s=walls[fired],
        other_p50_ms=p50_ms(walls[:fired] + walls[fired + 1 :]),
    )
    return out


def first_turn(spans: list[tuple[float, float]], at: float) -> int:
    """The turn running at ``at``, or the last one before it (a call made in the background)."""
    return max(i for i, (start, _) in enumerate(spans) if start <= at)


def agent_checks(
    make: Callable[..., Any], runs: list[dict[str, Any]], counter: Any
) -> dict[str, Any]:
    """Replay each run at half its tokens and at ``TIGHT_BUDGET``; count faulty prompts."""
    out: dict[str, Any] = {}
    for label in ("half", "tight"):
        prompts = split = lost = over = refused = 0
        worst = 0
        for run in runs:
            messages = run["messages"]
            system = messages[0]["content"] if messages[0]["role"] == "system" else None
            body = messages[1:] if system else messages
            sent = [{k: v for k, v in m.items() if k != "meta"} for m in messages]
            fixed = counter.messages(sent[:1]) if system else 0
            budget = fixed + (counter.messages(sent) - fixed) // 2
            budget = budget if label == "half" else TIGHT_BUDGET
            answered = {m.get("tool_call_id") for m in body if m["role"] == "tool"}
            driver = make(system, budget)
            try:
                for i, message in enumerate(body):
                    driver.append(message)
                    if i + 1 < len(body) and body[i + 1]["role"] != "assistant":
                        continue
                    try:
                        prompt = driver.openai(driver.prompt())
                    except (
                        BudgetError
                    ):  # contextfold's answer to a budget below system + latest user
                        refused += 1
                        continue
                    prompts += 1
                    split += bool(tool_unit_faults(prompt, answered=answered))
                    lost += bool(system) and not any(
                        m["role"] == "system" and system in str(m["content"]) for m in prompt
                    )
                    excess = counter.messages(prompt) - budget
                    over += excess > 0
                    worst = max(worst, excess)
            finally:
                driver.close()
        out.update(
            {
                f"agent_{label}_prompts": prompts,
                f"agent_{label}_refused": refused,
                f"agent_{label}_split_units": split,
                f"agent_{label}_lost_system": lost,
                f"agent_{label}_over_share": over / prompts,
                f"agent_{label}_max_over": worst,
            }
        )
    return out


def retention_10pct(
    make: Callable[..., Any], rows: list[dict[str, Any]], counter: Any, *, replay: bool
) -> float:
    """Mean recall of the final prompt over the full conversation's, pooled (10% budgets):
    after a replay with a prompt before each assistant message, or after one prompt
    over the whole conversation (``bench/retention.py``'s one compaction)."""
    got: list[float] = []
    full: list[float] = []
    for row in rows:
        messages = [{k: v for k, v in m.items() if k != "meta"} for m in row["messages"]]
        questions = [
            q for q in row["questions"] if q.get("category") in CATEGORIES and "answer" in q
        ]
        keyed = answer_keys(messages, questions)
        driver = make(None, int(counter.messages(messages) * 0.10))
        try:
            if not replay:
                driver.prefill(messages)
                prompt = driver.openai(driver.prompt())
            for i, message in enumerate(messages if replay else ()):
                driver.append(message)
                if i + 1 < len(messages) and messages[i + 1]["role"] != "assistant":
                    continue
                prompt = driver.openai(driver.prompt())
        finally:
            driver.close()
        seen, whole = prompt_words(prompt), prompt_words(messages)
        got += [recall(k, seen) for k in keyed]
        full += [recall(k, whole) for k in keyed]
    return statistics.fmean(got) / statistics.fmean(full)


def build(
    driver_type: Any,
    counter: Any,
    system: str | None,
    budget: int,
    *,
    background: bool = False,
    delay_s: float = 0.0,
    system_in_history: bool = False,
    default_counter: bool = False,
) -> Any:
    """A fresh driver with its own scripted summarizer (so its calls are its own)."""
    from _peers_model import ScriptedSummarizer

    summarizer = ScriptedSummarizer(delay_s)
    return driver_type(
        system,
        budget,
        summarizer,
        counter,
        background=background,
        system_in_history=system_in_history,
        default_counter=default_counter,
    )


def slug(name: str) -> str:
    return "_".join(name.lower().replace("langchain ", "langchain_").split()).replace(
        "summarize_messages", "summarize"
    )


def shown(value: Any, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, int | float) else str(value)


def default_counter_cell(r: dict[str, Any], sizes: Sequence[int]) -> str:
    cells = [r[f"turn_ms_{size // 1000}k_default_counter"] for size in sizes]
    if isinstance(cells[0], str):
        return cells[0]
    return " / ".join(f"{c:.2f}" for c in cells)


def refusals(r: dict[str, Any]) -> str:
    counts = (r["agent_half_refused"], r["agent_tight_refused"])
    return f" ({counts[0]} / {counts[1]} refused: BudgetError)" if any(counts) else ""


def table(rows: dict[str, dict[str, Any]], sizes: Sequence[int], delay: float) -> str:
    """The comparison table of docs/peers.md, one row a library."""
    turn_heads = [f"turn p50 at {size // 1000}k (ms)" for size in sizes]
    turn_heads.append(
        "with the library's default counter: "
        + " / ".join(f"{size // 1000}k" for size in sizes)
        + " (ms)"
    )
    heads = [
        "library",
        *turn_heads,
        f"first model call with a {delay:g} s model: turn, its wall time (s)",
        "other turns p50 (ms)",
        "split tool units (half / 2k)",
        "lost system prompts (half / 2k)",
        "prompts over budget (half / 2k)",
        "max overshoot, tokens (half / 2k)",
        "LoCoMo retention at 10% (replayed / at once)",
    ]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for name, r in rows.items():
        fired = r["slow_fire_turn"]
        fire = (
            f"turn {fired}, {r['slow_fire_turn_s']:.2f} s" if isinstance(fired, int) else str(fired)
        )
        cells = [
            name,
            *[shown(r[f"turn_ms_{size // 1000}k"], ".2f") for size in sizes],
            default_counter_cell(r, sizes),
            fire,
            shown(r["slow_other_p50_ms"], ".2f"),
            f"{r['agent_half_split_units']} / {r['agent_tight_split_units']}",
            f"{r['agent_half_lost_system']} / {r['agent_tight_lost_system']}",
            f"{r['agent_half_over_share']:.0%} / {r['agent_tight_over_share']:.0%}" + refusals(r),
            f"{r['agent_half_max_over']} / {r['agent_tight_max_over']}",
            f"{r['retention_10pct_replay']:.3f} / {r['retention_10pct_once']:.3f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    first = next(iter(rows.values()))
    points = first["agent_half_prompts"] + first["agent_half_refused"]
    lines.append(f"\nAgent runs: {points} prompts asked of each row at each budget.")
    return "\n".join(lines)


def moved_table(rows: dict[str, dict[str, Any]]) -> str:
    """The agent-run checks again for the libraries that keep the system prompt apart,
    with it first in the history they are handed instead."""
    heads = [
        "system prompt in the history",
        "split tool units (half / 2k)",
        "lost system prompts (half / 2k)",
        "prompts over budget (half / 2k)",
        "max overshoot, tokens (half / 2k)",
    ]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for name, r in rows.items():
        cells = [name] + [
            f"{r[f'agent_half_{k}']} / {r[f'agent_tight_{k}']}"
            for k in ("split_units", "lost_system")
        ]
        cells.append(f"{r['agent_half_over_share']:.0%} / {r['agent_tight_over_share']:.0%}")
        cells.append(f"{r['agent_half_max_over']} / {r['agent_tight_max_over']}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    missing = missing_peers()
    if missing:
        print(f"skipped: {', '.join(missing)} not installed; pip install 'contextfold[peers]'")
        if args.json:
            print('{"skipped": true}')
        return
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="langmem")
    from _peers_drivers import DRIVERS

    counter = get_counter()
    locomo = list(conversations("locomo_dev", limit=1 if args.quick else None))
    chat = [m for row in locomo for m in row["messages"]]
    runs = list(conversations("taubench_airline_dev", limit=2 if args.quick else None))
    runs += list(conversations("openhands_example", limit=1 if args.quick else None))
    sizes = (1000,) if args.quick else (1000, 10000)
    delay = 0.2 if args.quick else 2.0
    figures: dict[str, Any] = {
        f"version_{name}": importlib.metadata.version(name) for name in PEERS
    }
    figures["slow_model_s"] = delay
    rows: dict[str, dict[str, Any]] = {}
    began = time.perf_counter()
    for driver_type in DRIVERS:
        make = partial(build, driver_type, counter)
        row: dict[str, Any] = {}
        for size in sizes:
            turns = 5 if args.quick else 20
            row[f"turn_ms_{size // 1000}k"] = turn_cost(make, chat, size, turns)
            row[f"turn_ms_{size // 1000}k_default_counter"] = (
                driver_type.no_default_counter
                or turn_cost(partial(make, default_counter=True), chat, size, turns)
            )
        slow = slow_turns(
            partial(make, delay_s=delay),
            locomo[0]["messages"],
            after=5 if args.quick else 10,
        )
        if driver_type.name.endswith("trim_messages"):
            slow.update(fire_turn=NA_TRIM, fire_turn_s=NA_TRIM)
        elif driver_type.name.endswith("offline"):
            slow.update(fire_turn=NA_OFFLINE, fire_turn_s=NA_OFFLINE)
        row.update({f"slow_{k}": v for k, v in slow.items()})
        row.update(agent_checks(make, runs, counter))
        row["retention_10pct_replay"] = retention_10pct(make, locomo, counter, replay=True)
        row["retention_10pct_once"] = retention_10pct(make, locomo, counter, replay=False)
        rows[driver_type.name] = row
        figures.update({f"{slug(driver_type.name)}_{k}": v for k, v in row.items()})
        print(f"{driver_type.name}: done at {time.perf_counter() - began:.0f} s", file=sys.stderr)
    moved: dict[str, dict[str, Any]] = {}
    for driver_type in DRIVERS:
        if driver_type.system_apart:
            make = partial(build, driver_type, counter, system_in_history=True)
            moved[driver_type.name] = agent_checks(make, runs, counter)
            figures.update(
                {
                    f"{slug(driver_type.name)}_in_history_{k}": v
                    for k, v in moved[driver_type.name].items()
                }
            )
    print(table(rows, sizes, delay))
    print()
    print(moved_table(moved))
    report(figures, args.json)


if __name__ == "__main__":
    main()
