"""Store.search: p50/p99 microseconds of one search at the end of 1k, 10k and 100k message logs.

Logs real messages (OpenHands coding runs and tau-bench airline runs, repeated
to each size) into one session per size, all in one store, then times 300
searches a size, each of two or three words drawn from a message of the log
(the same seeded draw for every backend), with ``limit=20`` and no bound.
The data sets hold 2,744 messages, so a 100k log holds each about 36 times
and a query's words match that many more rows than in a log of distinct
text: every match is ranked, so a search's time grows with the matches.
Backends: the RAM store (FTS5 in an in-memory SQLite database), SQLite (FTS5
in the file, durability "process") and PostgreSQL (``tsvector`` with a GIN
index; ``$CONTEXTFOLD_BENCH_POSTGRES``, default the local database ``test``, in
a schema made for the run and dropped after; skipped when the server does not
answer, a failure under ``CI=true``). ``--quick`` stops at 10k.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import POSTGRES, parse_args, postgres_up, report
from store import per_call_us, pool, take

from contextfold.core.log import NewMessage
from contextfold.core.messages import text_of
from contextfold.store import RAMStore, SQLiteStore, Store
from contextfold.store.search import query_terms

CALLS = 300


def queries(log: list[NewMessage], count: int) -> list[str]:
    """Two or three words of a message drawn from ``log``, ``count`` times (seeded)."""
    draw = random.Random(12)
    found: list[str] = []
    while len(found) < count:
        words = query_terms(text_of(draw.choice(log).message))
        if len(words) >= 2:
            found.append(" ".join(draw.sample(words, min(len(words), draw.choice((2, 3))))))
    return found


def search_percentiles(
    prefix: str, open_store: Callable[[], Store], messages: list[NewMessage], sizes: dict[str, int]
) -> dict[str, float]:
    """p50/p99 of one search at the end of each log size, and the logging rate with the index."""
    figures: dict[str, float] = {}
    store = open_store()
    for label, size in sizes.items():
        sid = f"log-{label}"
        store.create_session(sid, encoding="o200k_base")
        log = take(messages, size)
        t0 = time.perf_counter()
        for i in range(0, size, 1000):
            store.append(sid, log[i : i + 1000])
        figures[f"{prefix}append_per_s_{label}"] = size / (time.perf_counter() - t0)
        asked = iter(queries(log, CALLS))
        p50, p99 = per_call_us(lambda: store.search(sid, next(asked)), CALLS)  # noqa: B023
        figures[f"{prefix}search_us_p50_{label}"] = p50
        figures[f"{prefix}search_us_p99_{label}"] = p99
    store.close()
    return figures


def postgres_figures(messages: list[NewMessage], sizes: dict[str, int]) -> dict[str, float]:
    """The PostgreSQL run in a schema of its own; none when the server does not answer."""
    if not postgres_up():
        return {}
    import psycopg

    from contextfold.store.postgres import PostgresStore

    schema = f"cf_bench_search_{os.getpid()}"
    url = f"{POSTGRES}?schema={schema}&durability=process"
    try:
        return search_percentiles("pg_", lambda: PostgresStore(url), messages, sizes)
    finally:
        with psycopg.connect(POSTGRES, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def main() -> None:
    args = parse_args(__doc__ or "")
    sizes = {"1k": 1000, "10k": 10_000}
    if not args.quick:
        sizes["100k"] = 100_000
    messages = pool()
    figures: dict[str, float] = {}
    figures.update(search_percentiles("ram_", RAMStore, messages, sizes))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "search.db"
        figures.update(search_percentiles("sqlite_", lambda: SQLiteStore(path), messages, sizes))
    figures.update(postgres_figures(messages, sizes))
    report(figures, args.json)


if __name__ == "__main__":
    main()
