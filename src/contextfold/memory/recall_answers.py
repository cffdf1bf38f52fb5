"""The recall tools' answers: one call's reads of a session's branch, made into results.

An ``Answering`` is made per call: it reads the branch's path once, so one
answer sees one branch, and the view's folds through ``ReadFolds``, which keeps
them while neither the fold version nor the branch moved. Every result is sized
by the session's counter to stay within ``max_tokens``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from contextfold.core.branches import BranchPath
from contextfold.core.entries import Entry
from contextfold.core.folds import Fold
from contextfold.core.log import LoggedMessage
from contextfold.core.messages import for_model, text_of
from contextfold.core.units import unit_spans, whole_units
from contextfold.memory.branch_log import BranchLog
from contextfold.memory.recall_calls import (
    DEFAULT_HITS,
    EXPAND,
    FOLDS,
    MAX_HITS,
    ToolError,
    cursor_argument,
    int_argument,
    iso_time,
    result_text,
    roles_argument,
    time_argument,
)
from contextfold.memory.session import Session
from contextfold.memory.view import View
from contextfold.store.search import CANDIDATES, query_terms, words

SNIPPET_CHARS = 240
SUMMARY_CHARS = 160
# Tokens an answer's envelope may still grow by once its items are in (a cursor's or a
# clipped seq's digits): kept free of ``max_tokens`` beside the envelope's own count.
_SLACK = 8
# What a message's stored count holds beside its text at most (role, framing).
_OVERHEAD = 8
# Messages read at once when a page of a range is filled.
_READ = 16


class ReadFolds:
    """The view's folds as last read, kept while neither the fold version (a commit, a
    quarantine) nor the branch moved: reading and checking every fold again on each
    call was most of an answer's time at 100k messages."""

    def __init__(self) -> None:
        self._kept: dict[bool, tuple[tuple[int, BranchPath], list[Fold]]] = {}

    def get(self, view: View, at: tuple[int, BranchPath], include_superseded: bool) -> list[Fold]:
        kept = self._kept.get(include_superseded)
        if kept is not None and kept[0] == at:
            return kept[1]
        found = view.folds(include_superseded=include_superseded)
        self._kept[include_superseded] = (at, found)
        return found


class Answering:
    """One answer's reads: the branch's path read once, so one answer sees one branch."""

    def __init__(
        self, session: Session, view: View, max_tokens: int, read_folds: ReadFolds
    ) -> None:
        self.session_id = session.id
        self.store = session.store
        self.counter = session.counter
        self.view = view
        self.max_tokens = max_tokens
        self.read_folds = read_folds
        self.log = BranchLog(session.store, session.id, view.branch)
        head = self.log.head(session.id, view.name)
        self.path = head.path
        self.at = (head.fold_version, head.path)
        self.keep = view.filter
        self._folds: list[Fold] | None = None
        self.room = max_tokens
        """What an answer's items may cost: set by each answer from its envelope (``fit``)."""

    def view_folds(self, *, include_superseded: bool = False) -> list[Fold]:
        return self.read_folds.get(self.view, self.at, include_superseded)

    def cost(self, value: Any) -> int:
        return self.counter.text(result_text(value))

    def fit(self, envelope: Mapping[str, Any]) -> None:
        """Room for the items of an answer that is ``envelope`` (its items' lists empty):
        ``max_tokens`` less what the envelope itself costs, counted, not assumed (a
        query, a fold id and a cursor vary in length)."""
        self.room = self.max_tokens - self.cost(envelope) - _SLACK

    def active_folds(self) -> list[Fold]:
        """The view's folds on this branch, facts first, then in-place ones by start."""
        if self._folds is None:
            found = self.view_folds()
            self._folds = sorted(
                (f for f in found if self.path.holds(f.end)),
                key=lambda f: (f.placement != "facts", f.start),
            )
        return self._folds

    def covering(self) -> Callable[[int], Fold | None]:
        """Which in-place fold covers a seq (they never overlap)."""
        placed = [f for f in self.active_folds() if f.placement == "in_place"]
        starts = [f.start for f in placed]

        def fold_at(seq: int) -> Fold | None:
            i = bisect.bisect_right(starts, seq) - 1
            return placed[i] if i >= 0 and placed[i].end >= seq else None

        return fold_at

    # -- contextfold_search -----------------------------------------------------

    def search(self, args: Mapping[str, Any]) -> dict[str, Any]:
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("query must be a non-empty string", "query")
        if not query_terms(query):
            raise ToolError(
                "query has no word to search by (only stopwords or punctuation)", "query"
            )
        limit = int_argument(args, "limit") or DEFAULT_HITS
        if limit > MAX_HITS:
            raise ToolError(f"limit must be at most {MAX_HITS}", "limit")
        roles = roles_argument(args)
        after, before = time_argument(args, "after"), time_argument(args, "before")
        if after is not None and before is not None and before <= after:
            raise ToolError("before must be later than after", "before")
        low = 0 if after is None else self.first_seq_at(after) - 1
        high = None if before is None else self.first_seq_at(before)
        # The roles and seq bounds go to the store, so that messages of other roles or
        # times never take the places of those asked for; the branch and the view's
        # filter are checked on what comes back.
        hits = self.store.search(
            self.session_id, query, limit=CANDIDATES, before=high, after=low, roles=roles
        )
        wanted = [hit.seq for hit in hits if self.path.holds(hit.seq)]

        def fits(logged: LoggedMessage) -> bool:
            at = logged.created_at
            return (
                (roles is None or logged.role in roles)
                and (after is None or at >= after)
                and (before is None or at < before)
                and (self.keep is None or self.keep(logged.message))
            )

        found = list(self.matching(wanted, fits, limit))
        self.fit(_searched(query, [], len(found)))
        fold_at = self.covering()
        terms = set(query_terms(query))
        listed: list[dict[str, Any]] = []
        used = 0
        for logged in found:
            fold = fold_at(logged.seq)
            hit = {
                "seq": logged.seq,
                "role": logged.role,
                "time": iso_time(logged.created_at),
                "snippet": snippet(text_of(logged.message), terms),
                "fold": None if fold is None else fold.id,
                "folded": None if fold is None else [fold.start, fold.end],
            }
            used += self.cost(hit)
            if used > self.room:
                break
            listed.append(hit)
        return _searched(query, listed, len(found) - len(listed))

    def matching(
        self, seqs: Sequence[int], fits: Callable[[LoggedMessage], bool], limit: int
    ) -> Iterator[LoggedMessage]:
        """The messages at ``seqs`` (best first) that ``fits`` keeps, at most ``limit``,
        read a batch at a time."""
        taken = 0
        batch = max(limit, 16)
        for first in range(0, len(seqs), batch):
            part = seqs[first : first + batch]
            read = {m.seq: m for m in self.store.messages_at(self.session_id, part)}
            for seq in part:
                logged = read.get(seq)
                if logged is not None and fits(logged):
                    yield logged
                    taken += 1
                    if taken == limit:
                        return

    def first_seq_at(self, when: float) -> int:
        """The first seq logged at or after ``when`` (one past the log if none): seqs are
        handed out in time order, so a binary search over single-message reads."""
        lo, hi = 1, self.store.last_seq(self.session_id) + 1
        while lo < hi:
            mid = (lo + hi) // 2
            read = self.store.messages(self.session_id, mid, mid)
            if read and read[0].created_at < when:
                lo = mid + 1
            else:
                hi = mid
        return lo

    # -- contextfold_expand -----------------------------------------------------

    def expand(self, args: Mapping[str, Any]) -> dict[str, Any]:
        fold_id = args.get("id")
        start, end = int_argument(args, "start"), int_argument(args, "end")
        fold: Fold | None = None
        if fold_id is not None:
            if start is not None or end is not None:
                raise ToolError("give a fold's id, or start and end, not both", "id")
            if not isinstance(fold_id, str) or not fold_id:
                raise ToolError("id must be a fold id from contextfold_folds", "id")
            fold = self.fold_named(fold_id)
            start, end = fold.start, fold.end
        elif start is None or end is None:
            raise ToolError(
                "give a fold's id, or a seq range start and end",
                "start" if start is None else "end",
            )
        elif end < start:
            raise ToolError(f"end ({end}) must not be before start ({start})", "end")
        assert start is not None and end is not None
        cursor = cursor_argument(args)
        page_given = int_argument(args, "page")
        if cursor is not None and page_given is not None:
            raise ToolError("give page or cursor, not both", "page")
        if cursor is not None and not start <= cursor[1] <= end + 1:
            raise ToolError(f"cursor {args['cursor']!r} is not within {start}-{end}", "cursor")
        page, at = cursor or (1, start)
        # The same room for every page of the range: the page number and cursor counted
        # at their widest (no page is numbered past ``end``).
        self.fit(_expanded(fold, start, end, end, [], [], f"{end}:{end}"))
        if page_given is not None:
            page, at = page_given, self.page_start(start, end, page_given)
        messages, next_at, clipped = self.fill(at, end)
        if not messages and not self.path.within(start, end):
            raise ToolError(f"no message of this conversation is in {start}-{end}", "start")
        done = next_at > end or not self.path.within(next_at, end)
        cursor_out = None if done else f"{page + 1}:{next_at}"
        return _expanded(fold, start, end, page, messages, clipped, cursor_out)

    def fold_named(self, fold_id: str) -> Fold:
        """The fold of this view and branch with ``fold_id``, superseded ones included (a
        model may still hold their ids)."""
        for fold in self.active_folds():
            if fold.id == fold_id:
                return fold
        for fold in self.view_folds(include_superseded=True):
            if fold.id == fold_id and self.path.holds(fold.end):
                return fold
        raise ToolError(f"no fold {fold_id!r} in this conversation; see {FOLDS}", "id")

    def page_start(self, start: int, end: int, page: int) -> int:
        """Where page ``page`` of ``start..end`` begins, walking the pages before it."""
        at = start
        for _ in range(page - 1):
            if at > end:
                break
            _, at, _ = self.fill(at, end)
        if at > end or not self.path.within(at, end):
            raise ToolError(f"page {page} is past the last page of {start}-{end}", "page")
        return at

    def fill(self, at: int, end: int) -> tuple[list[dict[str, Any]], int, list[int]]:
        """One page of the branch's messages from seq ``at`` up to ``end``: whole units
        while they fit in the room, a unit too big for a page of its own by message,
        and a message too big alone clipped. Returns the page, the seq the next page
        starts at, and the seqs clipped."""
        read = self.read_from(at, end)
        page: list[dict[str, Any]] = []
        clipped: list[int] = []
        used = 0
        for i, j in unit_spans(_entries(read)):
            unit = read[i : j + 1]
            first, last = unit[0].seq, unit[-1].seq
            shown = [self.shown(m) for m in unit]
            # A unit whose stored count alone passes the room is not counted again.
            least = sum(m.tokens for m in unit) - _OVERHEAD * len(unit)
            cost = self.room + 1 if used + least > self.room else sum(map(self.cost, shown))
            if used + cost <= self.room:
                page += shown
                used += cost
                continue
            if page:
                return page, first, clipped
            # A unit bigger than a page of its own: by message, a message too big clipped.
            for logged, message in zip(unit, shown, strict=True):
                cost = self.cost(message)
                if used + cost > self.room:
                    if page:
                        return page, logged.seq, clipped
                    message = self.clipped(message, self.room)
                    clipped.append(logged.seq)
                    cost = self.room
                page.append(message)
                used += cost
            if page and used >= self.room:
                return page, last + 1, clipped
        return page, (read[-1].seq + 1 if read else end + 1), clipped

    def read_from(self, at: int, end: int) -> list[LoggedMessage]:
        """The branch's messages from ``at`` (as the view's filter shows them): enough to
        fill a page by their stored counts, read on while the last may open or continue a
        tool unit (a call, or a result that more may follow)."""
        out: list[LoggedMessage] = []
        tokens = 0
        while at <= end:
            top = min(end, at + _READ - 1)
            runs = self.path.within(at, top)
            if not runs:
                later = [first for first, _ in self.path.runs if first > top]
                if not later or later[0] > end:
                    break
                at = later[0]
                continue
            part = self.log.messages(self.session_id, at, top)
            at = runs[-1][1] + 1
            out += part
            tokens += sum(m.tokens for m in part)
            last = out[-1].message if out else None
            opens = last is not None and (last["role"] == "tool" or bool(last.get("tool_calls")))
            if tokens > self.room and not opens:
                break
        if self.keep is None:
            return out
        return list(whole_units(reversed(out), lambda m: m.message, self.keep))[::-1]

    def shown(self, logged: LoggedMessage) -> dict[str, Any]:
        """A message as a page shows it: its seq and time, then the message as a model
        is sent it."""
        return {"seq": logged.seq, "time": iso_time(logged.created_at), **for_model(logged.message)}

    def clipped(self, message: dict[str, Any], room: int) -> dict[str, Any]:
        """``message`` with its text cut to fit ``room`` tokens (marked ``clipped``)."""
        text = text_of(message)
        short = {k: v for k, v in message.items() if k not in ("content", "tool_calls")}
        short["clipped_from_chars"] = len(text)
        keep = min(len(text), room * 4)
        while keep > 0:
            keep = min(keep - 1, int(keep * 0.8))
            short["content"] = text[:keep] + " …"
            if self.cost(short) <= room:
                return short
        short["content"] = "…"
        return short

    # -- contextfold_folds --------------------------------------------------------

    def folds(self, args: Mapping[str, Any]) -> dict[str, Any]:
        cursor = cursor_argument(args)
        page, after = cursor or (1, 0)
        listed: list[dict[str, Any]] = []
        used = 0
        next_cursor = None
        folds = self.active_folds()
        self.fit(_listed([], page, f"{page + 1}:{len(folds)}"))
        for index, fold in enumerate(folds):
            if index < after:
                continue
            item = {
                "id": fold.id,
                "start": fold.start,
                "end": fold.end,
                "kind": fold.kind,
                "placement": fold.placement,
                "tokens": fold.tokens_before,
                "tokens_folded": fold.tokens_after,
                "summary": one_line(fold.text),
            }
            used += self.cost(item)
            if used > self.room and listed:
                next_cursor = f"{page + 1}:{index}"
                break
            listed.append(item)
        return _listed(listed, page, next_cursor)


def _searched(query: str, hits: list[dict[str, Any]], left_out: int) -> dict[str, Any]:
    return {
        "query": query,
        "hits": hits,
        "left_out": left_out,
        "hint": f"{EXPAND} with start and end around a hit's seq reads it whole",
    }


def _expanded(
    fold: Fold | None,
    start: int,
    end: int,
    page: int,
    messages: list[dict[str, Any]],
    clipped: list[int],
    next_cursor: str | None,
) -> dict[str, Any]:
    return {
        "fold": None if fold is None else fold.id,
        "start": start,
        "end": end,
        "page": page,
        "messages": messages,
        "clipped": clipped,
        "next_cursor": next_cursor,
    }


def _listed(folds: list[dict[str, Any]], page: int, next_cursor: str | None) -> dict[str, Any]:
    return {
        "folds": folds,
        "page": page,
        "next_cursor": next_cursor,
        "hint": f"{EXPAND} with a fold's id reads the messages it replaced",
    }


def _entries(messages: Sequence[LoggedMessage]) -> list[Entry]:
    return [Entry.of_message(m) for m in messages]


def snippet(text: str, terms: set[str], width: int = SNIPPET_CHARS) -> str:
    """About ``width`` characters of ``text`` around its first word among ``terms``."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    lowered = flat.lower()
    at = 0
    for word in words(lowered):
        if word in terms:
            at = lowered.find(word)
            break
    begin = max(0, min(at - width // 3, len(flat) - width))
    piece = flat[begin : begin + width]
    return ("…" if begin else "") + piece + ("…" if begin + width < len(flat) else "")


def one_line(text: str, width: int = SUMMARY_CHARS) -> str:
    """A fold's text on one line, cut to ``width`` characters: its lines past the
    bracketed headers a summary opens with (``[SUMMARIZED] ...``), or all when every
    line is one (a masked tool result)."""
    lines = [line for line in text.splitlines() if line.strip()]
    said = [line for line in lines if not line.lstrip().startswith("[")] or lines
    flat = " ".join(" ".join(said).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"
