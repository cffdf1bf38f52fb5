"""The Store contract's promises about folds: versioned atomic commits, views kept
apart, quarantine, damaged rows named, copies handed out.

Part of ``contextfold.testing.store_contract.StoreContract``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from contextfold.core.errors import DamagedFold, FoldConflict, InvalidInput, NotFound, StoreError
from contextfold.store.base import Store
from contextfold.testing.store_contract_common import (
    ContractHooks,
    fold_of,
    message,
    opened,
    snapshot,
)


class FoldContract(ContractHooks):
    """``commit_folds``, ``folds``, ``head`` and ``quarantine_fold``."""

    def test_fold_commit_bumps_version(self, store: Store) -> None:
        sid = opened(store, 10)
        assert store.head(sid, "default").fold_version == 0
        first, second = fold_of(5, 6), fold_of(1, 2)
        assert store.commit_folds(sid, "default", [first], 0) == 1
        assert store.commit_folds(sid, "default", [second], 1) == 2
        assert store.head(sid, "default").fold_version == 2
        assert store.folds(sid, "default") == [second, first]

    def test_stale_version_conflicts_and_changes_nothing(self, store: Store) -> None:
        sid = opened(store, 10)
        store.commit_folds(sid, "default", [fold_of(1, 2)], 0)
        before = snapshot(store, sid, "default")
        with pytest.raises(FoldConflict) as info:
            store.commit_folds(sid, "default", [fold_of(1, 4)], 0)
        assert (info.value.view, info.value.expected, info.value.actual) == ("default", 0, 1)
        assert snapshot(store, sid, "default") == before

    def test_partial_overlap_refused_and_changes_nothing(self, store: Store) -> None:
        sid = opened(store, 10)
        store.commit_folds(sid, "default", [fold_of(1, 4)], 0)
        before = snapshot(store, sid, "default")
        with pytest.raises(InvalidInput) as info:
            store.commit_folds(sid, "default", [fold_of(3, 6)], 1)
        assert info.value.field == "start"
        assert snapshot(store, sid, "default") == before

    def test_covering_fold_supersedes(self, store: Store) -> None:
        sid = opened(store, 10)
        old, later = fold_of(1, 4), fold_of(9, 10)
        store.commit_folds(sid, "default", [old, later], 0)
        cover = fold_of(1, 8)
        store.commit_folds(sid, "default", [cover], 1)
        assert store.folds(sid, "default") == [cover, later]
        every = store.folds(sid, "default", include_superseded=True)
        assert [(f.id, f.superseded_by) for f in every] == [
            (old.id, cover.id),
            (cover.id, None),
            (later.id, None),
        ]

    def test_facts_fold_supersedes_previous_facts(self, store: Store) -> None:
        sid = opened(store, 10)
        summary, facts = fold_of(1, 6), fold_of(1, 4, placement="facts")
        store.commit_folds(sid, "default", [summary, facts], 0)
        newer = fold_of(1, 8, placement="facts")
        store.commit_folds(sid, "default", [newer], 1)
        assert store.folds(sid, "default") == [summary, newer]
        superseded = [
            f for f in store.folds(sid, "default", include_superseded=True) if f.superseded_by
        ]
        assert [(f.id, f.superseded_by) for f in superseded] == [(facts.id, newer.id)]

    def test_views_isolated(self, store: Store) -> None:
        sid = opened(store, 10)
        store.commit_folds(sid, "planner", [fold_of(1, 4, view="planner")], 0)
        assert store.folds(sid, "default", include_superseded=True) == []
        assert store.head(sid, "default").fold_version == 0
        assert store.commit_folds(sid, "default", [fold_of(3, 6)], 0) == 1
        assert [(f.start, f.end) for f in store.folds(sid, "planner")] == [(1, 4)]
        before = snapshot(store, sid, "default", "planner")
        with pytest.raises(InvalidInput) as info:
            store.commit_folds(sid, "default", [fold_of(7, 8, view="planner")], 1)
        assert info.value.field == "view"
        assert snapshot(store, sid, "default", "planner") == before

    def test_fold_past_the_log_refused(self, store: Store) -> None:
        sid = opened(store, 5)
        with pytest.raises(InvalidInput) as info:
            store.commit_folds(sid, "default", [fold_of(1, 6)], 0)
        assert info.value.field == "end"
        assert store.head(sid, "default").fold_version == 0
        assert store.folds(sid, "default", include_superseded=True) == []

    def test_multi_fold_commit_atomic(self, store: Store) -> None:
        sid = opened(store, 10)
        store.commit_folds(sid, "default", [fold_of(1, 2)], 0)
        before = snapshot(store, sid, "default")
        for second in (fold_of(5, 99), fold_of(4, 7)):
            with pytest.raises(InvalidInput):
                store.commit_folds(sid, "default", [fold_of(1, 5), second], 1)
            assert snapshot(store, sid, "default") == before

    def test_later_fold_in_one_commit_may_cover_an_earlier_one(self, store: Store) -> None:
        sid = opened(store, 10)
        inner, outer = fold_of(2, 3), fold_of(1, 6)
        assert store.commit_folds(sid, "default", [inner, outer], 0) == 1
        assert store.folds(sid, "default") == [outer]
        every = store.folds(sid, "default", include_superseded=True)
        assert [(f.id, f.superseded_by) for f in every] == [(outer.id, None), (inner.id, outer.id)]

    def test_head_is_last_seq_fold_version_and_view_version(self, store: Store) -> None:
        sid = opened(store)
        assert store.head(sid, "default")[:3] == (0, 0, 0)
        store.append(sid, [message(f"m{i}") for i in range(4)])
        assert store.head(sid, "default")[:3] == (4, 0, 0)
        store.commit_folds(sid, "default", [fold_of(1, 2)], 0)
        store.append(sid, [message("m5")])
        assert store.head(sid, "default")[:3] == (5, 1, 0)
        assert store.head(sid, "planner")[:3] == (5, 0, 0)
        store.put_view(sid, "planner", {"budget": 1})
        store.put_view(sid, "planner", {"budget": 2})
        assert store.head(sid, "planner")[:3] == (5, 0, 2)
        assert store.head(sid, "default")[:3] == (
            store.last_seq(sid),
            store.head(sid, "default").fold_version,
            0,
        )

    def test_quarantined_fold_kept_out(self, store: Store) -> None:
        sid = opened(store, 10)
        bad, good = fold_of(1, 4), fold_of(6, 8)
        store.commit_folds(sid, "default", [bad, good], 0)
        assert store.quarantine_fold(sid, "default", bad.id, "its count is wrong") == 2
        assert store.folds(sid, "default") == [good]
        assert store.folds(sid, "default", include_superseded=True) == [good]
        assert store.head(sid, "default").fold_version == 2
        assert store.quarantine_fold(sid, "default", bad.id, "again") == 2
        assert store.quarantine_fold(sid, "default", "no-such-fold", "x") == 2
        assert store.head(sid, "planner").fold_version == 0
        # The range is the log's again: a new fold may cover it, or part of it.
        assert store.commit_folds(sid, "default", [fold_of(2, 5)], 2) == 3
        assert [(f.start, f.end) for f in store.folds(sid, "default")] == [(2, 5), (6, 8)]
        with pytest.raises(NotFound):
            store.quarantine_fold("nope", "default", bad.id, "x")

    def test_damaged_fold_named_then_quarantined(self, store: Store) -> None:
        sid = opened(store, 10)
        damaged, kept = fold_of(1, 4), fold_of(6, 8)
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
        assert store.commit_folds(sid, "default", [fold_of(1, 5)], 2) == 3

    def test_known_folds_come_back_as_the_callers_copies(self, store: Store) -> None:
        """A fold named as ``known`` is not read again: the caller's copy comes back, with
        its ``superseded_by`` as stored; one at odds with its row is ``DamagedFold``."""
        sid = opened(store, 10)
        old, later = fold_of(1, 4), fold_of(9, 10)
        store.commit_folds(sid, "default", [old, later], 0)
        mine = store.folds(sid, "default")
        known = {f.id: f for f in mine}
        again = store.folds(sid, "default", known=known)
        assert again == mine and all(a is b for a, b in zip(again, mine, strict=True))
        cover = fold_of(1, 8)
        store.commit_folds(sid, "default", [cover], 1)
        now = store.folds(sid, "default", known=known)
        assert now == [cover, later] and now[1] is known[later.id]
        every = store.folds(sid, "default", include_superseded=True, known=known)
        assert [(f.id, f.superseded_by) for f in every] == [
            (old.id, cover.id),
            (cover.id, None),
            (later.id, None),
        ]
        assert known[old.id].superseded_by is None
        with pytest.raises(DamagedFold) as info:
            store.folds(sid, "default", known={later.id: replace(later, end=9)})
        assert info.value.fold_id == later.id
        assert store.folds(sid, "default", known={}) == [cover, later]

    def test_returned_folds_are_copies(self, store: Store) -> None:
        sid = opened(store, 10)
        given = fold_of(1, 4)
        store.commit_folds(sid, "default", [given], 0)
        given.messages[0]["content"] = "edited after the commit"
        given.data["n"].append(3)
        read = store.folds(sid, "default")[0]
        read.messages[0]["content"] = "edited on the read copy"
        read.data["sections"]["goal"] = "edited"
        again = store.folds(sid, "default")[0]
        assert again.messages[0]["content"] == "summary of 1..4"
        assert again.data == {"sections": {"goal": "x"}, "n": [1, 2]}
