"""What a fold saved, measured against the log.

A fold's ``tokens_before`` is what the view held over its range just before it:
often an older fold it supersedes, so ``tokens_before - tokens_after`` shows only
the last step. What a reader wants (the API's folds, the page's bands) is the
saving against the log: the tokens of the logged messages ``start..end``, less
the fold's own.
"""

from __future__ import annotations

from collections.abc import Sequence

from contextfold.core.folds import Fold
from contextfold.store.base import Store


def log_tokens(store: Store, session_id: str, folds: Sequence[Fold]) -> dict[str, int]:
    """Tokens of the logged messages in each fold's range, by fold id.

    The stored counts are read once over the union of the ranges (never the
    messages), so nested and superseded folds do not read the same rows twice.
    """
    totals: dict[str, int] = {}
    for low, high, inside in _spans(folds):
        sums = {low - 1: 0}  # sums[seq]: tokens of low .. seq
        running = 0
        for seq, tokens in store.token_counts(session_id, low, high):
            running += tokens
            sums[seq] = running
        for fold in inside:
            totals[fold.id] = _upto(sums, fold.end) - _upto(sums, fold.start - 1)
    return totals


def _upto(sums: dict[int, int], seq: int) -> int:
    """Tokens up to ``seq``; past the end of the log, up to its last message."""
    return sums[seq] if seq in sums else sums[max(sums)]


def _spans(folds: Sequence[Fold]) -> list[tuple[int, int, list[Fold]]]:
    """The ranges' union as disjoint spans, each with the folds inside it."""
    spans: list[tuple[int, int, list[Fold]]] = []
    for fold in sorted(folds, key=lambda f: f.start):
        if spans and fold.start <= spans[-1][1] + 1:
            low, high, inside = spans[-1]
            inside.append(fold)
            spans[-1] = (low, max(high, fold.end), inside)
        else:
            spans.append((fold.start, fold.end, [fold]))
    return spans
