"""How the in-memory store reads its folds back: each through the checks a database
row gets, so a fold damaged in memory is reported instead of rendered, and as a copy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from contextfold.core.errors import DamagedFold, InvalidInput
from contextfold.core.folds import Fold, fold_copy


def readable(
    session_id: str,
    view: str,
    kept: Sequence[tuple[int, Any]],
    gone: Mapping[str, str],
    *,
    raising: bool,
    known: Mapping[str, Fold] | None = None,
) -> list[Fold]:
    """Copies of the view's unquarantined folds, each read back as a stored row is.

    A fold that does not read back is ``DamagedFold`` when ``raising``, else left out.
    A fold ``known`` to the reader, and stored as it knows it, comes back as its copy.
    """
    out: list[Fold] = []
    for index, item in kept:
        fold_id = fold_id_of(item, index)
        if fold_id in gone:
            continue
        copy = None if known is None else known.get(fold_id)
        if copy is not None and isinstance(item, Fold):
            if _same_place(copy, item):
                superseded = item.superseded_by
                out.append(
                    copy
                    if copy.superseded_by == superseded
                    else replace(copy, superseded_by=superseded)
                )
            elif raising:
                raise DamagedFold(
                    session_id, view, fold_id, "its row disagrees with the fold as first read"
                )
            continue
        try:
            if not isinstance(item, Fold):
                raise InvalidInput(f"a stored fold is a {type(item).__name__}", field="fold")
            out.append(fold_copy(item))
        except (InvalidInput, TypeError, ValueError, AttributeError) as exc:
            if raising:
                raise DamagedFold(session_id, view, fold_id, str(exc)) from exc
    return out


def _same_place(copy: Fold, stored: Fold) -> bool:
    return (copy.view, copy.start, copy.end, copy.placement) == (
        stored.view,
        stored.start,
        stored.end,
        stored.placement,
    )


def fold_id_of(item: Any, index: int) -> str:
    """A stored fold's id, or where it lies when it has none to read."""
    fold_id = item.get("id") if isinstance(item, Mapping) else getattr(item, "id", None)
    return fold_id if isinstance(fold_id, str) else f"#{index}"
