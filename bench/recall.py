"""Recall from the log: what it adds to a render.

The five LoCoMo dev conversations, looped to 1k, 10k and 100k logged messages
(a loop repeats the same text, so at 100k a query's words match about 36 times
as many messages as in one conversation), are logged into the RAM store,
SQLite (a file in a temporary directory) and PostgreSQL when it answers
(``$CONTEXTFOLD_BENCH_POSTGRES``, a schema made for the run, its statistics
taken once the logs are in, as autovacuum would). One view with the ``offline``
preset and an 8,000-token budget is compacted, then rendered ``CALLS`` times
with recall off and on (the same folds: only the view's ``recall`` setting
changes), the LoCoMo questions as queries. The prompt cache is emptied before
each render so both arms render afresh. Figures: p50/p99 milliseconds per arm,
what recall adds (the arms' difference at p50 and at p99), the recall step
timed alone on the prompt rendered without it (its search, reads, choice and
block, with the same queries), and the p50 of the store's search alone.
``--quick`` stops at 10k and leaves PostgreSQL out; ``--cpu`` times by the
thread's CPU time instead of the wall clock (for a machine busy with other
work). What recall keeps is measured by ``bench/retention.py`` (the
``offline_recall`` arms).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from _common import (
    conversations,
    parse_args,
    postgres_analyze,
    postgres_schema,
    postgres_up,
    report,
)

from contextfold import Memory
from contextfold.core.messages import Message
from contextfold.memory.cache import PromptCache
from contextfold.memory.recall import recall_block
from contextfold.memory.recalled import RecallSettings
from contextfold.memory.view import View
from contextfold.store import RAMStore, SQLiteStore, Store

CALLS = 200
LATENCY_BUDGET = 8000


# -- latency ----------------------------------------------------------------


def looped_log(size: int) -> list[Message]:
    """``size`` LoCoMo messages, the dev conversations over and over."""
    pool = [m for row in conversations("locomo_dev") for m in row["messages"]]
    return [pool[i % len(pool)] for i in range(size)]


def questions() -> list[str]:
    return [str(q["question"]) for row in conversations("locomo_dev") for q in row["questions"]]


# What a call's time is read from: the wall clock, or with ``--cpu`` this thread's CPU time
# (on a machine shared with other work, what the call itself spent).
CLOCK: list[Callable[[], float]] = [time.perf_counter]


def percentiles_ms(fn: Callable[[], Any], calls: int) -> tuple[float, float]:
    clock = CLOCK[0]
    times = []
    for _ in range(calls):
        t0 = clock()
        fn()
        times.append((clock() - t0) * 1e3)
    cuts = statistics.quantiles(times, n=100)
    return cuts[49], cuts[98]


def fresh_render(view: View, query: str | None) -> None:
    view.binding.prompts = PromptCache()
    view.render_report(query=query)


def render_latency(
    prefix: str,
    open_store: Callable[[], Store],
    sizes: dict[str, int],
    asked: list[str],
    after_load: Callable[[], None] = lambda: None,
) -> dict[str, float]:
    """Render p50/p99 with recall off and on at the end of each log size; ``after_load``
    runs once each log is in."""
    figures: dict[str, float] = {}
    memory = Memory(open_store())
    for label, size in sizes.items():
        session = memory.session(f"log-{label}")
        log = looped_log(size)
        for i in range(0, size, 1000):
            session.extend(log[i : i + 1000])
        after_load()
        view = session.view("offline", preset="offline", budget=LATENCY_BUDGET)
        view.compact()
        view.update(recall=False)
        off = percentiles_ms(lambda: fresh_render(view, None), CALLS)  # noqa: B023
        view.update(recall=None)
        queries: Iterator[str] = iter(asked * (CALLS // len(asked) + 1))
        on = percentiles_ms(lambda: fresh_render(view, next(queries)), CALLS)  # noqa: B023
        figures[f"{prefix}render_ms_p50_off_{label}"] = off[0]
        figures[f"{prefix}render_ms_p99_off_{label}"] = off[1]
        figures[f"{prefix}render_ms_p50_on_{label}"] = on[0]
        figures[f"{prefix}render_ms_p99_on_{label}"] = on[1]
        figures[f"{prefix}recall_adds_ms_p50_{label}"] = on[0] - off[0]
        figures[f"{prefix}recall_adds_ms_p99_{label}"] = on[1] - off[1]
        view.update(recall=False)
        base = view.render_report()
        queries = iter(asked * (CALLS // len(asked) + 1))
        step = percentiles_ms(
            lambda: recall_block(
                base,  # noqa: B023
                store=memory.store,
                session_id=session.id,  # noqa: B023
                query=next(queries),  # noqa: B023
                settings=RecallSettings(),
                keep=None,
                counter=session.counter,  # noqa: B023
            ),
            CALLS,
        )
        figures[f"{prefix}recall_step_ms_p50_{label}"] = step[0]
        figures[f"{prefix}recall_step_ms_p99_{label}"] = step[1]
        queries = iter(asked * (CALLS // len(asked) + 1))
        search = percentiles_ms(
            lambda: memory.store.search(session.id, next(queries), limit=16),  # noqa: B023
            CALLS,
        )
        figures[f"{prefix}search_ms_p50_{label}"] = search[0]
    memory.store.close()
    return figures


def postgres_latency(sizes: dict[str, int], asked: list[str]) -> dict[str, float]:
    if not postgres_up():
        return {}
    from contextfold.store.postgres import PostgresStore

    with postgres_schema("recall") as (schema, url):
        return render_latency(
            "pg_", lambda: PostgresStore(url), sizes, asked, lambda: postgres_analyze(schema)
        )


def cpu_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cpu", action="store_true", help="time by this thread's CPU time, not the wall clock"
    )


def main() -> None:
    args = parse_args(__doc__.splitlines()[0] if __doc__ else "", cpu_option)
    if args.cpu:
        CLOCK[0] = time.thread_time
    sizes = {"1k": 1000, "10k": 10_000}
    if not args.quick:
        sizes["100k"] = 100_000
    asked = questions()
    figures = render_latency("ram_", RAMStore, sizes, asked)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "recall.db"
        figures.update(render_latency("sqlite_", lambda: SQLiteStore(path), sizes, asked))
    if not args.quick:
        figures.update(postgres_latency(sizes, asked))
    report(figures, args.json)


if __name__ == "__main__":
    main()
