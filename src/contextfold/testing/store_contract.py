"""The Store contract as pytest tests, shipped so that any backend can prove itself.

A backend keeps the promises of ``contextfold.store.base.Store`` when a subclass
of ``StoreContract`` passes. The subclass supplies a ``store`` fixture that
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
opens the same store in another process (``open_store``).

Run it with ``pytest``. For pytest's detailed assertion messages, add
``pytest.register_assert_rewrite("contextfold.testing.store_contract")`` to
your ``conftest.py``. This module needs pytest; ``contextfold.testing`` itself
does not import it.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from contextfold.core.errors import (
    DamagedFold,
    FoldConflict,
    InvalidInput,
    NotFound,
    StoreError,
    ViewConflict,
)
from contextfold.core.folds import Fold, Placement
from contextfold.core.log import NewMessage
from contextfold.store.base import Store
from contextfold.testing.store_contract_admin import SessionAdminContract
from contextfold.testing.store_contract_concurrent import ConcurrentContract
from contextfold.testing.store_contract_order import OrderContract
from contextfold.testing.store_contract_search import SearchContract


def _new(text: str, role: str = "user", *, key: str | None = None) -> NewMessage:
    return NewMessage({"role": role, "content": text}, len(text), key)


def _call(*ids: str) -> NewMessage:
    calls = [
        {"id": i, "type": "function", "function": {"name": "read", "arguments": "{}"}} for i in ids
    ]
    return NewMessage({"role": "assistant", "content": None, "tool_calls": calls}, 10)


def _session(store: Store, n: int = 0, session_id: str = "s") -> str:
    store.create_session(session_id, encoding="o200k_base")
    if n:
        store.append(session_id, [_new(f"m{i}") for i in range(1, n + 1)])
    return session_id


def _fold(
    start: int, end: int, *, view: str = "default", placement: Placement = "in_place"
) -> Fold:
    return Fold(
        view=view,
        start=start,
        end=end,
        kind="facts" if placement == "facts" else "summary",
        text=f"summary of {start}..{end}",
        messages=({"role": "user", "content": f"summary of {start}..{end}"},),
        strategy="test",
        tokens_before=100,
        tokens_after=10,
        placement=placement,
        data={"sections": {"goal": "x"}, "n": [1, 2]},
        usage={"prompt_tokens": 100},
    )


def _snapshot(store: Store, session_id: str, *views: str) -> Any:
    """Everything a failed call must leave as it was."""
    return (
        store.messages(session_id),
        store.last_seq(session_id),
        [
            (store.fold_version(session_id, v), store.folds(session_id, v, include_superseded=True))
            for v in views
        ],
    )


def _seqs(records: Any) -> list[int]:
    return [r.seq for r in records]


class Clock:
    """Wall-clock time the test moves by hand, so lease expiry is exact."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class StoreContract(SessionAdminContract, SearchContract, OrderContract, ConcurrentContract):
    """Every promise of the ``Store`` protocol as a test; subclass with a ``store`` fixture."""

    def delete_message(self, store: Store, session_id: str, seq: int) -> None:
        """Remove a logged message behind the store's back; override per backend."""
        pytest.skip("this backend's contract gives no way to delete a stored message")

    def damage_fold(self, store: Store, session_id: str, view: str, fold_id: str) -> None:
        """Make a stored fold unreadable behind the store's back; override per backend."""
        pytest.skip("this backend's contract gives no way to damage a stored fold")

    @pytest.fixture
    def clock(self, monkeypatch: pytest.MonkeyPatch) -> Clock:
        fake = Clock()
        monkeypatch.setattr(time, "time", fake)
        return fake

    def test_seq_numbers_from_one_without_gaps(self, store: Store) -> None:
        sid = _session(store)
        assert store.last_seq(sid) == 0
        assert _seqs(store.append(sid, [_new("a")])) == [1]
        assert _seqs(store.append(sid, [_new("b"), _new("c", "assistant")])) == [2, 3]
        assert _seqs(store.append(sid, [_new("d")])) == [4]
        assert _seqs(store.messages(sid)) == [1, 2, 3, 4]
        assert store.last_seq(sid) == 4

    def test_records_round_trip(self, store: Store) -> None:
        sid = _session(store)
        parts = {"role": "user", "content": [{"type": "text", "text": "héllo ✓"}], "meta": {"k": 1}}
        appended = store.append(
            sid, [NewMessage(parts, 7, "k1"), _call("c1"), _new("x", "assistant")]
        )
        stored = store.messages(sid)
        assert stored == appended
        assert stored[0].message == parts
        assert (stored[0].tokens, stored[0].key, stored[0].role) == (7, "k1", "user")
        assert stored[1].message["tool_calls"][0]["id"] == "c1"

    def test_empty_batch_stores_nothing(self, store: Store) -> None:
        sid = _session(store, 2)
        assert store.append(sid, []) == []
        assert store.last_seq(sid) == 2

    def test_batch_append_all_or_nothing(self, store: Store) -> None:
        sid = _session(store, 2)
        before = _snapshot(store, sid)
        broken = NewMessage({"role": "assistant", "content": None, "tool_calls": [{"x": 1}]}, 1)
        with pytest.raises(InvalidInput):
            store.append(sid, [_new("a"), _call("c1"), broken])
        assert _snapshot(store, sid) == before
        assert store.called_ids(sid, ["c1"]) == set()
        assert _seqs(store.append(sid, [_new("b")])) == [3]

    def test_idempotency_key_returns_earlier_record(self, store: Store) -> None:
        sid = _session(store, 1)
        first = store.append(sid, [_new("hello", key="k")])[0]
        again = store.append(sid, [_new("hello", key="k")])[0]
        assert again == first
        assert store.last_seq(sid) == 2
        mixed = store.append(sid, [_new("hello", key="k"), _new("new", key="k2"), _new("plain")])
        assert _seqs(mixed) == [2, 3, 4]
        assert mixed[0] == first
        assert store.last_seq(sid) == 4

    def test_idempotency_key_repeated_within_one_batch(self, store: Store) -> None:
        sid = _session(store)
        out = store.append(sid, [_new("one", key="k"), _new("one", key="k"), _new("three")])
        assert _seqs(out) == [1, 1, 2]
        assert out[1] == out[0]
        assert [m.message["content"] for m in store.messages(sid)] == ["one", "three"]

    def test_idempotency_keys_are_per_session(self, store: Store) -> None:
        a, b = _session(store, 0, "a"), _session(store, 3, "b")
        assert _seqs(store.append(a, [_new("x", key="k")])) == [1]
        assert _seqs(store.append(b, [_new("x", key="k")])) == [4]

    def test_messages_ranges(self, store: Store) -> None:
        sid = _session(store, 10)
        assert _seqs(store.messages(sid, 3, 5)) == [3, 4, 5]
        assert _seqs(store.messages(sid, 8)) == [8, 9, 10]
        assert _seqs(store.messages(sid, 1, 100)) == list(range(1, 11))
        assert [m.message["content"] for m in store.messages(sid, 4, 4)] == ["m4"]
        assert store.messages(sid, 5, 4) == []
        assert store.messages(sid, 11) == []

    def test_token_counts_are_the_stored_counts_of_a_range(self, store: Store) -> None:
        sid = _session(store, 10)
        logged = {m.seq: m.tokens for m in store.messages(sid)}
        assert store.token_counts(sid, 3, 5) == [(s, logged[s]) for s in (3, 4, 5)]
        assert store.token_counts(sid, 1, 100) == sorted(logged.items())
        assert store.token_counts(sid, 5, 4) == store.token_counts(sid, 11, 20) == []
        with pytest.raises(NotFound):
            store.token_counts("no-such-session", 1, 5)

    def test_messages_at_scattered_seqs_oldest_first(self, store: Store) -> None:
        sid = _session(store, 10)
        assert _seqs(store.messages_at(sid, [9, 2, 5, 2])) == [2, 5, 9]
        assert [m.message["content"] for m in store.messages_at(sid, [4])] == ["m4"]
        assert _seqs(store.messages_at(sid, [0, 3, 11, -1])) == [3]
        assert store.messages_at(sid, []) == []
        other = _session(store, 3, "other")
        assert _seqs(store.messages_at(other, [1, 2, 9])) == [1, 2]

    def test_messages_before_newest_first_with_limit(self, store: Store) -> None:
        sid = _session(store, 10)
        assert _seqs(store.messages_before(sid, 8, 3)) == [7, 6, 5]
        assert _seqs(store.messages_before(sid, 3, 10)) == [2, 1]
        assert _seqs(store.messages_before(sid, 100, 2)) == [10, 9]
        assert store.messages_before(sid, 8, 0) == []
        assert store.messages_before(sid, 1, 5) == []

    def test_last_of_role(self, store: Store) -> None:
        sid = _session(store)
        assert store.last_of_role(sid, "user") is None
        store.append(
            sid, [_new("q1"), _new("a1", "assistant"), _new("q2"), _new("a2", "assistant")]
        )
        latest = store.last_of_role(sid, "user")
        assert latest is not None
        assert (latest.seq, latest.message["content"]) == (3, "q2")
        assert store.last_of_role(sid, "tool") is None

    def test_called_ids(self, store: Store) -> None:
        sid = _session(store)
        store.append(sid, [_new("go"), _call("c1", "c2")])
        tool = NewMessage({"role": "tool", "tool_call_id": "c2", "content": "r"}, 1)
        store.append(sid, [tool, _call("c3")])
        assert store.called_ids(sid, ["c1", "c3", "c9", "zz"]) == {"c1", "c3"}
        assert store.called_ids(sid, iter(["c2"])) == {"c2"}
        assert store.called_ids(sid, []) == set()

    def test_unknown_session_not_found(self, store: Store) -> None:
        for call in (
            lambda: store.get_session("nope"),
            lambda: store.append("nope", [_new("a")]),
            lambda: store.messages("nope"),
            lambda: store.messages_before("nope", 5, 5),
            lambda: store.last_seq("nope"),
            lambda: store.last_of_role("nope", "user"),
            lambda: store.called_ids("nope", ["c1"]),
            lambda: store.folds("nope", "default"),
            lambda: store.fold_version("nope", "default"),
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
        assert store.list_sessions() == []

    def test_create_session_returns_existing(self, store: Store) -> None:
        created = store.create_session("s", encoding="o200k_base", meta={"user": "ann"})
        store.append("s", [_new("a")])
        again = store.create_session("s", encoding="cl100k_base", meta={"user": "bob"})
        assert again == created
        assert (again.encoding, again.meta) == ("o200k_base", {"user": "ann"})
        assert store.get_session("s") == created
        store.create_session("r", encoding="o200k_base")
        assert store.list_sessions() == ["r", "s"]
        assert store.last_seq("s") == 1

    def test_create_session_refuses_empty_id(self, store: Store) -> None:
        with pytest.raises(InvalidInput):
            store.create_session("", encoding="o200k_base")

    def test_fold_commit_bumps_version(self, store: Store) -> None:
        sid = _session(store, 10)
        assert store.fold_version(sid, "default") == 0
        first, second = _fold(5, 6), _fold(1, 2)
        assert store.commit_folds(sid, "default", [first], 0) == 1
        assert store.commit_folds(sid, "default", [second], 1) == 2
        assert store.fold_version(sid, "default") == 2
        assert store.folds(sid, "default") == [second, first]

    def test_stale_version_conflicts_and_changes_nothing(self, store: Store) -> None:
        sid = _session(store, 10)
        store.commit_folds(sid, "default", [_fold(1, 2)], 0)
        before = _snapshot(store, sid, "default")
        with pytest.raises(FoldConflict) as info:
            store.commit_folds(sid, "default", [_fold(1, 4)], 0)
        assert (info.value.view, info.value.expected, info.value.actual) == ("default", 0, 1)
        assert _snapshot(store, sid, "default") == before

    def test_partial_overlap_refused_and_changes_nothing(self, store: Store) -> None:
        sid = _session(store, 10)
        store.commit_folds(sid, "default", [_fold(1, 4)], 0)
        before = _snapshot(store, sid, "default")
        with pytest.raises(InvalidInput) as info:
            store.commit_folds(sid, "default", [_fold(3, 6)], 1)
        assert info.value.field == "start"
        assert _snapshot(store, sid, "default") == before

    def test_covering_fold_supersedes(self, store: Store) -> None:
        sid = _session(store, 10)
        old, later = _fold(1, 4), _fold(9, 10)
        store.commit_folds(sid, "default", [old, later], 0)
        cover = _fold(1, 8)
        store.commit_folds(sid, "default", [cover], 1)
        assert store.folds(sid, "default") == [cover, later]
        every = store.folds(sid, "default", include_superseded=True)
        assert [(f.id, f.superseded_by) for f in every] == [
            (old.id, cover.id),
            (cover.id, None),
            (later.id, None),
        ]

    def test_facts_fold_supersedes_previous_facts(self, store: Store) -> None:
        sid = _session(store, 10)
        summary, facts = _fold(1, 6), _fold(1, 4, placement="facts")
        store.commit_folds(sid, "default", [summary, facts], 0)
        newer = _fold(1, 8, placement="facts")
        store.commit_folds(sid, "default", [newer], 1)
        assert store.folds(sid, "default") == [summary, newer]
        superseded = [
            f for f in store.folds(sid, "default", include_superseded=True) if f.superseded_by
        ]
        assert [(f.id, f.superseded_by) for f in superseded] == [(facts.id, newer.id)]

    def test_views_isolated(self, store: Store) -> None:
        sid = _session(store, 10)
        store.commit_folds(sid, "planner", [_fold(1, 4, view="planner")], 0)
        assert store.folds(sid, "default", include_superseded=True) == []
        assert store.fold_version(sid, "default") == 0
        assert store.commit_folds(sid, "default", [_fold(3, 6)], 0) == 1
        assert [(f.start, f.end) for f in store.folds(sid, "planner")] == [(1, 4)]
        before = _snapshot(store, sid, "default", "planner")
        with pytest.raises(InvalidInput) as info:
            store.commit_folds(sid, "default", [_fold(7, 8, view="planner")], 1)
        assert info.value.field == "view"
        assert _snapshot(store, sid, "default", "planner") == before

    def test_fold_past_the_log_refused(self, store: Store) -> None:
        sid = _session(store, 5)
        with pytest.raises(InvalidInput) as info:
            store.commit_folds(sid, "default", [_fold(1, 6)], 0)
        assert info.value.field == "end"
        assert store.fold_version(sid, "default") == 0
        assert store.folds(sid, "default", include_superseded=True) == []

    def test_multi_fold_commit_atomic(self, store: Store) -> None:
        sid = _session(store, 10)
        store.commit_folds(sid, "default", [_fold(1, 2)], 0)
        before = _snapshot(store, sid, "default")
        for second in (_fold(5, 99), _fold(4, 7)):
            with pytest.raises(InvalidInput):
                store.commit_folds(sid, "default", [_fold(1, 5), second], 1)
            assert _snapshot(store, sid, "default") == before

    def test_later_fold_in_one_commit_may_cover_an_earlier_one(self, store: Store) -> None:
        sid = _session(store, 10)
        inner, outer = _fold(2, 3), _fold(1, 6)
        assert store.commit_folds(sid, "default", [inner, outer], 0) == 1
        assert store.folds(sid, "default") == [outer]
        every = store.folds(sid, "default", include_superseded=True)
        assert [(f.id, f.superseded_by) for f in every] == [(outer.id, None), (inner.id, outer.id)]

    def test_head_is_last_seq_fold_version_and_view_version(self, store: Store) -> None:
        sid = _session(store)
        assert store.head(sid, "default") == (0, 0, 0)
        store.append(sid, [_new(f"m{i}") for i in range(4)])
        assert store.head(sid, "default") == (4, 0, 0)
        store.commit_folds(sid, "default", [_fold(1, 2)], 0)
        store.append(sid, [_new("m5")])
        assert store.head(sid, "default") == (5, 1, 0)
        assert store.head(sid, "planner") == (5, 0, 0)
        store.put_view(sid, "planner", {"budget": 1})
        store.put_view(sid, "planner", {"budget": 2})
        assert store.head(sid, "planner") == (5, 0, 2)
        assert store.head(sid, "default") == (
            store.last_seq(sid),
            store.fold_version(sid, "default"),
            0,
        )

    def test_put_view_versions_from_one(self, store: Store) -> None:
        sid = _session(store, 3)
        assert store.get_view(sid, "default") is None
        assert store.list_views(sid) == []
        first = store.put_view(sid, "default", {"preset": "offline", "budget": 8000})
        assert (first.session_id, first.name, first.version) == (sid, "default", 1)
        assert first.config == {"preset": "offline", "budget": 8000}
        config = {"preset": "rolling", "budget": 4000, "options": {"keep": [1, "two", None, 2.5]}}
        second = store.put_view(sid, "default", config)
        assert (second.version, second.config) == (2, config)
        assert second.updated_at >= first.updated_at > 0
        assert store.get_view(sid, "default") == second
        assert store.head(sid, "default") == (3, 0, 2)

    def test_views_listed_by_name_per_session(self, store: Store) -> None:
        a, b = _session(store, 0, "a"), _session(store, 0, "b")
        store.put_view(a, "planner", {"budget": 1})
        store.put_view(a, "default", {"budget": 2})
        store.put_view(a, "planner", {"budget": 3})
        assert store.put_view(b, "planner", {"budget": 4}).version == 1
        listed = store.list_views(a)
        assert [(v.name, v.version, v.config) for v in listed] == [
            ("default", 1, {"budget": 2}),
            ("planner", 2, {"budget": 3}),
        ]
        assert listed == [store.get_view(a, "default"), store.get_view(a, "planner")]
        assert [(v.session_id, v.name) for v in store.list_views(b)] == [("b", "planner")]
        assert store.get_view(b, "default") is None

    def test_stale_view_version_conflicts_and_changes_nothing(self, store: Store) -> None:
        sid = _session(store)
        store.put_view(sid, "default", {"budget": 1})
        second = store.put_view(sid, "default", {"budget": 2}, expected_version=1)
        assert second.version == 2
        for stale in (1, 0, 3):
            with pytest.raises(ViewConflict) as info:
                store.put_view(sid, "default", {"budget": 99}, expected_version=stale)
            assert (info.value.view, info.value.expected, info.value.actual) == (
                "default",
                stale,
                2,
            )
            assert isinstance(info.value, StoreError)
            assert store.get_view(sid, "default") == second
        with pytest.raises(ViewConflict) as info:
            store.put_view(sid, "planner", {}, expected_version=1)
        assert (info.value.expected, info.value.actual) == (1, 0)
        assert store.get_view(sid, "planner") is None
        assert store.put_view(sid, "planner", {}, expected_version=0).version == 1
        assert [v.name for v in store.list_views(sid)] == ["default", "planner"]

    def test_view_records_are_copies(self, store: Store) -> None:
        sid = _session(store)
        config: dict[str, Any] = {"budget": 100, "tags": ["a"]}
        returned = store.put_view(sid, "default", config)
        config["tags"].append("changed after put")
        returned.config["tags"].append("changed on the returned record")
        returned.config["budget"] = 1
        read = store.get_view(sid, "default")
        assert read is not None
        read.config["tags"].clear()
        store.list_views(sid)[0].config["budget"] = 0
        again = store.get_view(sid, "default")
        assert again is not None
        assert again.config == {"budget": 100, "tags": ["a"]}

    def test_view_config_comes_back_as_json_data(self, store: Store) -> None:
        sid = _session(store)
        record = store.put_view(sid, "default", {"pair": (1, 2), "n": 1.5, "ok": True})
        expected = {"pair": [1, 2], "n": 1.5, "ok": True}
        assert record.config == expected
        stored = store.get_view(sid, "default")
        assert stored is not None
        assert stored.config == expected

    def test_view_input_checked_and_changes_nothing(self, store: Store) -> None:
        sid = _session(store)
        store.put_view(sid, "default", {"budget": 1})
        before = store.list_views(sid)
        bad: list[Any] = [{"x": {1, 2}}, {"x": object()}, {"x": float("nan")}, ["a", "list"]]
        for config in bad:
            with pytest.raises(InvalidInput) as info:
                store.put_view(sid, "default", config)
            assert info.value.field == "config"
        with pytest.raises(InvalidInput) as info:
            store.put_view(sid, "", {"budget": 2})
        assert info.value.field == "view"
        assert store.list_views(sid) == before

    def test_lease_held_by_one_owner_at_a_time(self, store: Store, clock: Clock) -> None:
        sid = _session(store, 3)
        assert store.acquire_lease(sid, "default", "a", ttl_s=10)
        assert not store.acquire_lease(sid, "default", "b", ttl_s=10)
        clock.now += 9.9
        assert not store.acquire_lease(sid, "default", "b", ttl_s=10)
        assert store.acquire_lease(sid, "default", "a", ttl_s=10)

    def test_lease_renewal_extends_it(self, store: Store, clock: Clock) -> None:
        sid = _session(store)
        assert store.acquire_lease(sid, "default", "a", ttl_s=10)
        clock.now += 8
        assert store.acquire_lease(sid, "default", "a", ttl_s=10)
        clock.now += 8
        assert not store.acquire_lease(sid, "default", "b", ttl_s=10)
        clock.now += 2
        assert store.acquire_lease(sid, "default", "b", ttl_s=10)

    def test_expired_lease_taken_over(self, store: Store, clock: Clock) -> None:
        sid = _session(store)
        assert store.acquire_lease(sid, "default", "dead", ttl_s=5)
        clock.now += 5
        assert store.acquire_lease(sid, "default", "b", ttl_s=5)
        assert not store.acquire_lease(sid, "default", "dead", ttl_s=5)
        assert not store.release_lease(sid, "default", "dead")
        assert not store.acquire_lease(sid, "default", "c", ttl_s=5)
        assert store.release_lease(sid, "default", "b")

    def test_release_frees_the_lease_for_its_owner_only(self, store: Store, clock: Clock) -> None:
        sid = _session(store)
        assert not store.release_lease(sid, "default", "a")
        assert store.acquire_lease(sid, "default", "a", ttl_s=60)
        assert not store.release_lease(sid, "default", "b")
        assert not store.acquire_lease(sid, "default", "b", ttl_s=60)
        assert store.release_lease(sid, "default", "a")
        assert not store.release_lease(sid, "default", "a")
        assert store.acquire_lease(sid, "default", "b", ttl_s=60)

    def test_owner_releases_own_expired_lease(self, store: Store, clock: Clock) -> None:
        sid = _session(store)
        assert store.acquire_lease(sid, "default", "a", ttl_s=1)
        clock.now += 2
        assert store.release_lease(sid, "default", "a")
        assert not store.release_lease(sid, "default", "a")

    def test_leases_per_session_and_view(self, store: Store, clock: Clock) -> None:
        a, b = _session(store, 0, "a"), _session(store, 0, "b")
        assert store.acquire_lease(a, "default", "x")
        assert store.acquire_lease(a, "planner", "y")
        assert store.acquire_lease(b, "default", "z")
        assert not store.acquire_lease(a, "planner", "x")
        assert store.release_lease(a, "default", "x")
        assert not store.acquire_lease(b, "default", "x")

    def test_leases_leave_log_and_folds_alone(self, store: Store, clock: Clock) -> None:
        sid = _session(store, 6)
        store.commit_folds(sid, "default", [_fold(1, 2)], 0)
        before = _snapshot(store, sid, "default")
        store.acquire_lease(sid, "default", "a")
        store.acquire_lease(sid, "default", "b")
        store.release_lease(sid, "default", "a")
        assert _snapshot(store, sid, "default") == before
        assert store.commit_folds(sid, "default", [_fold(3, 4)], 1) == 2

    @pytest.mark.parametrize(
        ("owner", "ttl", "field"),
        [
            ("", 1.0, "owner"),
            ("a", 0.0, "ttl_s"),
            ("a", -1.0, "ttl_s"),
            ("a", float("inf"), "ttl_s"),
        ],
    )
    def test_lease_arguments_checked(self, store: Store, owner: str, ttl: Any, field: str) -> None:
        sid = _session(store)
        with pytest.raises(InvalidInput) as info:
            store.acquire_lease(sid, "default", owner, ttl_s=ttl)
        assert info.value.field == field
        assert store.acquire_lease(sid, "default", "b", ttl_s=1.0)

    def test_lease_ttl_must_be_a_number(self, store: Store) -> None:
        sid = _session(store)
        for ttl in ("60", True, float("nan")):
            with pytest.raises(InvalidInput) as info:
                store.acquire_lease(sid, "default", "a", ttl_s=ttl)  # type: ignore[arg-type]
            assert info.value.field == "ttl_s"

    def test_quarantined_fold_kept_out_and_listed(self, store: Store) -> None:
        sid = _session(store, 10)
        bad, good = _fold(1, 4), _fold(6, 8)
        store.commit_folds(sid, "default", [bad, good], 0)
        assert store.quarantined(sid, "default") == []
        assert store.quarantine_fold(sid, "default", bad.id, "its count is wrong") == 2
        assert store.folds(sid, "default") == [good]
        assert store.folds(sid, "default", include_superseded=True) == [good]
        assert store.quarantined(sid, "default") == [(bad.id, "its count is wrong")]
        assert store.fold_version(sid, "default") == 2
        assert store.quarantine_fold(sid, "default", bad.id, "again") == 2
        assert store.quarantine_fold(sid, "default", "no-such-fold", "x") == 2
        assert store.quarantined(sid, "planner") == []
        # The range is the log's again: a new fold may cover it, or part of it.
        assert store.commit_folds(sid, "default", [_fold(2, 5)], 2) == 3
        assert [(f.start, f.end) for f in store.folds(sid, "default")] == [(2, 5), (6, 8)]
        with pytest.raises(NotFound):
            store.quarantine_fold("nope", "default", bad.id, "x")

    def test_damaged_fold_named_then_quarantined(self, store: Store) -> None:
        sid = _session(store, 10)
        damaged, kept = _fold(1, 4), _fold(6, 8)
        store.commit_folds(sid, "default", [damaged, kept], 0)
        self.damage_fold(store, sid, "default", damaged.id)
        with pytest.raises(DamagedFold) as info:
            store.folds(sid, "default")
        assert isinstance(info.value, StoreError)
        assert (info.value.session, info.value.view, info.value.fold_id) == (
            sid,
            "default",
            damaged.id,
        )
        store.quarantine_fold(sid, "default", damaged.id, info.value.reason)
        assert store.folds(sid, "default") == [kept]
        assert store.messages(sid)[0].message == {"role": "user", "content": "m1"}
        assert store.commit_folds(sid, "default", [_fold(1, 5)], 2) == 3

    def test_returned_messages_are_copies(self, store: Store) -> None:
        sid = _session(store)
        call = _call("c1")
        parts: list[dict[str, str]] = [{"type": "text", "text": "hi"}]
        nested: dict[str, Any] = {"role": "user", "content": parts, "meta": {"k": [1]}}
        returned = store.append(sid, [NewMessage(nested, 3, "k"), call, _new("x", "assistant")])
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
        assert store.called_ids(sid, ["c1", "edited"]) == {"c1"}

    def test_returned_folds_are_copies(self, store: Store) -> None:
        sid = _session(store, 10)
        given = _fold(1, 4)
        store.commit_folds(sid, "default", [given], 0)
        given.messages[0]["content"] = "edited after the commit"
        given.data["n"].append(3)
        read = store.folds(sid, "default")[0]
        read.messages[0]["content"] = "edited on the read copy"
        read.data["sections"]["goal"] = "edited"
        again = store.folds(sid, "default")[0]
        assert again.messages[0]["content"] == "summary of 1..4"
        assert again.data == {"sections": {"goal": "x"}, "n": [1, 2]}

    def test_deleted_message_never_frees_its_seq(self, store: Store) -> None:
        sid = _session(store, 5)
        self.delete_message(store, sid, 5)
        assert store.last_seq(sid) == 5
        assert store.head(sid, "default").last_seq == 5
        assert _seqs(store.append(sid, [_new("after the deleted row")])) == [6]
        assert _seqs(store.messages(sid)) == [1, 2, 3, 4, 6]
        self.delete_message(store, sid, 6)
        assert _seqs(store.append(sid, [_new("a"), _new("b")])) == [7, 8]
