"""What the Store contract's themed parts share: the records they log, the hooks a
backend's author overrides, and a clock the lease tests move by hand.

Part of ``contextfold.testing.store_contract``; see its docstring.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from contextfold.core.folds import Fold, Placement
from contextfold.core.log import NewMessage
from contextfold.store.base import Store


def message(text: str, role: str = "user", *, key: str | None = None) -> NewMessage:
    return NewMessage({"role": role, "content": text}, len(text), key)


def calling(*ids: str) -> NewMessage:
    """An assistant message calling a tool once per id."""
    calls = [
        {"id": i, "type": "function", "function": {"name": "read", "arguments": "{}"}} for i in ids
    ]
    return NewMessage({"role": "assistant", "content": None, "tool_calls": calls}, 10)


def opened(store: Store, n: int = 0, session_id: str = "s") -> str:
    """A new session with ``n`` user messages logged."""
    store.create_session(session_id, encoding="o200k_base")
    if n:
        store.append(session_id, [message(f"m{i}") for i in range(1, n + 1)])
    return session_id


def fold_of(
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


def snapshot(store: Store, session_id: str, *views: str) -> Any:
    """Everything a failed call must leave as it was."""
    return (
        store.messages(session_id),
        store.last_seq(session_id),
        [
            (
                store.head(session_id, v).fold_version,
                store.folds(session_id, v, include_superseded=True),
            )
            for v in views
        ],
    )


def seqs(records: Any) -> list[int]:
    return [r.seq for r in records]


class Clock:
    """Wall-clock time the test moves by hand, so lease expiry is exact."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class ContractHooks:
    """What only a backend's author can give the contract; left alone, the tests that
    need it are skipped."""

    def store_url(self, store: Store) -> str | None:
        """A URL that opens ``store`` in another process; None when it cannot be shared."""
        return None

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
