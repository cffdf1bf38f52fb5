"""The PostgreSQL server the tests use, fresh schemas on it, and workers for other processes.

``CONTEXTFOLD_TEST_POSTGRES`` names the server (default: the local one, trust
auth, database ``test``). A test that needs it and finds it down fails under
``CI=true`` and is skipped otherwise, in ``require_postgres`` alone.

The workers run in processes started by ``multiprocessing`` ("spawn", so no
pool thread or connection of the test's process is copied into them).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

SERVER = os.environ.get("CONTEXTFOLD_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


def require_postgres() -> None:
    """Fail (under CI=true) or skip the test when the server does not answer."""
    import psycopg

    try:
        psycopg.connect(SERVER, connect_timeout=3).close()
    except psycopg.Error as exc:
        reason = f"PostgreSQL at {SERVER} is down: {exc}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)


def url(schema: str, **options: Any) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"schema": schema, **options}.items())
    return f"{SERVER}?{query}"


@contextmanager
def fresh_schema() -> Iterator[str]:
    """A schema name no test used, dropped with everything in it afterwards."""
    import psycopg

    schema = f"cf_test_{uuid.uuid4().hex[:12]}"
    try:
        yield schema
    finally:
        with psycopg.connect(SERVER, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@contextmanager
def raw(schema: str) -> Iterator[Any]:
    """A connection of its own into ``schema``, as another program would have."""
    import psycopg

    with psycopg.connect(SERVER, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema}")
        yield conn


def append_many(db_url: str, worker: int, n: int, start: Any) -> list[tuple[int, str]]:
    """Append ``n`` pairs: a message every worker sends under one shared key (a retry
    for all but the first), and one of its own."""
    from contextfold.core.log import NewMessage
    from contextfold.store.postgres import PostgresStore

    store = PostgresStore(db_url, pool_size=2)
    start.wait()
    out = []
    for i in range(n):
        shared = NewMessage({"role": "user", "content": f"shared m{i}"}, 3, f"shared-{i}")
        own = NewMessage({"role": "user", "content": f"w{worker} m{i}"}, 3)
        for logged in store.append("s", [shared, own]):
            out.append((logged.seq, str(logged.message["content"])))
    store.close()
    return out


def take_lease(db_url: str, owner: str, start: Any) -> bool:
    from contextfold.store.postgres import PostgresStore

    store = PostgresStore(db_url, pool_size=1)
    start.wait()
    taken = store.acquire_lease("s", "default", owner, ttl_s=60)
    store.close()
    return taken


def open_store(db_url: str, start: Any) -> list[str]:
    """Open (and so migrate) the store; the migrations this process applied."""
    from contextfold.store.postgres import PostgresStore

    start.wait()
    store = PostgresStore(db_url, pool_size=1)
    applied = store.applied
    store.create_session(f"opened-by-{os.getpid()}", encoding="o200k_base")
    store.close()
    return applied


def chat_elsewhere(db_url: str, rounds: int, pause_s: float) -> int:
    """Talk in session "s" through a ``Memory`` of this process, as another app would."""
    from contextfold import Memory

    memory = Memory(db_url)
    session = memory.session("s")
    for r in range(rounds):
        session.append({"role": "user", "content": f"question {r} " + "words " * 40})
        session.append({"role": "assistant", "content": f"answer {r} " + "words " * 40})
        time.sleep(pause_s)
    last = session.store.last_seq("s")
    memory.store.close()
    return last
