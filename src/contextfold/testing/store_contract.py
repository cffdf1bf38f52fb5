"""The Store contract as pytest tests, shipped so that any backend can prove itself.

A backend keeps the promises of ``contextfold.store.base.Store`` (and of
``ServiceStore`` when its ``abilities`` declare ``service``; those tests are
skipped otherwise) when a subclass of ``StoreContract`` passes. The subclass supplies a ``store`` fixture that
gives each test a fresh store with no sessions in it::

    import pytest
    from contextfold.testing.store_contract import StoreContract

    class TestMyStore(StoreContract):
        @pytest.fixture
        def store(self):
            return MyStore("mystore://localhost/test")  # fresh and empty

Two promises need a way to damage what a backend stores, which only its
author knows: override ``delete_message`` (remove a logged row, as a careless
hand in the database would) and ``damage_fold`` (make a fold unreadable);
left alone, the tests that need them are skipped. The concurrent cases run
two writers in threads, and in processes when ``store_url`` gives a URL that
opens the same store in another process (``open_store``); a store declaring
``wake_across_processes`` must give one, and its wake must hear such a process.

The promises are grouped by theme: the log here, folds (``store_contract_folds``),
views and leases (``store_contract_views``), the order rules
(``store_contract_order``), the log as a tree (``store_contract_branches``), racing writers (``store_contract_concurrent``),
search (``store_contract_search``), the service's port (``store_contract_admin``)
and the declared abilities (``store_contract_abilities``).

Run it with ``pytest``. For pytest's detailed assertion messages, add
``pytest.register_assert_rewrite("contextfold.testing.store_contract")`` to
your ``conftest.py``. This module needs pytest; ``contextfold.testing`` itself
does not import it.
"""

from __future__ import annotations

from typing import Any

import pytest

from contextfold.core.errors import InvalidInput, NotFound, StoreError
from contextfold.core.log import NewMessage
from contextfold.store.base import Store
from contextfold.testing.store_contract_abilities import AbilitiesContract
from contextfold.testing.store_contract_admin import SessionAdminContract
from contextfold.testing.store_contract_branches import BranchContract
from contextfold.testing.store_contract_common import (
    calling,
    message,
    opened,
    seqs,
    snapshot,
)
from contextfold.testing.store_contract_concurrent import ConcurrentContract
from contextfold.testing.store_contract_folds import FoldContract
from contextfold.testing.store_contract_order import OrderContract
from contextfold.testing.store_contract_search import SearchContract
from contextfold.testing.store_contract_views import ViewContract


class StoreContract(
    FoldContract,
    ViewContract,
    SessionAdminContract,
    SearchContract,
    OrderContract,
    BranchContract,
    ConcurrentContract,
    AbilitiesContract,
):
    """Every promise of the ``Store`` ports as a test; subclass with a ``store`` fixture.

    The log's own promises are here; the themed parts it inherits hold the rest.
    """

    def test_seq_numbers_from_one_without_gaps(self, store: Store) -> None:
        sid = opened(store)
        assert store.last_seq(sid) == 0
        assert seqs(store.append(sid, [message("a")])) == [1]
        assert seqs(store.append(sid, [message("b"), message("c", "assistant")])) == [2, 3]
        assert seqs(store.append(sid, [message("d")])) == [4]
        assert seqs(store.messages(sid)) == [1, 2, 3, 4]
        assert store.last_seq(sid) == 4

    def test_records_round_trip(self, store: Store) -> None:
        sid = opened(store)
        parts = {"role": "user", "content": [{"type": "text", "text": "héllo ✓"}], "meta": {"k": 1}}
        appended = store.append(
            sid, [NewMessage(parts, 7, "k1"), calling("c1"), message("x", "assistant")]
        )
        stored = store.messages(sid)
        assert stored == appended
        assert stored[0].message == parts
        assert (stored[0].tokens, stored[0].key, stored[0].role) == (7, "k1", "user")
        assert stored[1].message["tool_calls"][0]["id"] == "c1"

    def test_empty_batch_stores_nothing(self, store: Store) -> None:
        sid = opened(store, 2)
        assert store.append(sid, []) == []
        assert store.last_seq(sid) == 2

    def test_batch_append_all_or_nothing(self, store: Store) -> None:
        sid = opened(store, 2)
        before = snapshot(store, sid)
        broken = NewMessage({"role": "assistant", "content": None, "tool_calls": [{"x": 1}]}, 1)
        with pytest.raises(InvalidInput):
            store.append(sid, [message("a"), calling("c1"), broken])
        assert snapshot(store, sid) == before
        assert seqs(store.append(sid, [message("b")])) == [3]

    def test_idempotency_key_returns_earlier_record(self, store: Store) -> None:
        sid = opened(store, 1)
        first = store.append(sid, [message("hello", key="k")])[0]
        again = store.append(sid, [message("hello", key="k")])[0]
        assert again == first
        assert store.last_seq(sid) == 2
        mixed = store.append(
            sid, [message("hello", key="k"), message("new", key="k2"), message("plain")]
        )
        assert seqs(mixed) == [2, 3, 4]
        assert mixed[0] == first
        assert store.last_seq(sid) == 4

    def test_idempotency_key_repeated_within_one_batch(self, store: Store) -> None:
        sid = opened(store)
        out = store.append(
            sid, [message("one", key="k"), message("one", key="k"), message("three")]
        )
        assert seqs(out) == [1, 1, 2]
        assert out[1] == out[0]
        assert [m.message["content"] for m in store.messages(sid)] == ["one", "three"]

    def test_idempotency_keys_are_per_session(self, store: Store) -> None:
        a, b = opened(store, 0, "a"), opened(store, 3, "b")
        assert seqs(store.append(a, [message("x", key="k")])) == [1]
        assert seqs(store.append(b, [message("x", key="k")])) == [4]

    def test_messages_ranges(self, store: Store) -> None:
        sid = opened(store, 10)
        assert seqs(store.messages(sid, 3, 5)) == [3, 4, 5]
        assert seqs(store.messages(sid, 8)) == [8, 9, 10]
        assert seqs(store.messages(sid, 1, 100)) == list(range(1, 11))
        assert [m.message["content"] for m in store.messages(sid, 4, 4)] == ["m4"]
        assert store.messages(sid, 5, 4) == []
        assert store.messages(sid, 11) == []

    def test_token_counts_are_the_stored_counts_of_a_range(self, store: Store) -> None:
        sid = opened(store, 10)
        logged = {m.seq: m.tokens for m in store.messages(sid)}
        assert store.token_counts(sid, 3, 5) == [(s, logged[s]) for s in (3, 4, 5)]
        assert store.token_counts(sid, 1, 100) == sorted(logged.items())
        assert store.token_counts(sid, 5, 4) == store.token_counts(sid, 11, 20) == []
        with pytest.raises(NotFound):
            store.token_counts("no-such-session", 1, 5)

    def test_messages_at_scattered_seqs_oldest_first(self, store: Store) -> None:
        sid = opened(store, 10)
        assert seqs(store.messages_at(sid, [9, 2, 5, 2])) == [2, 5, 9]
        assert [m.message["content"] for m in store.messages_at(sid, [4])] == ["m4"]
        assert seqs(store.messages_at(sid, [0, 3, 11, -1])) == [3]
        assert store.messages_at(sid, []) == []
        other = opened(store, 3, "other")
        assert seqs(store.messages_at(other, [1, 2, 9])) == [1, 2]

    def test_messages_before_newest_first_with_limit(self, store: Store) -> None:
        sid = opened(store, 10)
        assert seqs(store.messages_before(sid, 8, 3)) == [7, 6, 5]
        assert seqs(store.messages_before(sid, 3, 10)) == [2, 1]
        assert seqs(store.messages_before(sid, 100, 2)) == [10, 9]
        assert store.messages_before(sid, 8, 0) == []
        assert store.messages_before(sid, 1, 5) == []

    def test_last_of_role(self, store: Store) -> None:
        sid = opened(store)
        assert store.last_of_role(sid, "user") is None
        store.append(
            sid,
            [message("q1"), message("a1", "assistant"), message("q2"), message("a2", "assistant")],
        )
        latest = store.last_of_role(sid, "user")
        assert latest is not None
        assert (latest.seq, latest.message["content"]) == (3, "q2")
        assert store.last_of_role(sid, "tool") is None

    def test_unknown_session_not_found(self, store: Store) -> None:
        for call in (
            lambda: store.get_session("nope"),
            lambda: store.append("nope", [message("a")]),
            lambda: store.messages("nope"),
            lambda: store.messages_before("nope", 5, 5),
            lambda: store.last_seq("nope"),
            lambda: store.last_of_role("nope", "user"),
            lambda: store.folds("nope", "default"),
            lambda: store.commit_folds("nope", "default", [], 0),
            lambda: store.head("nope", "default"),
            lambda: store.put_view("nope", "default", {}),
            lambda: store.get_view("nope", "default"),
            lambda: store.list_views("nope"),
            lambda: store.acquire_lease("nope", "default", "a"),
            lambda: store.release_lease("nope", "default", "a"),
        ):
            with pytest.raises(NotFound) as info:
                call()
            assert isinstance(info.value, StoreError)
        with pytest.raises(NotFound):
            store.get_session("nope")  # none of the calls made it

    def test_create_session_returns_existing(self, store: Store) -> None:
        created = store.create_session("s", encoding="o200k_base", meta={"user": "ann"})
        store.append("s", [message("a")])
        again = store.create_session("s", encoding="cl100k_base", meta={"user": "bob"})
        assert again == created
        assert (again.encoding, again.meta) == ("o200k_base", {"user": "ann"})
        assert store.get_session("s") == created
        store.create_session("r", encoding="o200k_base")
        assert store.get_session("r").id == "r"
        assert store.last_seq("s") == 1

    def test_create_session_refuses_empty_id(self, store: Store) -> None:
        with pytest.raises(InvalidInput):
            store.create_session("", encoding="o200k_base")

    def test_returned_messages_are_copies(self, store: Store) -> None:
        sid = opened(store)
        call = calling("c1")
        parts: list[dict[str, str]] = [{"type": "text", "text": "hi"}]
        nested: dict[str, Any] = {"role": "user", "content": parts, "meta": {"k": [1]}}
        returned = store.append(sid, [NewMessage(nested, 3, "k"), call, message("x", "assistant")])
        expected = store.messages(sid)
        returned[0].message["content"][0]["text"] = "edited"
        returned[0].message["meta"]["k"].append(2)
        returned[1].message["tool_calls"][0]["id"] = "edited"
        parts.append({"type": "text", "text": "added by the caller"})
        for read in (
            store.messages(sid),
            store.messages_before(sid, 4, 3),
            [store.last_of_role(sid, "user")],
            store.append(sid, [NewMessage(expected[0].message, 3, "k")]),  # a retry
        ):
            for logged in read:
                assert logged is not None
                content = logged.message.get("content")
                if isinstance(content, list):
                    content.clear()
                logged.message["role"] = "edited"
        assert store.messages(sid) == expected

    def test_deleted_message_never_frees_its_seq(self, store: Store) -> None:
        sid = opened(store, 5)
        self.delete_message(store, sid, 5)
        assert store.last_seq(sid) == 5
        assert store.head(sid, "default").last_seq == 5
        assert seqs(store.append(sid, [message("after the deleted row")])) == [6]
        assert seqs(store.messages(sid)) == [1, 2, 3, 4, 6]
        self.delete_message(store, sid, 6)
        assert seqs(store.append(sid, [message("a"), message("b")])) == [7, 8]
