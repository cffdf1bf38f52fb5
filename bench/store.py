"""SQLite store: append throughput, and whether render's read grows with the log.

Appends real messages (OpenHands coding runs and tau-bench airline runs,
repeated to N) into a fresh file, one message a call and then 100 a call.
``messages_before_us_*`` times the newest-first page render reads, at the end
of a 1k and a 100k message log: the two should be about equal.
"""

from __future__ import annotations

import itertools
import tempfile
import time
from pathlib import Path

from _common import conversations, parse_args, report, timed

from contextfold.core.log import NewMessage
from contextfold.core.tokens import get_counter
from contextfold.store import SQLiteStore

BATCH = 100
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


def append_rate(path: Path, messages: list[NewMessage], batch: int) -> float:
    """Messages a second into a fresh file, ``batch`` messages an append call."""
    store = SQLiteStore(path)
    store.create_session("bench", encoding="o200k_base")
    t0 = time.perf_counter()
    for i in range(0, len(messages), batch):
        store.append("bench", messages[i : i + batch])
    elapsed = time.perf_counter() - t0
    store.close()
    return len(messages) / elapsed


def page_read_us(path: Path, messages: list[NewMessage]) -> float:
    """Microseconds for one page of ``messages_before`` at the end of the log."""
    store = SQLiteStore(path)
    store.create_session("bench", encoding="o200k_base")
    for i in range(0, len(messages), 1000):
        store.append("bench", messages[i : i + 1000])
    end = store.last_seq("bench") + 1
    calls = 200
    best = timed(lambda: [store.messages_before("bench", end, PAGE) for _ in range(calls)])
    store.close()
    return best / calls * 1e6


def main() -> None:
    args = parse_args(__doc__ or "")
    n = 2000 if args.quick else 20000
    messages = pool()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        figures = {
            "messages": n,
            "append_per_s_single": append_rate(root / "single.db", take(messages, n), 1),
            "append_per_s_batch": append_rate(root / "batch.db", take(messages, n), BATCH),
            "messages_before_us_1k": page_read_us(root / "1k.db", take(messages, 1000)),
            "messages_before_us_100k": page_read_us(root / "100k.db", take(messages, 100_000)),
        }
    report(figures, args.json)


if __name__ == "__main__":
    main()
