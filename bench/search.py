"""Store.search: p50/p99 microseconds of one search at the end of 1k, 10k and 100k message logs.

The log is real conversation: every message of the four data sets (LoCoMo,
LongMemEval, tau-bench and OpenHands, 7,656 messages) in turn, repeated to
each size, one session per size, all three in one store. The queries are what
recall asks with: real user text of 5 to 30 words (LoCoMo questions and user
turns, LongMemEval questions and user turns), 300 drawn with a fixed seed,
with ``limit=20`` and no bound. Every size is timed once all three logs are
in, so the small session's searches have the large ones beside them in the
index.

A 100k log repeats the text 13 times: a word the data hold in k messages is in
13k of them, so rare words are rarer in a real log of that length, and a
search here ranks more messages than it would there. ``--corpus agents``
logs what this benchmark used to (the OpenHands and tau-bench runs alone,
36 times at 100k), for comparison.

Backends: the RAM store (FTS5 in an in-memory SQLite database), SQLite (FTS5
in the file, durability "process") and PostgreSQL (``tsvector`` with a GIN
index; ``$CONTEXTFOLD_BENCH_POSTGRES``, default the local database ``test``, in
a schema made for the run and dropped after; skipped when the server does not
answer, a failure under ``CI=true``). PostgreSQL plans a search by the table's
statistics, so they are taken (``ANALYZE``) once the logs are in, as autovacuum
would have done a while after such a load; right after it, with none for the
new sessions, the planner reads a whole session's rows instead of the index.
``--quick`` stops at 10k.
"""

from __future__ import annotations

import argparse
import itertools
import random
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
from store import per_call_us, pool, take

from contextfold.core.log import NewMessage
from contextfold.core.tokens import get_counter
from contextfold.store import RAMStore, SQLiteStore, Store
from contextfold.store.search import words

CALLS = 300
CONVERSATIONS = (
    "locomo_dev",
    "longmemeval_oracle_dev",
    "taubench_airline_dev",
    "openhands_example",
)
ASKED = ("locomo_dev", "longmemeval_oracle_dev")


def conversation_log() -> list[NewMessage]:
    """Every message of the four data sets, counted once (not timed)."""
    counter = get_counter()
    rows = itertools.chain.from_iterable(conversations(name) for name in CONVERSATIONS)
    return [NewMessage(m, counter.message(m)) for row in rows for m in row["messages"]]


def user_texts() -> Iterator[str]:
    """The questions and the user turns of the two conversation data sets."""
    for name in ASKED:
        for row in conversations(name):
            yield from (q["question"] for q in row["questions"])
            for message in row["messages"]:
                if message["role"] == "user" and isinstance(message["content"], str):
                    yield message["content"]


def queries(count: int) -> list[str]:
    """``count`` user texts of 5 to 30 words, drawn with a fixed seed."""
    found = sorted({text for text in user_texts() if 5 <= len(words(text)) <= 30})
    return random.Random(12).sample(found, count)


def search_percentiles(
    prefix: str,
    open_store: Callable[[], Store],
    messages: list[NewMessage],
    sizes: dict[str, int],
    settle: Callable[[], None] = lambda: None,
) -> dict[str, float]:
    """p50/p99 of one search at the end of each log size, and the logging rate with the index;
    ``settle`` runs once the logs are in, before the searches are timed."""
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
    settle()
    asked = queries(CALLS)
    for label in sizes:
        sid = f"log-{label}"
        each = iter(asked)
        p50, p99 = per_call_us(lambda: store.search(sid, next(each)), CALLS)  # noqa: B023
        figures[f"{prefix}search_us_p50_{label}"] = p50
        figures[f"{prefix}search_us_p99_{label}"] = p99
    store.close()
    return figures


def postgres_figures(messages: list[NewMessage], sizes: dict[str, int]) -> dict[str, float]:
    """The PostgreSQL run in a schema of its own; none when the server does not answer."""
    if not postgres_up():
        return {}
    from contextfold.store.postgres import PostgresStore

    with postgres_schema("search") as (schema, url):
        return search_percentiles(
            "pg_", lambda: PostgresStore(url), messages, sizes, lambda: postgres_analyze(schema)
        )


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--corpus",
        choices=("conversations", "agents"),
        default="conversations",
        help="what is logged: the four data sets, or the agent runs alone as before",
    )
    parser.add_argument(
        "--backends", default="ram,sqlite,pg", help="which stores to time, comma-separated"
    )


def main() -> None:
    args = parse_args(__doc__ or "", options)
    sizes = {"1k": 1000, "10k": 10_000}
    if not args.quick:
        sizes["100k"] = 100_000
    messages = conversation_log() if args.corpus == "conversations" else pool()
    backends = set(args.backends.split(","))
    figures: dict[str, Any] = {}
    if "ram" in backends:
        figures.update(search_percentiles("ram_", RAMStore, messages, sizes))
    if "sqlite" in backends:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "search.db"
            opened = lambda: SQLiteStore(path)  # noqa: E731
            figures.update(search_percentiles("sqlite_", opened, messages, sizes))
    if "pg" in backends:
        figures.update(postgres_figures(messages, sizes))
    report(figures, args.json)


if __name__ == "__main__":
    main()
