"""The branches of a session's log, through ``Session`` (``contextfold.core.branches``).

A log without branches reads as it always did: ``history()`` is the whole log.
With branches, ``history`` and a page of ``messages`` read one branch (the
newest message's by default), ``branches`` lists them all, and
``Session.messages`` without a branch stays the whole log by seq.
"""

from __future__ import annotations

from contextfold.core.branches import Branch, branches_of, path_of
from contextfold.core.errors import InvalidInput
from contextfold.core.log import LoggedMessage
from contextfold.core.messages import Message
from contextfold.store.base import Store
from contextfold.store.tree import check_seq


class SessionBranches:
    """What ``Session`` reads of its log's branches."""

    id: str
    store: Store

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
