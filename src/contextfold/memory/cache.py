"""The last prompt and the last view state, extended by appends instead of rebuilt.

Between two fold commits a view only grows at its end, and nothing before the
new messages can change. So when the fold and configuration versions are the
ones the cached value was built at, the next prompt is the last one plus the
new messages (if they still fit the budget without a cut), and the next state
the last one plus their entries. Everything else (a commit, a new budget, a
cut, a filter that might hide part of an earlier tool unit) falls back to a
fresh read. A turn then costs what it appends, not what the view holds, and
its prompt extends the previous one byte for byte, which keeps providers'
prefix caches warm.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from contextfold.core.entries import Entry
from contextfold.core.log import LoggedMessage
from contextfold.core.messages import for_model
from contextfold.core.render import Rendered
from contextfold.core.units import answers_tail
from contextfold.memory.filters import MessageFilter
from contextfold.store.base import Head
from contextfold.strategies.base import ViewState

ReadAfter = Callable[[int], list[LoggedMessage]]
"""Read the logged messages after a seq, oldest first."""


class PromptCache:
    """The last uncut prompt of one view, keyed by fold version, config version and budget."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple[int, int, int | None] | None = None
        self._last = 0
        self._rendered: Rendered | None = None

    def put(self, head: Head, budget: int | None, rendered: Rendered) -> None:
        with self._lock:
            if not rendered.whole:
                self._rendered = None
                return
            self._key = (head.fold_version, head.view_version, budget)
            self._last = head.last_seq
            self._rendered = rendered

    def extend(
        self, head: Head, budget: int | None, keep: MessageFilter | None, read_after: ReadAfter
    ) -> Rendered | None:
        """The prompt at ``head`` from the cached one, or None when it must be rendered afresh."""
        key = (head.fold_version, head.view_version, budget)
        with self._lock:
            if self._rendered is None or self._key != key or head.last_seq < self._last:
                return None
            last, base = self._last, self._rendered
        if head.last_seq == last:
            return _copy(base)
        new = [m for m in read_after(last) if m.seq <= head.last_seq]
        if keep is not None and not all(keep(m.message) for m in new):
            return None
        messages = list(base.messages)
        for logged in new:
            if logged.role == "tool" and not answers_tail(messages, logged.message):
                return None
            messages.append(for_model(logged.message))
        tokens = base.tokens + sum(m.tokens for m in new)
        if budget is not None and tokens > budget:
            return None
        grown = Rendered(messages, tokens, 0, (), base.folds, True)
        with self._lock:
            if self._key == key and self._last == last:
                self._last = head.last_seq
                self._rendered = grown
        return _copy(grown)


class StateCache:
    """The last view state of one view, keyed by fold version and config version."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple[int, int] | None = None
        self._last = 0
        self._state: ViewState | None = None

    def put(self, head: Head, state: ViewState) -> None:
        with self._lock:
            self._key = (head.fold_version, head.view_version)
            self._last = head.last_seq
            self._state = state

    def extend(
        self, head: Head, keep: MessageFilter | None, read_after: ReadAfter
    ) -> ViewState | None:
        key = (head.fold_version, head.view_version)
        with self._lock:
            if self._state is None or self._key != key or head.last_seq < self._last:
                return None
            last, base = self._last, self._state
        if head.last_seq == last:
            return base
        new = [m for m in read_after(last) if m.seq <= head.last_seq]
        if not base.entries and any(m.role in ("system", "developer") for m in new):
            return None  # may still be part of the leading system prompt
        if keep is not None and any(m.role == "tool" or not keep(m.message) for m in new):
            return None  # the filter judges tool units whole: read the view afresh
        state = ViewState(
            session_id=base.session_id,
            view=base.view,
            version=base.version,
            system=base.system,
            entries=base.entries + tuple(Entry.of_message(m) for m in new),
            facts=base.facts,
            counter=base.counter,
        )
        with self._lock:
            if self._key == key and self._last == last:
                self._last = head.last_seq
                self._state = state
        return state


def _copy(rendered: Rendered) -> Rendered:
    """The caller gets its own list; the cache keeps extending its own."""
    return Rendered(
        list(rendered.messages),
        rendered.tokens,
        rendered.omitted,
        rendered.clipped,
        rendered.folds,
        rendered.whole,
    )
