"""The Store contract's promises about view records (versioned JSON data) and
compaction leases (one holder at a time, taken over when expired).

Part of ``contextfold.testing.store_contract.StoreContract``.
"""

from __future__ import annotations

from typing import Any

import pytest

from contextfold.core.errors import InvalidInput, StoreError, ViewConflict
from contextfold.store.base import Store
from contextfold.testing.store_contract_common import (
    Clock,
    ContractHooks,
    fold_of,
    opened,
    snapshot,
)


class ViewContract(ContractHooks):
    """``put_view``, ``get_view``, ``list_views`` and the lease calls."""

    def test_put_view_versions_from_one(self, store: Store) -> None:
        sid = opened(store, 3)
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
        assert store.head(sid, "default")[:3] == (3, 0, 2)

    def test_views_listed_by_name_per_session(self, store: Store) -> None:
        a, b = opened(store, 0, "a"), opened(store, 0, "b")
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
        sid = opened(store)
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
        sid = opened(store)
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
        sid = opened(store)
        record = store.put_view(sid, "default", {"pair": (1, 2), "n": 1.5, "ok": True})
        expected = {"pair": [1, 2], "n": 1.5, "ok": True}
        assert record.config == expected
        stored = store.get_view(sid, "default")
        assert stored is not None
        assert stored.config == expected

    def test_view_input_checked_and_changes_nothing(self, store: Store) -> None:
        sid = opened(store)
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
        sid = opened(store, 3)
        assert store.acquire_lease(sid, "default", "a", ttl_s=10)
        assert not store.acquire_lease(sid, "default", "b", ttl_s=10)
        clock.now += 9.9
        assert not store.acquire_lease(sid, "default", "b", ttl_s=10)
        assert store.acquire_lease(sid, "default", "a", ttl_s=10)

    def test_lease_renewal_extends_it(self, store: Store, clock: Clock) -> None:
        sid = opened(store)
        assert store.acquire_lease(sid, "default", "a", ttl_s=10)
        clock.now += 8
        assert store.acquire_lease(sid, "default", "a", ttl_s=10)
        clock.now += 8
        assert not store.acquire_lease(sid, "default", "b", ttl_s=10)
        clock.now += 2
        assert store.acquire_lease(sid, "default", "b", ttl_s=10)

    def test_expired_lease_taken_over(self, store: Store, clock: Clock) -> None:
        sid = opened(store)
        assert store.acquire_lease(sid, "default", "dead", ttl_s=5)
        clock.now += 5
        assert store.acquire_lease(sid, "default", "b", ttl_s=5)
        assert not store.acquire_lease(sid, "default", "dead", ttl_s=5)
        assert not store.release_lease(sid, "default", "dead")
        assert not store.acquire_lease(sid, "default", "c", ttl_s=5)
        assert store.release_lease(sid, "default", "b")

    def test_release_frees_the_lease_for_its_owner_only(self, store: Store, clock: Clock) -> None:
        sid = opened(store)
        assert not store.release_lease(sid, "default", "a")
        assert store.acquire_lease(sid, "default", "a", ttl_s=60)
        assert not store.release_lease(sid, "default", "b")
        assert not store.acquire_lease(sid, "default", "b", ttl_s=60)
        assert store.release_lease(sid, "default", "a")
        assert not store.release_lease(sid, "default", "a")
        assert store.acquire_lease(sid, "default", "b", ttl_s=60)

    def test_owner_releases_own_expired_lease(self, store: Store, clock: Clock) -> None:
        sid = opened(store)
        assert store.acquire_lease(sid, "default", "a", ttl_s=1)
        clock.now += 2
        assert store.release_lease(sid, "default", "a")
        assert not store.release_lease(sid, "default", "a")

    def test_leases_per_session_and_view(self, store: Store, clock: Clock) -> None:
        a, b = opened(store, 0, "a"), opened(store, 0, "b")
        assert store.acquire_lease(a, "default", "x")
        assert store.acquire_lease(a, "planner", "y")
        assert store.acquire_lease(b, "default", "z")
        assert not store.acquire_lease(a, "planner", "x")
        assert store.release_lease(a, "default", "x")
        assert not store.acquire_lease(b, "default", "x")

    def test_leases_leave_log_and_folds_alone(self, store: Store, clock: Clock) -> None:
        sid = opened(store, 6)
        store.commit_folds(sid, "default", [fold_of(1, 2)], 0)
        before = snapshot(store, sid, "default")
        store.acquire_lease(sid, "default", "a")
        store.acquire_lease(sid, "default", "b")
        store.release_lease(sid, "default", "a")
        assert snapshot(store, sid, "default") == before
        assert store.commit_folds(sid, "default", [fold_of(3, 4)], 1) == 2

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
        sid = opened(store)
        with pytest.raises(InvalidInput) as info:
            store.acquire_lease(sid, "default", owner, ttl_s=ttl)
        assert info.value.field == field
        assert store.acquire_lease(sid, "default", "b", ttl_s=1.0)

    def test_lease_ttl_must_be_a_number(self, store: Store) -> None:
        sid = opened(store)
        for ttl in ("60", True, float("nan")):
            with pytest.raises(InvalidInput) as info:
                store.acquire_lease(sid, "default", "a", ttl_s=ttl)  # type: ignore[arg-type]
            assert info.value.field == "ttl_s"
