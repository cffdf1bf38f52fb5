"""What Memory and Session give the interfaces: opening without creating, listings,
pages of the log, view records, idempotency keys and API keys."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from contextfold import InvalidInput, Memory, NotFound
from contextfold.core.log import ApiKey
from contextfold.store.base import SERVICE_METHODS, Abilities
from contextfold.store.ram import RAMStore


def test_existing_session_opens_what_exists_and_creates_nothing() -> None:
    memory = Memory(encoding="approx")
    with pytest.raises(NotFound):
        memory.existing_session("ghost")
    assert memory.sessions() == []
    made = memory.session("s1", encoding="cl100k_base")
    made.append({"role": "user", "content": "hi"})
    found = memory.existing_session("s1")
    assert (found.id, found.counter.name, found.created_at) == (
        "s1",
        "cl100k_base",
        made.created_at,
    )
    assert found.last_seq() == 1
    with pytest.raises(InvalidInput) as err:
        memory.existing_session("")
    assert err.value.field == "session_id"


def test_sessions_page_by_prefix_after_limit_and_search() -> None:
    memory = Memory(encoding="approx")
    for sid in ("a/one", "a/Two", "a/three", "b/one"):
        memory.session(sid)
    assert memory.sessions("a/") == ["a/Two", "a/one", "a/three"]
    assert memory.sessions("a/", after="a/Two", limit=1) == ["a/one"]
    assert memory.sessions("a/", search="t") == ["a/Two", "a/three"]
    with pytest.raises(InvalidInput) as err:
        memory.sessions(limit=0)
    assert err.value.field == "limit"


def test_session_info_counts_the_log() -> None:
    memory = Memory(encoding="approx")
    session = memory.session("s", system="Be brief.", meta={"team": "x"})
    session.append({"role": "user", "content": "hello there"})
    info = session.info()
    assert info == memory.session_info("s")
    assert (info.id, info.messages, info.last_seq, info.meta) == ("s", 2, 2, {"team": "x"})
    assert info.tokens == sum(m.tokens for m in session.messages())
    with pytest.raises(NotFound):
        memory.session_info("ghost")


def test_messages_are_read_a_page_at_a_time() -> None:
    memory = Memory(encoding="approx")
    session = memory.session("s")
    session.extend([{"role": "user", "content": str(i)} for i in range(5)])
    assert [m.seq for m in session.messages()] == [1, 2, 3, 4, 5]
    assert [m.seq for m in session.messages(after=1, limit=2)] == [2, 3]
    assert [m.message["content"] for m in session.messages(after=3)] == ["3", "4"]
    assert session.messages(after=5) == []
    for bad, field in (
        ({"after": -1}, "after"),
        ({"limit": 0}, "limit"),
        ({"after": "1"}, "after"),
    ):
        with pytest.raises(InvalidInput) as err:
            session.messages(**bad)
        assert err.value.field == field


def test_keyed_answers_which_keys_are_taken_and_by_what() -> None:
    session = Memory(encoding="approx").session("s")
    session.extend([{"role": "user", "content": "a"}], keys=["k:0"])
    found = session.keyed(["k:0", "k:1"])
    assert list(found) == ["k:0"]
    assert found["k:0"].message == {"role": "user", "content": "a"}
    with pytest.raises(InvalidInput) as err:
        session.keyed(["k:0", None])  # type: ignore[list-item]
    assert err.value.field == "keys[1]"


def test_view_records_are_read_without_opening_views() -> None:
    session = Memory(encoding="approx").session("s")
    assert (session.view_records(), session.view_record("plain")) == ([], None)
    session.view("plain", preset="offline", budget=900)
    session.view("plain", budget=800)
    record = session.view_record("plain")
    assert record is not None
    assert (record.name, record.version, record.config["budget"]) == ("plain", 2, 800)
    assert session.view_records() == [record]
    with pytest.raises(InvalidInput) as err:
        session.view_record("")
    assert err.value.field == "view"


def test_api_keys_are_kept_through_the_memory(tmp_path: Path) -> None:
    with Memory(str(tmp_path / "keys.db"), encoding="approx") as memory:
        keys = memory.api_keys
        keys.put(ApiKey("k1", "t1", "hash1", "ci", time.time()))
        keys.put(ApiKey("k2", "t2", "hash2", "", time.time() + 1))
        with pytest.raises(InvalidInput) as err:
            keys.put(ApiKey("k1", "t3", "hash3"))
        assert err.value.field == "id"
        assert keys.get("k1") is not None and keys.get("nope") is None
        assert [k.id for k in keys.listing()] == ["k1", "k2"]
        assert [k.id for k in keys.listing("t2")] == ["k2"]
        assert keys.revoke("k1") and not keys.revoke("k1")
    with Memory(str(tmp_path / "keys.db"), encoding="approx") as again:
        stored = again.api_keys.get("k1")
        assert stored is not None and stored.revoked_at is not None


class LibraryOnly:
    """A user's store written for the library: the service's methods are missing, and
    it declares no ability (``Abilities()``)."""

    abilities = Abilities()

    def __init__(self) -> None:
        self._inner = RAMStore()

    def __getattr__(self, name: str) -> Any:
        if name in SERVICE_METHODS:
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_a_library_only_store_serves_the_library_and_names_what_the_service_lacks() -> None:
    memory = Memory(LibraryOnly(), encoding="approx")
    session = memory.session("s")
    session.append({"role": "user", "content": "hi"})
    assert [m.seq for m in session.messages()] == [1]
    for ask in (
        memory.sessions,
        lambda: memory.session_info("s"),
        lambda: memory.api_keys.get("k"),
        lambda: memory.api_keys.put(ApiKey("k", "t", "h")),
    ):
        with pytest.raises(InvalidInput) as err:
            ask()
        assert err.value.field == "store"
        assert "LibraryOnly" in err.value.reason
        assert "list_sessions" in err.value.reason and "revoke_api_key" in err.value.reason
    assert session.last_seq() == 1


def test_in_process_says_whether_reads_wait_on_a_network(tmp_path: Path) -> None:
    assert Memory(encoding="approx").in_process
    with Memory(str(tmp_path / "f.db"), encoding="approx") as on_file:
        assert on_file.in_process
    assert not Memory(LibraryOnly(), encoding="approx").in_process
