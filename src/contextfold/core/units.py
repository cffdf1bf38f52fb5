"""Tool units and rounds, the spans nothing may split.

A tool unit is an assistant message with ``tool_calls`` plus every tool message
answering those ids (a result answers the nearest earlier call with its id, as
real logs reuse ids); anything standing between a call and its last result
belongs to the unit too. A round (a TaskWeaver round, an ADR-0041 turn) is a
user message and everything up to the next one; the last round is in progress
until an assistant message without tool calls closes it.

All spans are inclusive index ranges ``(i, j)`` into a list of entries.

This is the one module that knows how results pair with calls: planning
(``unit_spans``), render (``units_newest_first``, ``answer_missing``), view
filters (``whole_units``) and prompt checks (``tool_unit_faults``) all call it.

A call the log never answers (an agent stopped, a tool crashed, the user spoke
first) is invalid in a prompt for every major provider; the log keeps it as it
is, and render answers it with a synthetic result saying so (as OpenHands does),
once another message follows it. A call at the end of the log is in progress
and left alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from contextfold.core.entries import Entry
from contextfold.core.messages import Message
from contextfold.core.tokens import TokenCounter

NO_RESULT = "[contextfold: no result was logged for this call]"

_T = TypeVar("_T")


def unit_spans(entries: Sequence[Entry]) -> list[tuple[int, int]]:
    """Partition ``entries`` into units: tool units, and single entries otherwise."""
    caller: dict[str, int] = {}
    reach = list(range(len(entries)))
    for i, entry in enumerate(entries):
        msg = entry.message
        if msg is None:
            continue
        if msg["role"] == "assistant":
            for call in msg.get("tool_calls") or ():
                caller[call["id"]] = i
        elif msg["role"] == "tool":
            start = caller.get(msg.get("tool_call_id", ""))
            if start is not None:
                reach[start] = max(reach[start], i)
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(entries):
        end = reach[i]
        j = i
        while j < end:
            j += 1
            end = max(end, reach[j])
        spans.append((i, end))
        i = end + 1
    return spans


@dataclass(frozen=True)
class RoundSpan:
    """A round's span over entries; ``closed`` is False for the round in progress."""

    first: int
    last: int
    closed: bool
    has_user: bool


def round_spans(entries: Sequence[Entry]) -> list[RoundSpan]:
    """Rounds over ``entries``, never splitting a unit.

    Entries before the first user message form a round without a user
    (``has_user`` False), such as an opening greeting or a leading fold.
    """
    units = unit_spans(entries)
    starts: list[int] = []
    for i, (first, _) in enumerate(units):
        if i == 0 or entries[first].role == "user":
            starts.append(i)
    rounds: list[RoundSpan] = []
    for k, ui in enumerate(starts):
        uj = starts[k + 1] - 1 if k + 1 < len(starts) else len(units) - 1
        first, last = units[ui][0], units[uj][1]
        closed = k + 1 < len(starts) or _closes(entries[last])
        rounds.append(RoundSpan(first, last, closed, entries[first].role == "user"))
    return rounds


def _closes(entry: Entry) -> bool:
    msg = entry.message
    if msg is None:
        return True
    return msg["role"] == "assistant" and not msg.get("tool_calls")


def units_newest_first(entries: Iterable[Entry]) -> Iterator[list[Entry]]:
    """Group entries, read newest first, into whole tool units (oldest entry first).

    Tool results whose call is not in the stream (a view that filtered the call
    out) are dropped: an orphan result is an invalid prompt.
    """
    pending: set[str] = set()
    unit: list[Entry] = []
    for entry in entries:
        msg = entry.message
        if msg is not None and msg["role"] == "tool":
            pending.add(str(msg.get("tool_call_id")))
            unit.append(entry)
            continue
        if msg is not None and msg["role"] == "assistant" and msg.get("tool_calls"):
            pending -= {c["id"] for c in msg["tool_calls"]}
        unit.append(entry)
        if not pending:
            yield unit[::-1]
            unit = []
    if unit:
        orphans = [e for e in unit if e.message is None or e.message["role"] != "tool"]
        if orphans:
            yield orphans[::-1]


def answer_missing(newest_first: Iterable[Entry], counter: TokenCounter) -> Iterator[Entry]:
    """Entries read newest first, with a synthetic result for every call left unanswered.

    A call is unanswered when the run of tool messages right after it lacks
    one of its ids and another message follows; the synthetic results
    (``NO_RESULT``) are entries at the call's seq, rendered right after it. In
    a fold's messages the same is done inside the fold. The tail of the log,
    a call still waiting for its results, is left as it is.
    """
    answered: set[str] = set()
    closed = False  # a non-tool message is newer than the current run
    for entry in newest_first:
        if entry.fold is not None:
            messages, answered, closed = _answered_within(entry.messages, answered, closed)
            if len(messages) == len(entry.messages):
                yield entry
            else:
                added = sum(counter.message(m) for m in messages) - sum(
                    counter.message(m) for m in entry.messages
                )
                yield Entry(entry.start, entry.end, entry.tokens + added, messages, entry.fold)
            continue
        msg = entry.messages[0]
        if msg["role"] == "tool":
            answered.add(str(msg.get("tool_call_id")))
        else:
            for missing in reversed(_missing_ids(msg, answered) if closed else []):
                result = _no_result(missing)
                yield Entry(entry.start, entry.end, counter.message(result), (result,))
            answered, closed = set(), True
        yield entry


def _answered_within(
    messages: Sequence[Message], answered: set[str], closed: bool
) -> tuple[tuple[Message, ...], set[str], bool]:
    """A fold's messages with its unanswered calls answered, and the state after them."""
    out: list[Message] = []
    for msg in reversed(messages):
        if msg["role"] == "tool":
            answered = answered | {str(msg.get("tool_call_id"))}
        else:
            if closed:
                out.extend(_no_result(i) for i in reversed(_missing_ids(msg, answered)))
            answered, closed = set(), True
        out.append(msg)
    return tuple(out[::-1]), answered, closed


def with_answers(messages: Sequence[Message]) -> list[Message]:
    """A tool unit taken out of the log's flow (a pinned one), each call it leaves
    unanswered answered with ``NO_RESULT``, as render answers one another message follows."""
    return list(_answered_within(messages, set(), True)[0])


def _missing_ids(message: Message, answered: set[str]) -> list[str]:
    if message["role"] != "assistant":
        return []
    return [str(c["id"]) for c in message.get("tool_calls") or () if c["id"] not in answered]


def _no_result(call_id: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": NO_RESULT}


def whole_units(
    newest_first: Iterable[_T],
    message_of: Callable[[_T], Message | None],
    keep: Callable[[Message], bool],
) -> Iterator[_T]:
    """Filter items read newest first, keeping or dropping each tool unit whole.

    A tool result waits for its call (the nearest older assistant message calling
    its id); the call and its results stay only if ``keep`` accepts all of them.
    Items without a message (folds) always stay; results whose call never comes
    are dropped.
    """
    held: list[_T] = []
    verdicts: list[bool] = []
    waiting: dict[str, list[int]] = {}
    for item in newest_first:
        msg = message_of(item)
        verdict = msg is None or bool(keep(msg))
        if msg is not None and msg["role"] == "tool":
            waiting.setdefault(str(msg.get("tool_call_id")), []).append(len(held))
        elif not held:
            if verdict:
                yield item
            continue
        elif msg is not None and msg["role"] == "assistant":
            answered = [i for c in msg.get("tool_calls") or () for i in waiting.pop(c["id"], [])]
            verdict = verdict and all(verdicts[i] for i in answered)
            for i in answered:
                verdicts[i] = verdict
        held.append(item)
        verdicts.append(verdict)
        if not waiting:
            yield from (h for h, v in zip(held, verdicts, strict=True) if v)
            held.clear()
            verdicts.clear()
    for orphans in waiting.values():
        for i in orphans:
            verdicts[i] = False
    yield from (h for h, v in zip(held, verdicts, strict=True) if v)


def tool_unit_faults(
    messages: Sequence[Mapping[str, Any]], *, answered: Iterable[str] | None = None
) -> list[int]:
    """Indexes of prompt messages that split a tool unit (empty for a valid prompt).

    A fault is a tool message not answering the assistant message just before
    its run of tool messages, or an assistant call whose result is missing from
    that run. A missing result only counts when it is known to exist: ``answered``
    holds the ids the log answers (None: every call must be answered).
    """
    known = None if answered is None else set(answered)
    faults: list[int] = []
    open_ids: set[str] = set()
    caller: int | None = None
    for i, msg in enumerate(messages):
        if msg.get("role") == "tool":
            call_id = str(msg.get("tool_call_id"))
            if caller is None or call_id not in open_ids:
                faults.append(i)
            open_ids.discard(call_id)
            continue
        if caller is not None and _missing(open_ids, known):
            faults.append(caller)
        caller, open_ids = None, set()
        if msg.get("role") == "assistant" and msg.get("tool_calls"):
            caller = i
            open_ids = {str(c["id"]) for c in msg["tool_calls"]}
    if caller is not None and _missing(open_ids, known):
        faults.append(caller)
    return faults


def _missing(open_ids: set[str], known: set[str] | None) -> bool:
    return bool(open_ids if known is None else open_ids & known)


def call_for(result: Message, before: Iterable[Message]) -> Mapping[str, Any] | None:
    """The call ``result`` answers: the nearest one with its id among ``before`` (oldest first)."""
    found = None
    for message in before:
        for call in message.get("tool_calls") or ():
            if call.get("id") == result.get("tool_call_id"):
                found = call
    return found


def waits_for_results(messages: Sequence[Message]) -> bool:
    """Whether ``messages`` end with a call some of whose results have not come yet
    (so a message other than a result, coming next, leaves it unanswered)."""
    answered: set[str] = set()
    for message in reversed(messages):
        if message["role"] == "tool":
            answered.add(str(message.get("tool_call_id")))
            continue
        return bool(_missing_ids(message, answered))
    return False


def answers_tail(messages: Sequence[Message], result: Message) -> bool:
    """Whether ``result`` answers a call of the tool unit ``messages`` end with."""
    for message in reversed(messages):
        if message["role"] == "tool":
            continue
        if message["role"] != "assistant":
            return False
        return call_for(result, [message]) is not None
    return False
