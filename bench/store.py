"""SQLite store: append throughput per durability, and whether render's reads grow with the log.

Appends real messages (OpenHands coding runs and tau-bench airline runs,
repeated to N) into a fresh file, one message a call and then 100 a call, once
for each ``durability`` ("process": no fsync per commit; "full": an fsync per
commit, so its single-message rate is the disk's flush rate).
``messages_before_us_*`` times the newest-first page render reads and
``head_us_*`` the check a cached render makes, at the end of a 1k and a 100k
message log: each pair should be about equal.
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
    report(figures, args.json)


if __name__ == "__main__":
    main()
