"""What every backend shares about the log's tree (``contextfold.core.branches``).

Each message row keeps its ``parent`` and the first seq of its run (the
stretch of consecutive seqs, each the parent of the next, that it ends or
continues), so a branch is read a run at a time: one or two indexed reads for
a log without branches, whatever its length. Plain functions the backends
call inside their own transactions; nothing here reads or writes a store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

from contextfold.core.branches import BranchPath
from contextfold.core.errors import InvalidInput, NotFound
from contextfold.core.folds import Fold, FoldSpan, Span
from contextfold.store.base import Head

S = TypeVar("S", bound=FoldSpan)


def check_seq(value: object, field: str) -> int | None:
    """A ``parent`` or ``branch`` argument: None, or a seq (0 or more)."""
    if value is None:
        return None
    if type(value) is not int or value < 0:
        raise InvalidInput(f"{field} must be a seq (0 or more), not {value!r}", field=field)
    return value


def missing(field: str, seq: int) -> InvalidInput:
    return InvalidInput(f"{field} {seq} is not a message of this session's log", field=field)


def head_of(
    found: tuple[Any, ...] | None,
    session_id: str,
    branch: int | None,
    read_path: Callable[[int], BranchPath],
) -> Head:
    """``Store.head`` from a database's head row: the log's last seq, the versions, the
    branch's last seq, its run's first seq and that one's parent. A branch of one run
    (the parent 0: every log without branches) needs nothing more; ``read_path`` reads
    any other."""
    if found is None:
        raise NotFound(f"no session {session_id!r}")
    last, folds, config, seq, first, parent = found
    if branch is not None and branch > 0 and seq is None:
        raise missing("branch", branch)
    if seq is None:
        path = BranchPath()
    elif not parent:
        path = BranchPath(((int(first), int(seq)),))
    else:
        path = read_path(int(seq))
    shown = int(last or 0) if branch is None else branch
    return Head(shown, int(folds or 0), int(config or 0), path)


def run_start(parent: int, seq: int, parent_run: int) -> int:
    """The run a new message at ``seq`` after ``parent`` belongs to: its parent's, when
    the parent is the seq just before it, else one it starts."""
    return parent_run if parent > 0 and parent == seq - 1 else seq


def on_branch(spans: Sequence[S], path: BranchPath | None) -> list[S]:
    """The folds of the branch: those whose end it holds (all of them without a branch)."""
    if path is None:
        return list(spans)
    return [span for span in spans if path.holds(span.end)]


def check_on_branch(folds: Sequence[Fold], path: BranchPath | None) -> None:
    """A fold committed to a branch ends on it: its messages are the branch's."""
    if path is None:
        return
    for fold in folds:
        if not path.holds(fold.end):
            raise InvalidInput(
                f"fold {fold.start}..{fold.end} ends at seq {fold.end}, which is not on "
                f"branch {path.head}",
                field="end",
            )


class SpanSql(NamedTuple):
    """A backend's four reads of fold spans, in its own SQL dialect."""

    facts: str
    one_before: str
    before: str
    inside: str


Rows = Callable[[str, Mapping[str, Any]], Iterable[tuple[Any, ...]]]


def spans_near(
    rows: Rows,
    sql: SpanSql,
    params: Mapping[str, Any],
    folds: Sequence[Fold],
    branch: BranchPath | None = None,
) -> list[FoldSpan]:
    """The active folds of the branch a commit of ``folds`` can meet: read by index, not
    all of them (``branch`` None: the whole log is one branch). ``rows`` runs one
    query inside the backend's commit transaction.

    Active in-place folds of a branch never overlap, so those meeting ``lo..hi``
    are the branch's nearest one starting before ``lo`` (if it reaches in) and
    those starting inside.
    """
    found = [_span(row) for row in rows(sql.facts, params)]
    placed = [f for f in folds if f.placement == "in_place"]
    if placed:
        near = {**params, "lo": min(f.start for f in placed), "hi": max(f.end for f in placed)}
        if branch is None:
            found += [_span(row) for row in rows(sql.one_before, near)]
        else:
            before = (_span(row) for row in rows(sql.before, near))
            nearest = next((span for span in before if branch.holds(span.end)), None)
            found += [] if nearest is None else [nearest]
        found += [_span(row) for row in rows(sql.inside, near)]
    return list(on_branch(found, branch))


def _span(row: tuple[Any, ...]) -> Span:
    fold_id, start, end, placement = row
    return Span(str(fold_id), int(start), int(end), str(placement))
