"""The last prompt and the last view state, extended by appends instead of rebuilt.

Between two fold commits a view only grows at its end, and nothing before the
new messages can change. A value built on one branch grows on any branch that
holds the seq it was built at (those share everything up to it); another
branch is read afresh. So when the fold and configuration versions are the
ones the cached value was built at, the next prompt is the last one plus the
new messages (if they still fit the budget without a cut), and the next state
the last one plus their entries. Everything else (a commit, a new budget, a
cut, a filter that might hide part of an earlier tool unit, a new user message
in a view that recalls by it) falls back to a fresh read. A turn then costs what it appends, not what the view holds, and
its prompt extends the previous one byte for byte, which keeps providers'
prefix caches warm.

The cached prompt is the cache's own: it keeps a copy of what it is given and
hands out copies, so a caller editing a prompt's message dicts (adding a
``cache_control`` key, say) never edits the next prompt.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Generic, TypeVar

from contextfold.core.entries import Entry
from contextfold.core.log import LoggedMessage, json_copy
from contextfold.core.messages import for_model
from contextfold.core.render import Rendered
from contextfold.core.units import answers_tail, waits_for_results
from contextfold.memory.filters import MessageFilter
from contextfold.memory.recalled import Block
from contextfold.store.base import Head
from contextfold.strategies.base import ViewState

ReadAfter = Callable[[int], list[LoggedMessage]]
"""Read the logged messages after a seq, oldest first."""

T = TypeVar("T")


class Grown(Generic[T]):
    """One value built at a key (the versions it depends on) and a last seq (the prompt,
    the state, a view's pins: ``contextfold.memory.pins``).

    ``grow`` hands the value and the messages logged since to ``extend``, and
    keeps what it returns unless another thread moved the value meanwhile.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple[int | None, ...] | None = None
        self._last = 0
        self._value: T | None = None

    def put(self, key: tuple[int | None, ...], last: int, value: T | None) -> None:
        with self._lock:
            self._key, self._last, self._value = key, last, value

    def grow(
        self,
        key: tuple[int | None, ...],
        head: Head,
        read_after: ReadAfter,
        extend: Callable[[T, list[LoggedMessage]], T | None],
    ) -> T | None:
        """The value grown to ``head``; None when it was built on another branch (one
        whose path does not hold the seq it was built at) or cannot grow."""
        last_seq = head.last_seq
        with self._lock:
            if self._value is None or self._key != key or last_seq < self._last:
                return None
            if self._last and not head.path.holds(self._last):
                return None
            last, base = self._last, self._value
        if last_seq == last:
            return base
        grown = extend(base, [m for m in read_after(last) if m.seq <= last_seq])
        if grown is not None:
            with self._lock:
                if self._key == key and self._last == last:
                    self._last, self._value = last_seq, grown
        return grown


class PromptCache:
    """The last whole prompt of one view, keyed by fold version, config version and budget,
    without its recall block; and the block last recalled for it, with the user message
    it answered."""

    def __init__(self) -> None:
        self._grown: Grown[Rendered] = Grown()
        self._block: tuple[tuple[int | None, ...], Block | None] | None = None

    def put(self, head: Head, budget: int | None, rendered: Rendered) -> None:
        key = (head.fold_version, head.view_version, budget)
        self._grown.put(key, head.last_seq, _copy(rendered) if rendered.whole else None)

    def extend(
        self,
        head: Head,
        budget: int | None,
        keep: MessageFilter | None,
        read_after: ReadAfter,
        pinned: MessageFilter | None = None,
    ) -> Rendered | None:
        """The prompt at ``head`` from the cached one, or None when it must be rendered afresh
        (also when a new message is one a pin rule selects: ``pinned``, which may make a pin
        the prompt holds an old version)."""

        def extend(base: Rendered, new: list[LoggedMessage]) -> Rendered | None:
            if keep is not None and not all(keep(m.message) for m in new):
                return None
            if pinned is not None and any(pinned(m.message) for m in new):
                return None
            messages = list(base.messages)
            for logged in new:
                if logged.role == "tool" and not answers_tail(messages, logged.message):
                    return None
                if logged.role != "tool" and waits_for_results(messages):
                    return None  # render answers that call now (``answer_missing``)
                messages.append(for_model(logged.message))
            tokens = base.tokens + sum(m.tokens for m in new)
            if budget is not None and tokens > budget:
                return None
            shown = base.shown + tuple(m.seq for m in new)
            return replace(base, messages=messages, tokens=tokens, shown=shown)

        key = (head.fold_version, head.view_version, budget)
        grown = self._grown.grow(key, head, read_after, extend)
        return None if grown is None else _copy(grown)

    def recalled(self, head: Head, budget: int | None, asked: int) -> tuple[bool, Block | None]:
        """The block last recalled at these versions and budget for the user message at seq
        ``asked``: (found, block); a block is kept while the turn goes on."""
        kept = self._block
        if kept is None or kept[0] != (head.fold_version, head.view_version, budget, asked):
            return False, None
        return True, kept[1]

    def keep_block(self, head: Head, budget: int | None, asked: int, block: Block | None) -> None:
        self._block = ((head.fold_version, head.view_version, budget, asked), block)


class StateCache:
    """The last view state of one view, keyed by fold version and config version."""

    def __init__(self) -> None:
        self._grown: Grown[ViewState] = Grown()

    def put(self, head: Head, state: ViewState) -> None:
        self._grown.put((head.fold_version, head.view_version), head.last_seq, state)

    def extend(
        self, head: Head, keep: MessageFilter | None, read_after: ReadAfter
    ) -> ViewState | None:
        def extend(base: ViewState, new: list[LoggedMessage]) -> ViewState | None:
            if not base.entries and any(m.role in ("system", "developer") for m in new):
                return None  # may still be part of the leading system prompt
            if keep is not None and any(m.role == "tool" or not keep(m.message) for m in new):
                return None  # the filter judges tool units whole: read the view afresh
            return ViewState(
                session_id=base.session_id,
                view=base.view,
                version=base.version,
                system=base.system,
                entries=base.entries + tuple(Entry.of_message(m) for m in new),
                facts=base.facts,
                counter=base.counter,
            )

        key = (head.fold_version, head.view_version)
        return self._grown.grow(key, head, read_after, extend)


def _copy(rendered: Rendered) -> Rendered:
    """The caller gets its own messages; the cache keeps extending its own."""
    return replace(rendered, messages=json_copy(rendered.messages))
