"""Shared by the benchmarks: arguments, data location, output.

Each benchmark runs as ``python bench/<name>.py [--quick] [--json]``; with
``--json`` its last line is one JSON object of its figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))


def data_dir() -> Path:
    """``$CONTEXTFOLD_DATA`` or ``../shared/data`` beside the repository."""
    return Path(os.environ.get("CONTEXTFOLD_DATA", ROOT.parent / "shared" / "data"))


def conversations(name: str, limit: int | None = None) -> Iterator[dict[str, Any]]:
    """Rows of ``<data>/<name>.jsonl``."""
    path = data_dir() / f"{name}.jsonl"
    with path.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if limit is not None and i >= limit:
                return
            yield json.loads(line)


def parse_args(
    description: str, add_options: Callable[[argparse.ArgumentParser], None] | None = None
) -> argparse.Namespace:
    """``--quick`` and ``--json``, and a benchmark's own options when ``add_options`` adds them."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--quick", action="store_true", help="smaller sizes, for make bench and CI smoke runs"
    )
    parser.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    if add_options is not None:
        add_options(parser)
    return parser.parse_args()


def timed(fn: Callable[[], Any], repeat: int = 5) -> float:
    """Best wall time of ``repeat`` calls, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def report(figures: dict[str, Any], as_json: bool) -> None:
    """Print figures as a table; with ``as_json``, then one JSON line."""
    width = max(len(k) for k in figures)
    for key, value in figures.items():
        shown = f"{value:,.3f}" if isinstance(value, float) else str(value)
        print(f"{key:<{width}}  {shown}")
    if as_json:
        print(json.dumps(figures, sort_keys=True))


POSTGRES = os.environ.get("CONTEXTFOLD_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


def postgres_up() -> bool:
    """True when the benchmarks' PostgreSQL answers; a benchmark leaves its figures out when
    it does not, except under ``CI=true``, where that ends the run."""
    try:
        import psycopg

        psycopg.connect(POSTGRES, connect_timeout=3).close()
    except Exception as exc:  # not installed, refused, timed out
        if os.environ.get("CI", "").lower() == "true":
            raise SystemExit(f"PostgreSQL at {POSTGRES} is needed under CI=true: {exc}") from exc
        print(f"PostgreSQL figures skipped: {exc}")
        return False
    return True


def postgres_analyze(schema: str) -> None:
    """Take the statistics of a benchmark schema's messages once its logs are in, as
    autovacuum would soon after: the search's plan depends on them."""
    import psycopg

    with psycopg.connect(POSTGRES, autocommit=True) as conn:
        conn.execute(f"ANALYZE {schema}.messages")


@contextlib.contextmanager
def postgres_schema(name: str) -> Iterator[tuple[str, str]]:
    """A schema of its own for one benchmark run, and the store URL into it; dropped after."""
    import psycopg

    schema = f"cf_bench_{name}_{os.getpid()}"
    try:
        yield schema, f"{POSTGRES}?schema={schema}&durability=process"
    finally:
        with psycopg.connect(POSTGRES, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
