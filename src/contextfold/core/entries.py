"""What a view is made of right now: raw messages and active folds, in log order.

Strategies plan over entries and render walks them; both see a fold as one
indivisible entry, so nothing downstream can split what a fold holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from contextfold.core.folds import Fold
from contextfold.core.log import LoggedMessage
from contextfold.core.messages import Message


@dataclass(frozen=True)
class Entry:
    """A raw message (``fold is None``) or an in-place fold covering ``start..end``."""

    start: int
    end: int
    tokens: int
    messages: tuple[Message, ...]
    fold: Fold | None = None

    @classmethod
    def of_message(cls, logged: LoggedMessage) -> Entry:
        return cls(logged.seq, logged.seq, logged.tokens, (logged.message,))

    @classmethod
    def of_fold(cls, fold: Fold) -> Entry:
        return cls(fold.start, fold.end, fold.tokens_after, fold.messages, fold)

    @property
    def message(self) -> Message | None:
        """The raw message, or None for a fold."""
        return self.messages[0] if self.fold is None else None

    @property
    def role(self) -> str | None:
        msg = self.message
        return None if msg is None else str(msg["role"])


def entries_of(messages: Sequence[LoggedMessage], folds: Sequence[Fold]) -> list[Entry]:
    """Merge raw messages and active in-place folds into log order.

    ``folds`` must be active, in-place and sorted by start; messages they cover
    are dropped in favour of the fold.
    """
    out: list[Entry] = []
    fi = 0
    for logged in messages:
        while fi < len(folds) and folds[fi].start <= logged.seq:
            out.append(Entry.of_fold(folds[fi]))
            fi += 1
        last = out[-1] if out else None
        if last is not None and last.fold is not None and last.end >= logged.seq:
            continue
        out.append(Entry.of_message(logged))
    out.extend(Entry.of_fold(f) for f in folds[fi:])
    return out
