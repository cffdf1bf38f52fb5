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

import bisect
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol

from contextfold.core.errors import InvalidInput
from contextfold.core.log import json_copy
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
        """A fold from stored data; ``InvalidInput`` naming the field that is not what it must be.

        Stored data may have been damaged by hand, so every field's type is checked here,
        once for every store, before a fold is handed to render or planning.
        """
        if not isinstance(d, Mapping):
            raise InvalidInput(f"a fold is a JSON object, not {type(d).__name__}", field="fold")
        messages = _field(d, "messages", list)
        if not all(isinstance(m, dict) for m in messages):
            raise InvalidInput("every fold message must be a JSON object", field="messages")
        usage = d.get("usage")
        if usage is not None and not isinstance(usage, dict):
            raise InvalidInput("usage must be a JSON object or null", field="usage")
        superseded_by = d.get("superseded_by")
        if superseded_by is not None and not isinstance(superseded_by, str):
            raise InvalidInput("superseded_by must be a fold id", field="superseded_by")
        return cls(
            id=_field(d, "id", str),
            view=_field(d, "view", str),
            start=_field(d, "start", int),
            end=_field(d, "end", int),
            kind=_field(d, "kind", str),
            placement=_field(d, "placement", str),
            text=_field(d, "text", str),
            messages=tuple(messages),
            strategy=_field(d, "strategy", str),
            tokens_before=_field(d, "tokens_before", int),
            tokens_after=_field(d, "tokens_after", int),
            data=_field(d, "data", dict, d.get("data") or {}),
            usage=usage,
            created_at=_field(d, "created_at", float),
            superseded_by=superseded_by,
        )


def _field(d: Mapping[str, Any], name: str, kind: type, default: Any = None) -> Any:
    """``d[name]`` if it is a ``kind`` (ints are floats too, bools are neither)."""
    value = d.get(name, default)
    ok = isinstance(value, kind) and not isinstance(value, bool)
    if kind is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok:
        raise InvalidInput(
            f"expected {kind.__name__}, found {type(value).__name__}"
            + ("" if name in d else " (missing)"),
            field=name,
        )
    if kind is int and value < 0:
        raise InvalidInput(f"must not be negative, found {value}", field=name)
    return value


def range_label(start: int, end: int) -> str:
    """How a fold names its range to the model: ``[folded: seq 12-40]``, so a model can
    ask for what it replaced (``contextfold.memory.recall_tools``)."""
    return f"[folded: seq {start}-{end}]"


def labelled(message: Message, start: int, end: int) -> Message:
    """``message`` with ``range_label`` on a line of its own after its text: what a
    fold's message carries into every prompt (a copy; ``message`` is left as it is)."""
    label = range_label(start, end)
    content = message.get("content")
    if isinstance(content, list):
        return {**message, "content": [*content, {"type": "text", "text": label}]}
    if isinstance(content, str) and content:
        return {**message, "content": f"{content}\n{label}"}
    return {**message, "content": label}


_LABEL = re.compile(r"\n?\[folded: seq \d+-\d+\]\Z")


def unlabelled(message: Message) -> Message:
    """``message`` without the label ``labelled`` gave it: what a strategy folding an
    earlier fold again reads, so that labels of folds it supersedes are not quoted."""
    content = message.get("content")
    if isinstance(content, str):
        return {**message, "content": _LABEL.sub("", content)}
    if isinstance(content, list) and content and _LABEL.fullmatch(str(content[-1].get("text"))):
        return {**message, "content": content[:-1]}
    return message


class FoldSpan(Protocol):
    """What a commit checks of an active fold: where it lies, and where it renders."""

    @property
    def id(self) -> str: ...
    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...
    @property
    def placement(self) -> str: ...


class Span(NamedTuple):
    """A stored fold's place without its body: what a store reads to check a commit."""

    id: str
    start: int
    end: int
    placement: str


def plan_commit(
    active: Sequence[FoldSpan], view: str, folds: Sequence[Fold], last_seq: int
) -> list[tuple[Fold, set[str]]]:
    """Check a commit against the view's active folds; for each new fold, the ids it supersedes.

    A new in-place fold supersedes the active folds it covers and refuses a
    partial overlap; a new facts fold supersedes the active facts. Pure, so every
    store refuses the same commits with the same errors before writing.

    Active in-place folds never overlap, so sorted by start they are sorted by
    end too: the folds a new one meets are one run found by bisection, and a
    commit costs O(n log n) in the folds it meets and makes, not their product.
    """
    placed: list[FoldSpan] = sorted(
        (f for f in active if f.placement == "in_place"), key=lambda f: f.start
    )
    ends = [f.end for f in placed]
    facts = {f.id for f in active if f.placement == "facts"}
    seen = {f.id for f in active}
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
        seen.add(fold.id)
        if fold.placement == "facts":
            out.append((fold, facts))
            facts = {fold.id}
            continue
        first = bisect.bisect_left(ends, fold.start)
        last = first
        while last < len(placed) and placed[last].start <= fold.end:
            old = placed[last]
            if not (fold.start <= old.start and old.end <= fold.end):
                raise InvalidInput(
                    f"fold {fold.start}..{fold.end} partly overlaps active fold "
                    f"{old.start}..{old.end}",
                    field="start",
                )
            last += 1
        out.append((fold, {f.id for f in placed[first:last]}))
        placed[first:last] = [fold]
        ends[first:last] = [fold.end]
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


def fold_copy(fold: Fold) -> Fold:
    """The fold as a store hands it out: read back through its JSON form (checked like a
    stored row), sharing nothing mutable."""
    return Fold.from_dict(json_copy(fold.to_dict()))
