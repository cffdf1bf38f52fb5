"""Opening stores by URL: the built-in schemes, the refusals, and a third party's scheme."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextfold.core.errors import InvalidInput, StoreError
from contextfold.memory.session import Memory
from contextfold.store import RAMStore, SQLiteStore, Store, open_store, register_store, registry


@pytest.fixture(autouse=True)
def own_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations made by a test stay in that test."""
    monkeypatch.setattr(registry, "_FACTORIES", dict(registry._FACTORIES))


@pytest.fixture
def opened() -> Iterator[list[Store]]:
    """Stores a test opened, closed when it ends."""
    stores: list[Store] = []
    yield stores
    for store in stores:
        store.close()


def sqlite_at(url: Any, opened: list[Store]) -> SQLiteStore:
    store = open_store(url)
    opened.append(store)
    assert isinstance(store, SQLiteStore)
    return store


def refused(url: Any) -> InvalidInput:
    with pytest.raises(InvalidInput) as info:
        open_store(url)
    assert info.value.field == "url"
    return info.value


def test_none_and_memory_url_open_fresh_ram_stores() -> None:
    first, second, third = open_store(None), open_store(), open_store("memory://")
    assert all(isinstance(s, RAMStore) for s in (first, second, third))
    first.create_session("s", encoding="o200k_base")
    assert second.list_sessions() == third.list_sessions() == []


def test_memory_url_takes_nothing_after_the_scheme() -> None:
    assert "memory://" in str(refused("memory://somewhere"))


def test_sqlite_urls_and_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, opened: list[Store]
) -> None:
    monkeypatch.chdir(tmp_path)
    absolute = tmp_path / "abs.db"
    assert sqlite_at(f"sqlite://{absolute}", opened).path == str(absolute)
    assert sqlite_at("sqlite://relative.db", opened).path == "relative.db"
    assert sqlite_at("plain.db", opened).path == "plain.db"
    assert sqlite_at(tmp_path / "from-path.db", opened).path == str(tmp_path / "from-path.db")
    assert sqlite_at("SQLite://upper.db", opened).path == "upper.db"
    names = {"abs.db", "relative.db", "plain.db", "from-path.db", "upper.db"}
    assert names <= {p.name for p in tmp_path.iterdir()}
    assert {s.durability for s in opened if isinstance(s, SQLiteStore)} == {"process"}


def test_sqlite_durability_option(tmp_path: Path, opened: list[Store]) -> None:
    assert sqlite_at(f"sqlite://{tmp_path}/a.db?durability=full", opened).durability == "full"
    assert sqlite_at(f"{tmp_path}/b.db?durability=full", opened).durability == "full"
    assert sqlite_at(f"{tmp_path}/c.db?durability=process", opened).durability == "process"
    assert not (tmp_path / "b.db?durability=full").exists()


def test_a_path_object_is_taken_exactly(tmp_path: Path, opened: list[Store]) -> None:
    odd = tmp_path / "odd?durability=full"
    store = sqlite_at(odd, opened)
    assert (store.path, store.durability) == (str(odd), "process")
    assert odd.is_file()


@pytest.mark.parametrize(
    "query", ["mode=ro", "durability=full&durability=process", "durability", "a=1&durability=full"]
)
def test_unknown_or_repeated_sqlite_options_refused(tmp_path: Path, query: str) -> None:
    assert "durability=process|full" in str(refused(f"sqlite://{tmp_path}/x.db?{query}"))
    assert list(tmp_path.iterdir()) == []


def test_bad_durability_in_a_url_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as info:
        open_store(f"sqlite://{tmp_path}/x.db?durability=fast")
    assert info.value.field == "durability"


@pytest.mark.parametrize("url", ["sqlite://", "", "sqlite://?durability=full"])
def test_sqlite_without_a_path_refused(url: str) -> None:
    assert "no database path" in str(refused(url))


@pytest.mark.parametrize("url", ["postgresql://u@db/app", "postgres://localhost/app"])
def test_postgres_urls_checked_before_connecting(url: str) -> None:
    pytest.importorskip("psycopg")
    for option, field in (("schema=not-a-name", "schema"), ("durability=fast", "durability")):
        with pytest.raises(InvalidInput) as info:
            open_store(f"{url}?{option}")
        assert info.value.field == field


def test_unreachable_postgres_is_a_store_error() -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(StoreError, match=r"127\.0\.0\.1:1/"):
        open_store("postgresql://u@127.0.0.1:1/app?timeout=0.5")


def test_unknown_scheme_lists_the_known_ones() -> None:
    message = str(refused("redis://localhost:6379/0"))
    assert "'redis'" in message
    assert "['memory', 'postgres', 'postgresql', 'sqlite']" in message


def test_not_a_url_refused() -> None:
    assert "not int" in str(refused(42))


def test_third_party_scheme_gets_the_whole_url() -> None:
    seen: list[str] = []
    made = RAMStore()

    def factory(url: str) -> Store:
        seen.append(url)
        return made

    register_store("acme+kv", factory)
    assert open_store("ACME+KV://host:1/db?pool=4") is made
    assert seen == ["ACME+KV://host:1/db?pool=4"]
    assert "acme+kv" in str(refused("nope://x"))


def test_a_registered_backend_replaces_a_built_in_one() -> None:
    made = RAMStore()
    register_store("postgresql", lambda url: made)
    assert open_store("postgresql://u@db/app") is made
    pytest.importorskip("psycopg")
    with pytest.raises(InvalidInput) as info:  # the other scheme still opens the built-in one
        open_store("postgres://u@db/app?schema=1")
    assert info.value.field == "schema"


@pytest.mark.parametrize("scheme", ["", "Acme", "two words", "acme://", "1db", None])
def test_scheme_names_checked(scheme: Any) -> None:
    with pytest.raises(InvalidInput) as info:
        register_store(scheme, lambda url: RAMStore())
    assert info.value.field == "scheme"


def test_memory_opens_what_open_store_opens(tmp_path: Path) -> None:
    assert isinstance(Memory().store, RAMStore)
    assert isinstance(Memory("memory://").store, RAMStore)
    mine = RAMStore()
    assert Memory(mine).store is mine
    with Memory(f"sqlite://{tmp_path}/m.db?durability=full") as memory:
        assert isinstance(memory.store, SQLiteStore)
        assert memory.store.durability == "full"
        memory.session("s", system="You help.")
    with Memory(tmp_path / "m.db") as again:
        assert again.store.list_sessions() == ["s"]
    with pytest.raises(InvalidInput):
        Memory("postgresql://u@db/app?pool_size=0")
