"""Every store backend against the shared contract, then what only SQLite promises."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
from old_files import old_file

from contextfold.core.errors import InvalidInput, StoreError
from contextfold.core.folds import Fold
from contextfold.core.log import NewMessage
from contextfold.store import RAMStore, SQLiteStore, Store
from contextfold.store.sqlite import store as sqlite_store
from contextfold.store.sqlite.migrations import MIGRATIONS, migrate
from contextfold.store.sqlite.sql import LAST_OF_ROLE_SQL, MESSAGES_BEFORE_SQL
from contextfold.testing.store_contract import StoreContract


class TestContract(StoreContract):
    """The shipped contract, once per backend and durability."""

    @pytest.fixture(params=["memory", "sqlite-process", "sqlite-full"])
    def store(self, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
        backend: Store
        if request.param == "memory":
            backend = RAMStore()
        else:
            durability = request.param.removeprefix("sqlite-")
            backend = SQLiteStore(tmp_path / "store.db", durability=durability)
        yield backend
        backend.close()

    def store_url(self, store: Store) -> str | None:
        if isinstance(store, SQLiteStore):
            return f"sqlite://{Path(store.path).resolve()}?durability={store.durability}"
        return None  # the RAM store lives in one process

    def delete_message(self, store: Store, session_id: str, seq: int) -> None:
        if isinstance(store, SQLiteStore):
            with _raw(store) as raw:
                raw.execute(
                    "DELETE FROM messages WHERE session_id = ? AND seq = ?", (session_id, seq)
                )
        else:
            assert isinstance(store, RAMStore)
            log = store._log[session_id]
            log[:] = [m for m in log if m.seq != seq]

    def damage_fold(self, store: Store, session_id: str, view: str, fold_id: str) -> None:
        if isinstance(store, SQLiteStore):
            with _raw(store) as raw:
                raw.execute("UPDATE folds SET fold = '{\"start\": ' WHERE id = ?", (fold_id,))
        else:
            assert isinstance(store, RAMStore)
            folds = store._folds[(session_id, view)]
            folds[:] = [{"id": fold_id} if f.id == fold_id else f for f in folds]  # type: ignore[misc]


_AUTHOR_TESTS = """
import pytest
from contextfold.store import RAMStore
from contextfold.store.base import Abilities
from contextfold.store.wake import LocalWake
from contextfold.testing.store_contract import StoreContract


class Forgetful(RAMStore):
    def head(self, session_id, view, *, branch=None):
        return super().head(session_id, view, branch=branch)._replace(view_version=0)


class LibraryOnly(RAMStore):
    abilities = Abilities(in_process=True)


class Boastful(RAMStore):
    abilities = Abilities(wake_across_processes=True, in_process=True, service=True)

    def wake(self):
        return LocalWake()


class TestMyStore(StoreContract):
    @pytest.fixture
    def store(self):
        return RAMStore()


class TestForgetfulStore(StoreContract):
    @pytest.fixture
    def store(self):
        return Forgetful()


class TestLibraryOnlyStore(StoreContract):
    @pytest.fixture
    def store(self):
        return LibraryOnly()


class TestBoastfulStore(StoreContract):
    @pytest.fixture
    def store(self):
        return Boastful()
"""


def test_a_backend_author_runs_the_shipped_contract(tmp_path: Path) -> None:
    """As the module docstring tells a backend's author, outside this repository's tests."""
    (tmp_path / "test_mystore.py").write_text(_AUTHOR_TESTS, encoding="utf-8")
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml=out.xml"],
        cwd=tmp_path,
        capture_output=True,
    )
    results: dict[str, dict[str, bool]] = {}
    skipped: dict[str, set[str]] = {}
    for case in ElementTree.parse(tmp_path / "out.xml").iter("testcase"):
        passed = case.find("failure") is None and case.find("error") is None
        results.setdefault(case.get("classname", ""), {})[case.get("name", "")] = passed
        if case.find("skipped") is not None:
            skipped.setdefault(case.get("classname", ""), set()).add(case.get("name", ""))
    mine, forgetful, library_only, boastful = (
        results.pop("test_mystore.TestMyStore"),
        results.pop("test_mystore.TestForgetfulStore"),
        results.pop("test_mystore.TestLibraryOnlyStore"),
        results.pop("test_mystore.TestBoastfulStore"),
    )
    assert results == {}
    # A store serving the library alone passes, the service's port skipped; one
    # claiming a wake across processes it cannot give fails that check alone.
    assert all(library_only.values())
    service_tests = {
        name.partition("[")[0]
        for name in skipped["test_mystore.TestLibraryOnlyStore"]
        - skipped["test_mystore.TestMyStore"]
    }
    assert "test_api_keys_stored_by_id" in service_tests
    assert "test_recreated_session_starts_a_new_log" not in service_tests
    assert sorted(name for name, ok in boastful.items() if not ok) == [
        "test_a_declared_cross_process_wake_hears_another_process"
    ]
    contract = {name for name in dir(StoreContract) if name.startswith("test_")}
    assert {name.partition("[")[0] for name in mine} == contract
    assert all(mine.values())
    assert mine.keys() == forgetful.keys()
    failed = sorted(name for name, ok in forgetful.items() if not ok)
    assert failed == [
        "test_head_is_last_seq_fold_version_and_view_version",
        "test_put_view_versions_from_one",
    ]


def test_the_testing_package_does_not_import_pytest() -> None:
    code = "import sys, contextfold.testing; sys.exit('pytest' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.fixture
def db(tmp_path: Path) -> Iterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "log.db")
    opened.create_session("s", encoding="o200k_base")
    yield opened
    opened.close()


def _user(text: str, key: str | None = None) -> NewMessage:
    return NewMessage({"role": "user", "content": text}, 1, key)


def _fold(start: int, end: int) -> Fold:
    text = f"{start}..{end}"
    return Fold(
        "default", start, end, "summary", text, ({"role": "user", "content": text},), "t", 9, 1
    )


def _raw(store: SQLiteStore) -> sqlite3.Connection:
    """A second connection to the file, as another process would have."""
    return sqlite3.connect(store.path, isolation_level=None)


def test_reopen_keeps_everything(tmp_path: Path) -> None:
    path = tmp_path / "keep.db"
    first = SQLiteStore(path)
    first.create_session("s", encoding="cl100k_base", meta={"user": "ann"})
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    logged = first.append(
        "s",
        [
            _user("q", key="k"),
            NewMessage({"role": "assistant", "content": None, "tool_calls": [call]}, 5),
        ],
    )
    old, cover = _fold(1, 1), _fold(1, 2)
    first.commit_folds("s", "default", [old], 0)
    first.commit_folds("s", "default", [cover], 1)
    first.close()

    again = SQLiteStore(path)
    assert again.get_session("s").meta == {"user": "ann"}
    assert again.messages("s") == logged
    with _raw(again) as raw:
        assert raw.execute("SELECT call_id FROM tool_calls WHERE session_id = 's'").fetchall() == [
            ("c1",)
        ]
    assert again.head("s", "default").fold_version == 2
    assert again.folds("s", "default") == [cover]
    assert again.folds("s", "default", include_superseded=True)[0].superseded_by == cover.id
    assert again.append("s", [_user("q", key="k")]) == logged[:1]  # a retry
    assert again.append("s", [_user("next")])[0].seq == 3
    again.close()


def test_relative_path_without_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = SQLiteStore("plain.db")
    store.create_session("s", encoding="o200k_base")
    store.close()
    assert (tmp_path / "plain.db").is_file()
    reopened = SQLiteStore("plain.db")
    assert reopened.list_sessions() == ["s"]
    reopened.close()


def test_migrations_recorded_once(db: SQLiteStore) -> None:
    names = [name for name, _ in MIGRATIONS]
    with _raw(db) as raw:
        assert [r[0] for r in raw.execute("SELECT name FROM _migrations ORDER BY name")] == names
        assert migrate(raw) == []
    SQLiteStore(db.path).close()
    with _raw(db) as raw:
        assert raw.execute("SELECT COUNT(*) FROM _migrations").fetchone()[0] == len(names)


def test_file_from_newer_version_refused(db: SQLiteStore) -> None:
    with _raw(db) as raw:
        raw.execute("INSERT INTO _migrations VALUES ('999_future', 0)")
    with pytest.raises(StoreError, match="999_future"):
        SQLiteStore(db.path)


def test_wal_mode_and_foreign_keys(db: SQLiteStore) -> None:
    with _raw(db) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with db._read() as conn:
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1


@pytest.mark.parametrize(
    ("options", "durability", "synchronous"),
    [
        ({}, "process", 1),
        ({"durability": "process"}, "process", 1),
        ({"durability": "full"}, "full", 2),
    ],
)
def test_durability_sets_synchronous(
    tmp_path: Path, options: dict[str, Any], durability: str, synchronous: int
) -> None:
    store = SQLiteStore(tmp_path / "d.db", **options)
    with store._read() as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == synchronous
    assert store.durability == durability
    store.close()


def test_default_durability_survives_a_killed_process(tmp_path: Path) -> None:
    path = tmp_path / "killed.db"
    child = (
        "import os, sys\n"
        "from contextfold.core.log import NewMessage\n"
        "from contextfold.store.sqlite import SQLiteStore\n"
        "store = SQLiteStore(sys.argv[1])\n"
        "store.create_session('s', encoding='o200k_base')\n"
        "store.append('s', [NewMessage({'role': 'user', 'content': 'kept'}, 1)])\n"
        "os._exit(9)\n"
    )
    done = subprocess.run([sys.executable, "-c", child, str(path)], capture_output=True)
    assert done.returncode == 9, done.stderr.decode()
    reopened = SQLiteStore(path)
    assert [m.message["content"] for m in reopened.messages("s")] == ["kept"]
    reopened.close()


@pytest.mark.parametrize("durability", ["fast", "FULL", "", None, 2])
def test_unknown_durability_refused_before_the_file_is_made(
    tmp_path: Path, durability: Any
) -> None:
    with pytest.raises(InvalidInput) as info:
        SQLiteStore(tmp_path / "never.db", durability=durability)
    assert info.value.field == "durability"
    assert not (tmp_path / "never.db").exists()


def test_file_from_before_views_is_upgraded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    users = [{"role": "user", "content": text} for text in "ab"]
    old_file(path, 2, users, (_fold(1, 2),))
    store = SQLiteStore(path)
    assert store.head("s", "default")[:3] == (2, 1, 0)
    assert store.list_views("s") == []
    assert store.put_view("s", "default", {"budget": 10}, expected_version=0).version == 1
    store.close()


def _statements(store: SQLiteStore, call: Callable[[], object]) -> list[str]:
    """The SQL ``call`` runs, as the driver sends it."""
    sent: list[str] = []
    with store._read() as conn:
        conn.set_trace_callback(sent.append)
    try:
        call()
    finally:
        with store._read() as conn:
            conn.set_trace_callback(None)
    return sent


def test_reads_are_one_statement(db: SQLiteStore) -> None:
    """What render and the runtime call often costs one round trip, not two."""
    db.append("s", [_user("a"), _user("b")])
    db.commit_folds("s", "default", [_fold(1, 2)], 0)
    db.put_view("s", "default", {"budget": 10})
    for call in (
        lambda: db.head("s", "default"),
        lambda: db.last_seq("s"),
        lambda: db.get_session("s"),
        lambda: db.get_view("s", "default"),
        lambda: db.get_view("s", "missing"),
        lambda: db.list_views("s"),
        lambda: db.messages("s"),
        lambda: db.messages_before("s", 3, 10),
        lambda: db.last_of_role("s", "user"),
        lambda: db.folds("s", "default"),
        lambda: db.search("s", "a"),
    ):
        assert len(_statements(db, call)) == 1
    assert db.head("s", "default")[:3] == (2, 1, 1)
    appended = _statements(db, lambda: db.append("s", [_user("c")]))
    # The session row keeps the last seq handed out, so a deleted row never frees it;
    # the message's words go to the search index (whose own statements start "--"),
    # and are counted for the session (the last INSERT).
    expected = ["BEGIN", "SELECT", "INSERT", "INSERT", "UPDATE", "INSERT", "COMMIT"]
    assert [sql.split()[0] for sql in appended if not sql.startswith("--")] == expected


def test_not_a_database_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError) as info:
        SQLiteStore(path)
    assert isinstance(info.value.__cause__, sqlite3.DatabaseError)


def test_closed_store_refuses_calls(db: SQLiteStore) -> None:
    db.close()
    db.close()
    with pytest.raises(StoreError, match="closed"):
        db.last_seq("s")


def test_unserializable_message_leaves_log_unchanged(db: SQLiteStore) -> None:
    db.append("s", [_user("a")])
    bad = NewMessage({"role": "user", "content": "x", "meta": {"tags": {1, 2}}}, 1)
    with pytest.raises(InvalidInput) as info:
        db.append("s", [_user("b"), bad])
    assert (info.value.index, info.value.field) == (1, "message")
    assert [m.message["content"] for m in db.messages("s")] == ["a"]


def test_driver_failure_mid_append_rolls_back(db: SQLiteStore) -> None:
    db.append("s", [_user("a")])
    with _raw(db) as raw:
        raw.execute(
            "CREATE TRIGGER boom BEFORE INSERT ON messages WHEN NEW.seq = 3 "
            "BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
        )
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    batch = [NewMessage({"role": "assistant", "content": None, "tool_calls": [call]}, 1)]
    with pytest.raises(StoreError, match="disk on fire") as info:
        db.append("s", [*batch, _user("c")])
    assert isinstance(info.value.__cause__, sqlite3.IntegrityError)
    assert db.last_seq("s") == 1
    with _raw(db) as raw:
        assert raw.execute("SELECT call_id FROM tool_calls").fetchall() == []
    with _raw(db) as raw:
        raw.execute("DROP TRIGGER boom")
    assert [m.seq for m in db.append("s", [_user("b")])] == [2]


def test_driver_failure_mid_commit_rolls_back(db: SQLiteStore) -> None:
    db.append("s", [_user(str(i)) for i in range(6)])
    old = _fold(1, 2)
    db.commit_folds("s", "default", [old], 0)
    with _raw(db) as raw:
        raw.execute(
            "CREATE TRIGGER boom BEFORE INSERT ON folds WHEN NEW.start_seq = 5 "
            "BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
        )
    with pytest.raises(StoreError, match="disk on fire"):
        db.commit_folds("s", "default", [_fold(1, 4), _fold(5, 6)], 1)
    assert db.head("s", "default").fold_version == 1
    assert db.folds("s", "default", include_superseded=True) == [old]


def test_fold_id_stored_twice_refused(db: SQLiteStore) -> None:
    db.append("s", [_user("a"), _user("b")])
    fold = _fold(1, 1)
    db.commit_folds("s", "default", [fold], 0)
    with pytest.raises(InvalidInput) as info:
        db.commit_folds("s", "other", [Fold.from_dict({**fold.to_dict(), "view": "other"})], 0)
    assert info.value.field == "id"
    assert db.head("s", "other").fold_version == 0


@pytest.mark.parametrize(
    ("sql", "params"), [(MESSAGES_BEFORE_SQL, ("s", 10, 5)), (LAST_OF_ROLE_SQL, ("s", "user"))]
)
def test_newest_first_reads_walk_an_index(
    db: SQLiteStore, sql: str, params: tuple[object, ...]
) -> None:
    """Render reads the newest messages; their cost must not grow with the log."""
    with _raw(db) as raw:
        plan = " ".join(row[3] for row in raw.execute(f"EXPLAIN QUERY PLAN {sql}", params))
    assert "USING INDEX" in plan or "USING PRIMARY KEY" in plan
    assert "TEMP B-TREE" not in plan


def _assert_gapless(store: SQLiteStore, writers: int, each: int) -> None:
    logged = store.messages("s")
    assert [m.seq for m in logged] == list(range(1, writers * each + 1))
    for w in range(writers):
        mine = [m.message["content"] for m in logged if m.message["content"].startswith(f"w{w}-")]
        assert mine == [f"w{w}-{i}" for i in range(each)]


@pytest.mark.parametrize("shared", [True, False], ids=["one-store", "store-per-thread"])
def test_threads_append_gapless(db: SQLiteStore, shared: bool) -> None:
    writers, each = 4, 50
    start = threading.Barrier(writers)
    errors: list[BaseException] = []

    def write(w: int) -> None:
        mine = db if shared else SQLiteStore(db.path)
        try:
            start.wait()
            for i in range(each):
                mine.append("s", [_user(f"w{w}-{i}")])
        except BaseException as exc:
            errors.append(exc)
        finally:
            if not shared:
                mine.close()

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    _assert_gapless(db, writers, each)


_CHILD = """
import sys, time
from pathlib import Path
from contextfold.core.log import NewMessage
from contextfold.store.sqlite import SQLiteStore

path, name, each, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
store = SQLiteStore(path)
Path(f"{go}.{name}").touch()
while not go.exists():
    time.sleep(0.001)
for i in range(each):
    store.append("s", [NewMessage({"role": "user", "content": f"{name}-{i}"}, 1)])
    time.sleep(0.001)  # let the other writers take the lock between appends
store.close()
"""


def test_processes_append_gapless(db: SQLiteStore, tmp_path: Path) -> None:
    writers, each, go = 3, 60, tmp_path / "go"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, db.path, f"w{w}", str(each), str(go)],
            stderr=subprocess.PIPE,
        )
        for w in range(writers)
    ]
    deadline = time.monotonic() + 60
    while not all(Path(f"{go}.w{w}").exists() for w in range(writers)):
        assert time.monotonic() < deadline, "writers never got ready"
        assert all(child.poll() is None for child in children), "a writer died"
        time.sleep(0.01)
    go.touch()
    for child in children:
        _, err = child.communicate(timeout=120)
        assert child.returncode == 0, err.decode()
    _assert_gapless(db, writers, each)


def test_a_commit_reads_the_folds_near_it_not_every_fold(
    db: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Linear commits at scale: no statement of a commit reads a fold's body, and the
    spans it reads are those around the new fold, however many folds the view holds."""
    db.append("s", [_user(str(i)) for i in range(3_000)])
    db.commit_folds("s", "default", [_fold(2 * i + 1, 2 * i + 2) for i in range(1_000)], 0)
    fetched: list[int] = []
    original = sqlite_store.spans_near

    def counted(*args: Any) -> Any:
        spans = original(*args)
        fetched.append(len(spans))
        return spans

    monkeypatch.setattr(sqlite_store, "spans_near", counted)
    sent = _statements(db, lambda: db.commit_folds("s", "default", [_fold(1001, 1004)], 1))
    reads = [sql for sql in sent if sql.startswith("SELECT")]
    assert reads and not any("SELECT fold" in sql or "placement, fold" in sql for sql in reads)
    assert fetched == [3]  # the fold before the range and the two it covers
    assert [(f.start, f.end) for f in db.folds("s", "default")][500:502] == [
        (1001, 1004),
        (1005, 1006),
    ]
