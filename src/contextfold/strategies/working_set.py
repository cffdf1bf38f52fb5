"""The working set: how much of a view's newest rounds stays verbatim, by kind of view.

A chat is asked about its whole past, so its room goes to folds (and recall):
only ``SHARES["chat"]`` of it stays as recent raw messages. An agent continues
its work from its latest rounds, their tool calls and results: it needs them
whole, so ``SHARES["agent"]`` of the room stays verbatim. A view's kind is
read from its entries (tool calls or results make it an agent view) unless a
strategy is told (``kind``), and an explicit ``recent_share`` overrides both.
``ExtractiveSummary`` folds only the rounds before the working set, and
``ObservationMasking`` (with ``working_set``) masks no tool result inside it
while it fits its share.
"""

from __future__ import annotations

from typing import Literal

from contextfold.core.errors import InvalidInput
from contextfold.strategies.base import ViewState

Kind = Literal["chat", "agent"]
SHARES: dict[str, float] = {"chat": 0.1, "agent": 0.5}
"""Each kind's verbatim share of the room at the low-water mark. Chat: tuned for LoCoMo
answer retention. Agent: the shipped demo at its 12,000-token budget keeps its last two
rounds whole (one at 0.1, three at 0.7), for 0.527 of the log's paths and identifiers
in the prompt instead of 0.538 (0.513 at 0.7); the table is in docs/recall.md."""


def check(kind: str | None, recent_share: float | None) -> None:
    """Refuse a kind other than chat or agent and a share outside [0, 1]."""
    if kind is not None and kind not in SHARES:
        raise InvalidInput(f"kind must be 'chat' or 'agent', not {kind!r}", field="kind")
    if recent_share is not None and (
        isinstance(recent_share, bool)
        or not isinstance(recent_share, int | float)
        or not 0 <= recent_share <= 1
    ):
        raise InvalidInput(
            f"recent_share must be a number from 0 to 1, not {recent_share!r}",
            field="recent_share",
        )


def view_kind(state: ViewState) -> Kind:
    """``agent`` when any message of the view holds a tool call or a tool result, or a
    fold says it was made in an agent view (a summary of tool work holds no tool call)."""
    for entry in state.entries:
        if entry.fold is not None and entry.fold.data.get("kind") == "agent":
            return "agent"
        for message in entry.messages:
            if message["role"] == "tool" or message.get("tool_calls"):
                return "agent"
    return "chat"


def kind_and_share(
    state: ViewState, kind: Kind | None, recent_share: float | None
) -> tuple[Kind, float]:
    """The view's kind (``kind``, else read from it) and its verbatim share
    (``recent_share``, else the kind's)."""
    read = kind if kind is not None else view_kind(state)
    return read, recent_share if recent_share is not None else SHARES[read]


def rounds_before(state: ViewState, share: float, keep_rounds: int) -> int:
    """How many of the oldest closed rounds are outside the working set: the fewest
    whose successors (the newer rounds, closed or not) fit ``share`` of the room at
    the low-water mark, keeping at least ``keep_rounds`` closed ones (no budget: all
    but those). 0: none to fold."""
    closed = [r for r in state.rounds if r.closed]
    foldable = len(closed) - max(keep_rounds, 0)
    if foldable <= 0:
        return 0
    if state.budget is None:
        return foldable
    sums = [0]
    for entry in state.entries:
        sums.append(sums[-1] + entry.tokens)
    room = state.low_mark(state.budget) - (state.tokens - sums[-1])
    return next(
        (
            n
            for n in range(1, foldable + 1)
            if sums[-1] - sums[closed[n - 1].last + 1] <= share * room
        ),
        foldable,
    )


def working_set_start(state: ViewState, share: float, keep_rounds: int) -> int:
    """The first entry of the working set, the newer rounds that ``rounds_before``
    leaves verbatim; ``len(state.entries)`` when there is no budget, no closed round
    to fold, or the newest rounds alone are over the share (then nothing is spared)."""
    end = len(state.entries)
    k = rounds_before(state, share, keep_rounds)
    if state.budget is None or not k:
        return end
    start = [r for r in state.rounds if r.closed][k - 1].last + 1
    total = sum(e.tokens for e in state.entries)
    room = state.low_mark(state.budget) - (state.tokens - total)
    kept = sum(e.tokens for e in state.entries[start:])
    return start if kept <= share * room else end
