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

_PAGE = 1000


def log_tokens(store: Store, session_id: str, folds: Sequence[Fold]) -> dict[str, int]:
    """Tokens of the logged messages in each fold's range, by fold id.

    The log is read once over the union of the ranges, a page at a time, so
    nested and superseded folds do not read the same messages twice.
    """
    totals: dict[str, int] = {}
    for low, high, inside in _spans(folds):
        sums = [0]  # sums[i]: tokens of seq low .. low + i - 1 (the log's seqs are dense)
        seq = low
        while seq <= high:
            page = store.messages(session_id, seq, min(high, seq + _PAGE - 1))
            if not page:
                break
            for logged in page:
                sums.append(sums[-1] + logged.tokens)
            seq = page[-1].seq + 1
        for fold in inside:
            last = min(fold.end - low + 1, len(sums) - 1)
            totals[fold.id] = sums[last] - sums[min(fold.start - low, last)]
    return totals


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
