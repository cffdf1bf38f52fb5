"""Folds: replacements for contiguous ranges of the log, one view at a time.

A fold replaces log messages ``start..end`` (``seq`` numbers, inclusive) in one
view. Two placements exist:

- ``in_place`` folds (summaries, masked tool units, trimmed history) render where
  their range was. They never partly overlap: a new fold either lies outside an
  active fold or covers it whole, and then supersedes it.
- ``facts`` folds (important data, variables, answers to concept questions)
  speak for the whole history and render once, right after the system prompt.
  A view has at most one active facts fold; a new one supersedes it.

Superseded folds are kept for audit and never rendered.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message

Placement = Literal["in_place", "facts"]


@dataclass(frozen=True)
class Fold:
    """One fold; ``messages`` is exactly what a model is shown in its place."""

    view: str
    start: int
    end: int
    kind: str
    text: str
    messages: tuple[Message, ...]
    strategy: str
    tokens_before: int
    tokens_after: int
    placement: Placement = "in_place"
    data: Mapping[str, Any] = field(default_factory=dict)
    usage: Mapping[str, Any] | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created_at: float = field(default_factory=time.time)
    superseded_by: str | None = None

    def __post_init__(self) -> None:
        if self.start < 1 or self.end < self.start:
            raise InvalidInput(
                f"fold range {self.start}..{self.end} is empty or starts before seq 1",
                field="start",
            )
        if self.placement not in ("in_place", "facts"):
            raise InvalidInput(f"unknown placement {self.placement!r}", field="placement")
        if not self.messages:
            raise InvalidInput("a fold renders as at least one message", field="messages")

    def covers(self, other: Fold) -> bool:
        return self.start <= other.start and other.end <= self.end

    def overlaps(self, other: Fold) -> bool:
        return not (other.end < self.start or self.end < other.start)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "view": self.view,
            "start": self.start,
            "end": self.end,
            "kind": self.kind,
            "placement": self.placement,
            "text": self.text,
            "messages": list(self.messages),
            "strategy": self.strategy,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "data": dict(self.data),
            "usage": dict(self.usage) if self.usage is not None else None,
            "created_at": self.created_at,
            "superseded_by": self.superseded_by,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Fold:
        return cls(
            id=d["id"],
            view=d["view"],
            start=d["start"],
            end=d["end"],
            kind=d["kind"],
            placement=d["placement"],
            text=d["text"],
            messages=tuple(d["messages"]),
            strategy=d["strategy"],
            tokens_before=d["tokens_before"],
            tokens_after=d["tokens_after"],
            data=d.get("data") or {},
            usage=d.get("usage"),
            created_at=d["created_at"],
            superseded_by=d.get("superseded_by"),
        )


def superseded_by_commit(active: Iterable[Fold], new: Fold) -> list[Fold]:
    """The active folds ``new`` replaces; refuses a partial overlap.

    Shared by every store so the rule is written once.
    """
    replaced: list[Fold] = []
    for old in active:
        if old.placement != new.placement:
            continue
        if new.placement == "facts" or new.covers(old):
            replaced.append(old)
        elif new.overlaps(old):
            raise InvalidInput(
                f"fold {new.start}..{new.end} partly overlaps active fold {old.start}..{old.end}",
                field="start",
            )
    return replaced


def plan_commit(
    active: Sequence[Fold], view: str, folds: Sequence[Fold], last_seq: int
) -> list[tuple[Fold, set[str]]]:
    """Check a commit against the view's active folds; for each new fold, the ids it supersedes.

    Pure, so every store refuses the same commits with the same errors before writing.
    """
    current = list(active)
    seen = {f.id for f in current}
    out: list[tuple[Fold, set[str]]] = []
    for fold in folds:
        if fold.view != view:
            raise InvalidInput(f"fold is for view {fold.view!r}, not {view!r}", field="view")
        if fold.end > last_seq:
            raise InvalidInput(f"fold ends at seq {fold.end}, the log at {last_seq}", field="end")
        if fold.superseded_by is not None:
            raise InvalidInput("a fold is committed active, not superseded", field="superseded_by")
        if fold.id in seen:
            raise InvalidInput(f"fold id {fold.id!r} is already stored", field="id")
        gone = {f.id for f in superseded_by_commit(current, fold)}
        current = [f for f in current if f.id not in gone]
        current.append(fold)
        seen.add(fold.id)
        out.append((fold, gone))
    return out


def active_in_place(folds: Sequence[Fold]) -> list[Fold]:
    """Active in-place folds sorted by start."""
    return sorted(
        (f for f in folds if f.placement == "in_place" and f.superseded_by is None),
        key=lambda f: f.start,
    )


def active_facts(folds: Sequence[Fold]) -> Fold | None:
    for f in folds:
        if f.placement == "facts" and f.superseded_by is None:
            return f
    return None
