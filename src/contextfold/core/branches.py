"""A session's log as a tree: every message has a parent, and a branch is a path to a leaf.

Nothing logged is ever edited, so "regenerate" and "edit an earlier message"
append instead: the new message's parent is the message it follows on its
branch (0 for a first message), and appending to an earlier point starts a
branch. Appending without a parent continues the latest branch, the one
ending with the newest message, so a log written without parents is a line,
as it always was.

A branch is named by its last message (its head); its messages are the parent
chain from there. Stores hand a chain out as ascending runs of consecutive
seqs (``BranchPath``): a message whose parent is the seq just before it
continues its run, any other starts one. A log with one branch is one run
however long it is, so reading a branch of it costs what reading the line did.

A fold over ``start..end`` of a branch is valid for every branch whose path
holds ``end``: those share every message up to it. Folds over a shared past
are shared; folds over a branch's own messages are that branch's.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class BranchPath:
    """The seqs of one branch, oldest first, as ``(first, last)`` runs of consecutive seqs."""

    runs: tuple[tuple[int, int], ...] = ()

    @classmethod
    def line(cls, first: int, last: int) -> BranchPath:
        """One run ``first..last`` (none when ``last < first``)."""
        return cls(((first, last),) if first <= last else ())

    @property
    def head(self) -> int:
        """The branch's last seq, 0 for an empty path."""
        return self.runs[-1][1] if self.runs else 0

    @property
    def length(self) -> int:
        """How many seqs the path spans."""
        return sum(last - first + 1 for first, last in self.runs)

    def holds(self, seq: int) -> bool:
        i = bisect.bisect_right(self.runs, (seq, _END)) - 1
        return i >= 0 and self.runs[i][0] <= seq <= self.runs[i][1]

    def within(self, start: int, end: int | None = None) -> list[tuple[int, int]]:
        """The path's runs clipped to ``start..end`` (``end`` None: to the head), oldest first."""
        top = self.head if end is None else min(end, self.head)
        return [
            (max(first, start), min(last, top))
            for first, last in self.runs
            if last >= start and first <= top
        ]

    def depth(self, seq: int) -> int:
        """How many seqs of the path come up to and including ``seq``."""
        return sum(last - first + 1 for first, last in self.within(0, seq))


_END = 1 << 62


@dataclass(frozen=True)
class Branch:
    """One branch of a session: its head, where it leaves the rest of the tree, its size.

    ``fork`` is the nearest message before the branch's own ones that another
    branch continues too (0 when it parts at the start, None for the only branch).
    """

    head: int
    fork: int | None
    length: int
    last_at: float


def walk(head: int, run_of: Callable[[int], tuple[int, int]]) -> BranchPath:
    """The path ending at ``head``, a run at a time: ``run_of(seq)`` is the first seq of
    the run holding ``seq`` and that first message's parent (0 for a root)."""
    runs: list[tuple[int, int]] = []
    seq = head
    while seq > 0:
        first, parent = run_of(seq)
        runs.append((first, seq))
        seq = parent
    return BranchPath(tuple(reversed(runs)))


def path_of(parents: Mapping[int, int], head: int) -> BranchPath:
    """The path ending at ``head`` in a tree given as each seq's parent (0 for a root)."""

    def run_of(seq: int) -> tuple[int, int]:
        while seq > 1 and parents.get(seq, 0) == seq - 1:
            seq -= 1
        return seq, parents.get(seq, 0)

    return walk(head, run_of)


def branches_of(links: Iterable[tuple[int, int]], times: dict[int, float]) -> list[Branch]:
    """The branches of a tree given as ``(seq, parent)`` links, newest head first.

    ``times`` holds when each head was logged. The fork of a branch is its
    nearest ancestor with more than one child (0 when the tree has several
    roots and it is the root that parts).
    """
    parents = dict(links)
    children: dict[int, int] = {}
    for parent in parents.values():
        children[parent] = children.get(parent, 0) + 1
    heads = sorted((seq for seq in parents if seq not in children), reverse=True)
    out: list[Branch] = []
    for head in heads:
        fork: int | None = None
        if len(heads) > 1:
            seq = parents[head]
            while seq > 0 and children.get(seq, 0) < 2:
                seq = parents.get(seq, 0)
            fork = seq
        out.append(Branch(head, fork, path_of(parents, head).length, times.get(head, 0.0)))
    return out
