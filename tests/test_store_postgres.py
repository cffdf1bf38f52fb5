"""The PostgreSQL store: the shipped contract, then what many processes on one database need.

Every test gets a schema of its own on the local server (``tests/pg.py``),
dropped afterwards (the contract's tests share one, emptied before each); with
the server down they fail under CI=true, else skip.
"""

from __future__ import annotations

import multiprocessing
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pg
import pytest
from crash_worker import WAIT, SummarizeRounds, summarizing_view

from contextfold import Memory
from contextfold.core.errors import InvalidInput, StoreError
from contextfold.core.log import NewMessage
from contextfold.runtime import ThreadRunner
from contextfold.store import Store, open_store
from contextfold.store.wake import wake_for
from contextfold.testing import ScriptedModel
from contextfold.testing.store_contract import StoreContract

psycopg = pytest.importorskip("psycopg")

from contextfold.store.postgres import PostgresStore  # noqa: E402
from contextfold.store.postgres.admin import below  # noqa: E402
from contextfold.store.postgres.migrations import MIGRATIONS, MIGRATIONS_TABLE  # noqa: E402
from contextfold.store.postgres.pool import CHECK_IDLE_S  # noqa: E402
from contextfold.store.postgres.wake import PostgresWake  # noqa: E402

SPAWN = multiprocessing.get_context("spawn")


@pytest.fixture
def schema() -> Iterator[str]:
    """A fresh schema on the running server (the one place a down server is judged)."""
    pg.require_postgres()
    with pg.fresh_schema() as name:
        yield name


@pytest.fixture
def db(schema: str) -> Iterator[PostgresStore]:
    store = PostgresStore(pg.url(schema))
    store.create_session("s", encoding="o200k_base")
    yield store
    store.close()


@pytest.fixture(scope="module")
def contract_schema() -> Iterator[str]:
    """One migrated schema for the contract's tests, emptied before each."""
    pg.require_postgres()
    with pg.fresh_schema() as name:
        PostgresStore(pg.url(name)).close()
        yield name


class TestContract(StoreContract):
    """The shipped contract on PostgreSQL."""

    @pytest.fixture
    def store(self, contract_schema: str) -> Iterator[Store]:
        with pg.raw(contract_schema) as conn:
            for table in ("sessions", "api_keys"):  # every other row goes with its session
                conn.execute(f"DELETE FROM {table}")
        backend = PostgresStore(pg.url(contract_schema), pool_size=2)
        assert backend.list_sessions() == [] and backend.list_api_keys() == []
        yield backend
        backend.close()

    def store_url(self, store: Store) -> str | None:
        assert isinstance(store, PostgresStore)
        return pg.url(store.schema, pool_size=2)

    def delete_message(self, store: Store, session_id: str, seq: int) -> None:
        assert isinstance(store, PostgresStore)
        with pg.raw(store.schema) as conn:
            conn.execute(
                "DELETE FROM messages WHERE session_id = %s AND seq = %s", (session_id, seq)
            )

    def damage_fold(self, store: Store, session_id: str, view: str, fold_id: str) -> None:
        assert isinstance(store, PostgresStore)
        with pg.raw(store.schema) as conn:
            conn.execute("UPDATE folds SET fold = '{\"start\": ' WHERE id = %s", (fold_id,))


def _user(text: str, key: str | None = None) -> NewMessage:
    return NewMessage({"role": "user", "content": text}, 1, key)


def _run(target: Any, argsets: list[tuple[Any, ...]]) -> list[Any]:
    """Run ``target`` in one spawned process per argument tuple, released together
    once every one is ready (``start.wait()`` in the worker)."""
    with SPAWN.Manager() as manager:
        start = manager.Barrier(len(argsets) + 1)
        with SPAWN.Pool(len(argsets)) as pool:
            pending = [pool.apply_async(target, (*args, start)) for args in argsets]
            start.wait(timeout=120)
            return [p.get(timeout=120) for p in pending]


def test_writers_in_many_processes_keep_seq_contiguous_and_keys_unique(
    db: PostgresStore,
) -> None:
    workers, n = 3, 30
    results = _run(pg.append_many, [(pg.url(db.schema), w, n) for w in range(workers)])
    stored = db.messages("s")
    seqs = [m.seq for m in stored]
    # Each worker logged its own message n times and the shared one n times in all.
    assert seqs == list(range(1, workers * n + n + 1))
    assert db.last_seq("s") == len(seqs)
    info = db.session_info("s")
    assert (info.messages, info.tokens) == (len(stored), sum(m.tokens for m in stored))
    assert info.last_at == max(m.created_at for m in stored)
    keys = [m.key for m in stored if m.key is not None]
    assert sorted(keys) == sorted(f"shared-{i}" for i in range(n))
    by_seq = {m.seq: str(m.message["content"]) for m in stored}
    for returned in results:
        assert len(returned) == 2 * n
        # Whatever a worker was told is what the log holds: one record for a key.
        assert all(by_seq[seq] == content for seq, content in returned)


def test_lease_raced_by_processes_has_one_holder(db: PostgresStore) -> None:
    owners = [f"p{i}" for i in range(3)]
    taken = _run(pg.take_lease, [(pg.url(db.schema), owner) for owner in owners])
    assert sorted(taken) == [False, False, True]
    winner = owners[taken.index(True)]
    assert not db.acquire_lease("s", "default", "late", ttl_s=60)
    assert db.release_lease("s", "default", winner)


def test_first_open_by_many_processes_migrates_once(schema: str) -> None:
    applied = _run(pg.open_store, [(pg.url(schema),) for _ in range(3)])
    assert sorted(applied, key=len) == [[]] * 2 + [[name for name, _ in MIGRATIONS]]
    store = PostgresStore(pg.url(schema))
    assert len(store.list_sessions()) == 3
    store.close()
    with pg.raw(schema) as conn:
        recorded = conn.execute(f"SELECT name FROM {MIGRATIONS_TABLE} ORDER BY name").fetchall()
    assert [row[0] for row in recorded] == [name for name, _ in MIGRATIONS]


def test_migrations_recorded_and_reopening_changes_nothing(schema: str) -> None:
    first = PostgresStore(pg.url(schema))
    assert first.applied == [name for name, _ in MIGRATIONS]
    first.create_session("s", encoding="o200k_base")
    first.append("s", [_user("kept")])
    first.close()
    with pg.raw(schema) as conn:
        before = conn.execute(f"SELECT name, applied_at FROM {MIGRATIONS_TABLE}").fetchall()
    again = PostgresStore(pg.url(schema))
    assert again.applied == []
    assert [m.message["content"] for m in again.messages("s")] == ["kept"]
    again.close()
    with pg.raw(schema) as conn:
        assert conn.execute(f"SELECT name, applied_at FROM {MIGRATIONS_TABLE}").fetchall() == before


def test_schema_of_a_newer_contextfold_refused(schema: str) -> None:
    PostgresStore(pg.url(schema)).close()
    with pg.raw(schema) as conn:
        conn.execute(f"INSERT INTO {MIGRATIONS_TABLE} VALUES ('999_future', 0)")
    with pytest.raises(StoreError, match="999_future"):
        PostgresStore(pg.url(schema))


def test_schema_of_another_application_left_alone(schema: str) -> None:
    with pg.raw("public") as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.sessions (token text)")
    with pytest.raises(StoreError, match="did not create"):
        PostgresStore(pg.url(schema))
    with pg.raw(schema) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        ).fetchall()
    assert tables == [("sessions",)]


def test_older_token_counts_recounted_on_open(schema: str) -> None:
    store = PostgresStore(pg.url(schema))
    store.create_session("s", encoding="o200k_base")
    message = {"role": "user", "content": "count me again, please"}
    store.append("s", [NewMessage(message, 1)])
    store.close()
    with pg.raw(schema) as conn:
        conn.execute("UPDATE contextfold_count_version SET version = 0")
    again = PostgresStore(pg.url(schema))
    from contextfold.core.tokens import get_counter

    fresh = get_counter("o200k_base").message(message)
    assert again.messages("s")[0].tokens == fresh > 1
    assert again.session_info("s").tokens == fresh
    again.close()


def test_server_down_is_a_store_error_naming_it() -> None:
    began = time.monotonic()
    with pytest.raises(StoreError, match=r"127\.0\.0\.1:1/"):
        PostgresStore("postgresql://postgres@127.0.0.1:1/test?timeout=1")
    assert time.monotonic() - began < 10


def test_closed_store_raises_store_error(db: PostgresStore) -> None:
    db.close()
    with pytest.raises(StoreError):
        db.append("s", [_user("after close")])


def test_driver_errors_do_not_escape(db: PostgresStore) -> None:
    name = secrets.token_hex(5000)  # a key too large for the server's index on view names
    with pytest.raises(StoreError) as info:
        db.put_view("s", name, {})
    assert not isinstance(info.value, psycopg.Error)
    assert isinstance(info.value.__cause__, psycopg.Error)
    assert db.list_views("s") == []


def _call(call_id: str) -> NewMessage:
    calls = [{"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    return NewMessage({"role": "assistant", "content": None, "tool_calls": calls}, 1)


def test_nul_characters_are_bad_input_naming_the_field(db: PostgresStore) -> None:
    """PostgreSQL text cannot hold NUL; SQLite can, so it is refused as input, not a failure."""
    before = db.messages("s")
    for call, index, field in [
        (lambda: db.create_session("a\x00b", encoding="o200k_base"), None, "session_id"),
        (lambda: db.append("s", [_user("ok"), _user("k", key="k\x00")]), 1, "key"),
        (lambda: db.append("s", [_call("c\x001")]), 0, "tool_calls"),
        (lambda: db.put_view("s", "v\x00", {}), None, "view"),
        (lambda: db.acquire_lease("s", "default", "o\x00"), None, "owner"),
        (lambda: db.get_session("a\x00b"), None, None),
        (lambda: db.append("s", [_user("half a pair: \ud800")]), None, None),
    ]:
        with pytest.raises(InvalidInput) as info:
            call()
        assert (info.value.index, info.value.field) == (index, field)
    assert db.messages("s") == before
    for sid in ("t", "t/a", "t/b"):
        db.create_session(sid, encoding="o200k_base")
    assert db.list_sessions(search="\x00") == []
    assert db.list_sessions("t\x00") == []
    assert db.list_sessions("t", after="t\x00z") == ["t/a", "t/b"]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("schema=1bad", "schema"),
        ("schema=has-dash", "schema"),
        ("pool_size=0", "pool_size"),
        ("pool_size=many", "pool_size"),
        ("timeout=-1", "timeout"),
        ("schema=a&schema=b", "schema"),
        ("durability=fast", "durability"),
    ],
)
def test_bad_url_options_name_the_field(query: str, field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        PostgresStore(f"{pg.SERVER}?{query}")
    assert info.value.field == field


@pytest.mark.parametrize(
    ("durability", "setting"), [(None, "on"), ("full", "on"), ("process", "off")]
)
def test_durability_sets_synchronous_commit(
    schema: str, durability: str | None, setting: str
) -> None:
    store = PostgresStore(pg.url(schema, **({"durability": durability} if durability else {})))
    with store._db.pool.connection() as conn:
        assert conn.execute("SHOW synchronous_commit").fetchone() == (setting,)
    store.close()


def test_open_store_opens_postgres_urls(schema: str) -> None:
    for scheme in ("postgresql", "postgres"):
        store = open_store(pg.url(schema).replace("postgresql", scheme, 1))
        assert isinstance(store, PostgresStore)
        assert store.schema == schema
        store.close()


def test_wake_for_a_postgres_store_listens_on_the_database(db: PostgresStore) -> None:
    wake = wake_for(db)
    assert isinstance(wake, PostgresWake)
    assert wake_for(db) is wake
    heard: list[str] = []
    stop = wake.listen("s", heard.append)
    assert wake.listening()
    other = PostgresStore(pg.url(db.schema))  # as another process would append
    other.create_session("q", encoding="o200k_base")
    other.append("q", [_user("not listened")])
    other.append("s", [_user("hello")])
    _wait_for(lambda: heard == ["s"])
    db.append("s", [_user("our own")])
    wake.notify("s")  # what Session.append does: the local fan-out; the echo is dropped
    other.append("s", [_user("after ours")])
    _wait_for(lambda: heard == ["s", "s", "s"])
    time.sleep(wake.poll_s * 2)
    assert heard == ["s", "s", "s"]
    assert db.append("s", [_user("k", key="k")])[0].seq == 4
    assert db.append("s", [_user("k", key="k")])[0].seq == 4  # a retry, nothing new: no echo
    other.append("s", [_user("heard though we expected an echo")])
    _wait_for(lambda: len(heard) == 4)  # the echoes of ours dropped, the other heard
    time.sleep(wake.poll_s * 2)
    assert len(heard) == 4
    stop()
    other.close()


def test_an_echo_given_up_wakes_for_what_it_hid(db: PostgresStore) -> None:
    wake = db.wake()
    heard: list[str] = []
    stop = wake.listen("s", heard.append)
    assert wake.expect_echo("s")  # an append of ours about to notify...
    other = PostgresStore(pg.url(db.schema))
    other.append("s", [_user("theirs")])  # ...and theirs, taken for our echo
    time.sleep(wake.poll_s * 2)
    assert heard == []
    wake.echo_lost("s")  # ours failed: theirs must still wake us
    assert heard == ["s"]
    stop()
    other.close()


def test_append_in_another_process_wakes_a_runner_here(db: PostgresStore) -> None:
    memory = Memory(db)
    session = memory.session("s")
    view = summarizing_view(session, ScriptedModel(default="short"))
    runner = ThreadRunner(workers=1)
    runner.watch(view)
    assert view.folds() == []
    rounds = SummarizeRounds().threshold + 2
    with SPAWN.Pool(1) as pool:
        last = pool.apply(pg.chat_elsewhere, (pg.url(db.schema), rounds, 0.0))
    assert last == 2 * rounds
    _wait_for(view.folds)
    assert runner.stop()
    # Folded from the start, up to the end of a round before the two it keeps.
    ((start, end),) = [(f.start, f.end) for f in view.folds()]
    assert start == 1
    assert end % 2 == 0 and end <= 2 * rounds - 4


@pytest.mark.parametrize(
    ("prefix", "bound"),
    [
        ("", None),
        ("t/", "t0"),
        ("a\U0010ffff", "b"),
        ("\U0010ffff", None),
        ("x\ud7ff", "x\ue000"),
    ],
)
def test_listing_bound_is_the_least_id_past_the_prefix(prefix: str, bound: str | None) -> None:
    assert below(prefix) == bound


def test_listing_reads_only_the_prefix_range(db: PostgresStore) -> None:
    for sid in ("t/a", "t/b", "t0", "t\U0010ffff", "u"):
        db.create_session(sid, encoding="o200k_base")
    assert db.list_sessions("t/") == ["t/a", "t/b"]
    assert db.list_sessions("t") == ["t/a", "t/b", "t0", "t\U0010ffff"]
    assert db.list_sessions("t", after="t0", search="\U0010ffff") == ["t\U0010ffff"]


def test_connections_the_server_dropped_are_replaced(db: PostgresStore) -> None:
    db.append("s", [_user("before")])
    with pg.raw(db.schema) as conn:
        dropped = conn.execute(
            "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s",
            (db.options.application_name,),
        ).fetchone()
    assert dropped is not None and dropped[0] >= 1
    time.sleep(CHECK_IDLE_S * 1.5)  # a connection in use within the second is not checked
    for i in range(12):  # more than the pool holds: no call gets a dead connection
        db.append("s", [_user(f"after {i}")])
    assert db.last_seq("s") == 13


def _wait_for(check: Any) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_listener_reconnects_and_wakes_what_it_may_have_missed(db: PostgresStore) -> None:
    wake = db.wake()
    heard: list[str] = []
    stop = wake.listen("s", heard.append)
    with pg.raw(db.schema) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = %s AND query LIKE 'LISTEN%%'",
            (db.options.application_name,),
        )
    _wait_for(lambda: heard == ["s"])  # an append may have come while it was away
    _wait_for(wake.listening)
    other = PostgresStore(pg.url(db.schema))
    other.append("s", [_user("from elsewhere")])
    _wait_for(lambda: heard == ["s", "s"])
    other.close()
    stop()


_WITHOUT_PSYCOPG = """
import sys
import contextfold, contextfold.store
assert "psycopg" not in sys.modules, "psycopg imported before a PostgreSQL URL was opened"
sys.modules["psycopg"] = None  # as if it were not installed
try:
    contextfold.store.open_store("postgresql://postgres@127.0.0.1:5432/test")
except ImportError as exc:
    print(exc)
"""


def test_without_psycopg_the_error_names_the_extra() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT_PSYCOPG], capture_output=True, text=True, check=True
    )
    assert "pip install 'contextfold[postgres]'" in out.stdout


def test_calls_in_turn_reuse_one_connection(db: PostgresStore) -> None:
    for i in range(30):
        db.append("s", [_user(f"m{i}")])
        db.head("s", "default")
    assert db._db.pool.get_stats()["pool_size"] == 1
