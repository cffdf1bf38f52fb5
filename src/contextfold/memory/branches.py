"""The branches of a session's log, through ``Session`` (``contextfold.core.branches``).

A log without branches reads as it always did: ``history()`` is the whole log.
With branches, ``history`` and a page of ``messages`` read one branch (the
newest message's by default), ``branches`` lists them all, and
``Session.messages`` without a branch stays the whole log by seq.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from contextfold.core.branches import Branch, branches_of, path_of
from contextfold.core.errors import InvalidInput
from contextfold.core.log import LoggedMessage
from contextfold.core.messages import Message, validate_message
from contextfold.store.base import Store
from contextfold.store.tree import check_seq


class SessionBranches:
    """What ``Session`` reads of its log's branches."""

    id: str
    store: Store
    extend: Callable[..., list[LoggedMessage]]

    def history(self, *, branch: int | None = None) -> list[Message]:
        """A whole branch, never folded: the one ending at seq ``branch``, by default the
        newest message's (a log without branches: the whole log). Reads the log alone."""
        at = check_seq(branch, "branch")
        logged = self.store.messages(self.id)
        by_seq = {m.seq: m for m in logged}
        head = (logged[-1].seq if logged else 0) if at is None else at
        if head and head not in by_seq:
            raise InvalidInput(
                f"branch {head} is not a message of this session's log", field="branch"
            )
        path = path_of({m.seq: m.parent or 0 for m in logged}, head)
        return [by_seq[seq].message for first, last in path.runs for seq in range(first, last + 1)]

    def branches(self) -> list[Branch]:
        """The log's branches, newest head first: each head (its last seq), where it parts
        from the rest of the tree, its length and when its head was logged."""
        links = self.store.links(self.id)
        heads = set(dict(links)) - {parent for _, parent in links}
        times = {m.seq: m.created_at for m in self.store.messages_at(self.id, sorted(heads))}
        return branches_of(links, times)

    def extend_tree(
        self, tree: Sequence[tuple[int, Mapping[str, Any]]], *, parent: int | None = None
    ) -> list[LoggedMessage]:
        """Append a whole tree of messages (``chatgpt_export.Tree``: each after the place of
        its parent in ``tree``, from 1, or 0 for a first message), one append a run.

        First messages follow ``parent`` (default: the newest message), so the tree's
        last message is the newest: the branch it ends is the latest. Every message
        and place is checked before anything is appended.
        """
        entries = list(tree)
        for i, entry in enumerate(entries):
            if not (isinstance(entry, tuple) and len(entry) == 2):
                raise InvalidInput("expected (parent place, message) pairs", field=f"tree[{i}]")
            place = entry[0]
            if type(place) is not int or not 0 <= place <= i:
                raise InvalidInput(
                    f"a message's parent is a place before it (0..{i}), not {place!r}",
                    field=f"tree[{i}]",
                )
            validate_message(entry[1], index=i)
        seqs: list[int] = []
        out: list[LoggedMessage] = []
        root = check_seq(parent, "parent")
        i = 0
        while i < len(entries):
            end = i + 1
            while end < len(entries) and entries[end][0] == end:
                end += 1
            place = entries[i][0]
            after = seqs[place - 1] if place else root
            logged = self.extend([m for _, m in entries[i:end]], parent=after)
            if root is None and not place:
                root = logged[0].parent
            seqs += [m.seq for m in logged]
            out += logged
            i = end
        return out

    def branch_page(self, branch: int | None, after: int, limit: int | None) -> list[LoggedMessage]:
        """The messages of the branch ending at seq ``branch`` after seq ``after``, oldest
        first, at most ``limit`` of them."""
        path = self.store.head(self.id, "", branch=check_seq(branch, "branch")).path
        out: list[LoggedMessage] = []
        for first, last in path.within(after + 1):
            if limit is not None and len(out) >= limit:
                break
            top = last if limit is None else min(last, first + limit - len(out) - 1)
            out += self.store.messages(self.id, first, top)
        return out
