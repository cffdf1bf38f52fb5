"""The Store contract's promises about the log as a tree (``contextfold.core.branches``):
parents, branches read as paths, the order rules along a branch, folds per branch.

Part of ``contextfold.testing.store_contract.StoreContract``.
"""

from __future__ import annotations

import pytest

from contextfold.core.branches import BranchPath
from contextfold.core.errors import InvalidInput
from contextfold.core.log import NewMessage
from contextfold.store.base import Store
from contextfold.testing.store_contract_common import (
    calling,
    fold_of,
    message,
    opened,
    seqs,
    snapshot,
)


def _result(call_id: str) -> NewMessage:
    return NewMessage({"role": "tool", "tool_call_id": call_id, "content": "ok"}, 2)


class BranchContract:
    """Every message has a parent; appending after an earlier one starts a branch."""

    def test_a_log_appended_without_parents_is_one_line(self, store: Store) -> None:
        sid = opened(store, 3)
        store.append(sid, [message("d", "assistant")])
        assert [(m.seq, m.parent) for m in store.messages(sid)] == [(1, 0), (2, 1), (3, 2), (4, 3)]
        assert store.links(sid) == [(1, 0), (2, 1), (3, 2), (4, 3)]
        head = store.head(sid, "default")
        assert (head.last_seq, head.path) == (4, BranchPath(((1, 4),)))

    def test_appending_after_an_earlier_message_starts_a_branch(self, store: Store) -> None:
        sid = opened(store, 3)
        fork = store.append(sid, [message("b2", "assistant"), message("c2")], parent=2)
        assert [(m.seq, m.parent) for m in fork] == [(4, 2), (5, 4)]
        # Without a parent, an append continues the newest message's branch.
        assert [(m.seq, m.parent) for m in store.append(sid, [message("d2")])] == [(6, 5)]
        assert store.head(sid, "v").path == BranchPath(((1, 2), (4, 6)))
        old = store.head(sid, "v", branch=3)
        assert (old.last_seq, old.path) == (3, BranchPath(((1, 3),)))
        assert store.append(sid, [message("d")], parent=3)[0].parent == 3
        assert store.head(sid, "v").path == BranchPath(((1, 3), (7, 7)))
        assert store.links(sid)[-4:] == [(4, 2), (5, 4), (6, 5), (7, 3)]

    def test_a_new_first_message_starts_a_root_of_its_own(self, store: Store) -> None:
        sid = opened(store, 2)
        assert store.append(sid, [message("again")], parent=0)[0].parent == 0
        assert store.head(sid, "v").path == BranchPath(((3, 3),))

    @pytest.mark.parametrize("parent", [99, -1, "2", 1.0, True])
    def test_a_parent_not_in_the_log_is_refused_and_changes_nothing(
        self, store: Store, parent: object
    ) -> None:
        sid = opened(store, 2)
        before = snapshot(store, sid)
        with pytest.raises(InvalidInput) as caught:
            store.append(sid, [message("x")], parent=parent)  # type: ignore[arg-type]
        assert caught.value.field == "parent"
        assert snapshot(store, sid) == before
        with pytest.raises(InvalidInput) as head:
            store.head(sid, "v", branch=99)
        assert head.value.field == "branch"

    def test_the_order_rules_apply_along_the_branch(self, store: Store) -> None:
        sid = opened(store, 1)
        store.append(sid, [calling("c1")])  # seq 2: an open call
        store.append(sid, [message("meanwhile")], parent=1)  # seq 3, another branch
        answer = _result("c1")
        # The newest branch ends with a user message: the call's result cannot follow it...
        with pytest.raises(InvalidInput) as caught:
            store.append(sid, [answer])
        assert (caught.value.field, caught.value.index) == ("tool_call_id", 2)
        # ...but follows its call on the call's own branch.
        assert seqs(store.append(sid, [answer], parent=2)) == [4]
        assert store.head(sid, "v").path == BranchPath(((1, 2), (4, 4)))
        # Each id once along a branch: a second result after the first is refused.
        with pytest.raises(InvalidInput):
            store.append(sid, [answer], parent=4)

    def test_an_error_names_the_place_on_the_branch(self, store: Store) -> None:
        sid = opened(store, 3)
        store.append(sid, [message("x")], parent=1)  # seq 4, second on its branch
        with pytest.raises(InvalidInput) as caught:
            store.append(sid, [message("y"), _result("nope")], parent=4)
        assert caught.value.index == 3  # m1, x, y, then the orphan result

    def test_folds_are_per_branch_where_their_messages_are(self, store: Store) -> None:
        sid = opened(store, 6)  # 1..6
        store.append(sid, [message(f"b{i}") for i in range(7, 10)], parent=3)  # 7..9 after 3
        shared = fold_of(1, 2)
        version = store.commit_folds(sid, "default", [shared], 0, branch=6)
        theirs = fold_of(7, 8)
        version = store.commit_folds(sid, "default", [theirs], version, branch=9)
        # Overlapping seq ranges of different branches are no overlap.
        other = fold_of(3, 5)
        version = store.commit_folds(sid, "default", [other], version, branch=6)
        # A fold covering a branch's folds supersedes them, and only them.
        wide = fold_of(1, 8)
        version = store.commit_folds(sid, "default", [wide], version, branch=9)
        active = {(f.start, f.end) for f in store.folds(sid, "default")}
        assert active == {(1, 8), (3, 5)}
        # A partial overlap on the branch itself is refused, naming it.
        with pytest.raises(InvalidInput) as partial:
            store.commit_folds(sid, "default", [fold_of(4, 6)], version, branch=6)
        assert partial.value.field == "start"
        # A fold made on another branch that ends past the branch's head is refused.
        with pytest.raises(InvalidInput):
            store.commit_folds(sid, "default", [fold_of(8, 9)], version, branch=6)
