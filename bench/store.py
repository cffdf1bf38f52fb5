"""SQLite and PostgreSQL stores: append throughput, and whether render's reads grow with the log.

Appends real messages (OpenHands coding runs and tau-bench airline runs,
repeated to N) into a fresh file, one message a call and then 100 a call, once
for each ``durability`` ("process": no fsync per commit; "full": an fsync per
commit, so its single-message rate is the disk's flush rate).
``messages_before_us_*`` times the newest-first page render reads and
``head_us_*`` the check a cached render makes, at the end of a 1k and a 100k
message log: each pair should be about equal.

The same runs on PostgreSQL (``$CONTEXTFOLD_BENCH_POSTGRES``, default the local
server's database ``test``, in a schema made for the run and dropped after):
``pg_append_per_s_*`` per durability (``full``: the server flushes each commit
to disk; ``process``: it does not wait for that), and per call p50/p99 in
microseconds of a single append, the page read and ``head`` at the end of a 1k
and a 100k message log (10k with ``--quick``), beside the same percentiles for
SQLite, both at durability ``process``. A server that does not
answer skips these figures, or fails the run under ``CI=true``.
"""

from __future__ import annotations

import itertools
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import POSTGRES, conversations, parse_args, postgres_up, report, timed

from contextfold.core.log import NewMessage
from contextfold.core.tokens import get_counter
from contextfold.store import SQLiteStore, Store
from contextfold.store.sqlite import Durability

BATCH = 100
DURABILITIES: tuple[Durability, ...] = ("process", "full")
PAGE = 50


def pool() -> list[NewMessage]:
    """Every message of the two agent data sets, counted once (not timed)."""
    counter = get_counter()
    rows = itertools.chain(
        conversations("openhands_example"), conversations("taubench_airline_dev")
    )
    return [NewMessage(m, counter.message(m)) for row in rows for m in row["messages"]]


def take(messages: list[NewMessage], n: int) -> list[NewMessage]:
    return list(itertools.islice(itertools.cycle(messages), n))


def append_rate(
    path: Path, messages: list[NewMessage], batch: int, durability: Durability
) -> float:
    """Messages a second into a fresh file, ``batch`` messages an append call."""
    store = SQLiteStore(path, durability=durability)
    store.create_session("bench", encoding="o200k_base")
    t0 = time.perf_counter()
    for i in range(0, len(messages), batch):
        store.append("bench", messages[i : i + batch])
    elapsed = time.perf_counter() - t0
    store.close()
    return len(messages) / elapsed


def read_us(path: Path, messages: list[NewMessage]) -> tuple[float, float]:
    """Microseconds for one page of ``messages_before``, and for one ``head``, at the log's end."""
    store = SQLiteStore(path)
    store.create_session("bench", encoding="o200k_base")
    for i in range(0, len(messages), 1000):
        store.append("bench", messages[i : i + 1000])
    end = store.last_seq("bench") + 1
    calls = 200
    page = timed(lambda: [store.messages_before("bench", end, PAGE) for _ in range(calls)])
    head = timed(lambda: [store.head("bench", "default") for _ in range(calls)])
    store.close()
    return page / calls * 1e6, head / calls * 1e6


def per_call_us(fn: Callable[[], Any], calls: int) -> tuple[float, float]:
    """p50 and p99 microseconds of ``calls`` calls of ``fn``."""
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    cuts = statistics.quantiles(times, n=100)
    return cuts[49], cuts[98]


def call_percentiles(
    prefix: str, open_store: Callable[[], Store], messages: list[NewMessage], sizes: dict[str, int]
) -> dict[str, float]:
    """p50/p99 of one append, and of render's two reads at the end of each log size."""
    figures: dict[str, float] = {}
    store = open_store()
    store.create_session("calls", encoding="o200k_base")
    fresh = itertools.cycle(messages)
    p50, p99 = per_call_us(lambda: store.append("calls", [next(fresh)]), 500)
    figures.update({f"{prefix}append_us_p50": p50, f"{prefix}append_us_p99": p99})
    for label, size in sizes.items():
        sid = f"log-{label}"
        store.create_session(sid, encoding="o200k_base")
        log = take(messages, size)
        for i in range(0, size, 1000):
            store.append(sid, log[i : i + 1000])
        end = store.last_seq(sid) + 1
        for name, fn in (
            ("messages_before", lambda: store.messages_before(sid, end, PAGE)),  # noqa: B023
            ("head", lambda: store.head(sid, "default")),  # noqa: B023
        ):
            p50, p99 = per_call_us(fn, 500)
            figures[f"{prefix}{name}_us_p50_{label}"] = p50
            figures[f"{prefix}{name}_us_p99_{label}"] = p99
    store.close()
    return figures


def postgres_figures(messages: list[NewMessage], n: int, sizes: dict[str, int]) -> dict[str, float]:
    """The PostgreSQL runs in a schema of their own; none when the server does not answer."""
    if not postgres_up():
        return {}
    import psycopg

    from contextfold.store.postgres import PostgresStore

    schema = f"cf_bench_{os.getpid()}"
    url = f"{POSTGRES}?schema={schema}"
    figures: dict[str, float] = {}
    try:
        for durability in DURABILITIES:
            for name, batch in (("single", 1), ("batch", BATCH)):
                store = PostgresStore(f"{url}&durability={durability}")
                sid = f"rate-{name}-{durability}"
                store.create_session(sid, encoding="o200k_base")
                log = take(messages, n)
                t0 = time.perf_counter()
                for i in range(0, n, batch):
                    store.append(sid, log[i : i + batch])
                rate = n / (time.perf_counter() - t0)
                figures[f"pg_append_per_s_{name}_{durability}"] = rate
                store.close()
        process = f"{url}&durability=process"
        figures.update(call_percentiles("pg_", lambda: PostgresStore(process), messages, sizes))
    finally:
        with psycopg.connect(POSTGRES, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return figures


def main() -> None:
    args = parse_args(__doc__ or "")
    n = 2000 if args.quick else 20000
    messages = pool()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        figures: dict[str, float] = {"messages": n}
        for durability in DURABILITIES:
            for name, batch in (("single", 1), ("batch", BATCH)):
                figures[f"append_per_s_{name}_{durability}"] = append_rate(
                    root / f"{name}-{durability}.db", take(messages, n), batch, durability
                )
        for label, size in (("1k", 1000), ("100k", 100_000)):
            page, head = read_us(root / f"{label}.db", take(messages, size))
            figures[f"messages_before_us_{label}"] = page
            figures[f"head_us_{label}"] = head
        sizes = {"1k": 1000, "10k" if args.quick else "100k": 10_000 if args.quick else 100_000}
        figures.update(
            call_percentiles("sqlite_", lambda: SQLiteStore(root / "calls.db"), messages, sizes)
        )
    figures.update(postgres_figures(messages, n, sizes))
    report(figures, args.json)


if __name__ == "__main__":
    main()
