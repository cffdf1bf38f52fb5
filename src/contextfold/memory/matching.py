"""Matching a client's whole conversation against a session's log (``Session.record``).

A client (an API client through the proxy, a framework through its adapter)
resends its whole conversation on every call. The log is a tree
(``contextfold.core.branches``), so the client's list is matched against its
branches: the longest run of the client's messages that some branch starts
with, from the root, is the common prefix; the call continues at the deepest
matched message, and what follows it in the client's list is appended there.
A client that extends the conversation continues its branch; one that
regenerates (the same list without the last answer), edits an earlier message
or drops a turn starts a branch; nothing logged changes. Of two branches
holding the same message at a point, the newer is followed.

The session's system prompt: a client whose list starts with a system (or
developer) message is matched against the log from seq 1, so its system
message is the log's first message (logged on the first call). A client whose
list starts with anything else is matched against the log after its leading
system messages: a session created through the REST API with a system prompt
keeps it server-side, and the client need not know it.

Matching is cheap: messages are compared by a 16-byte digest of what a model
sees (role, content, name, tool calls, tool call id, refusal). ``LogDigests``
keeps each session's digests in this process (21 bytes a message with its
parent, two million messages in all by default, and an entry for each message
that starts a branch) and, on each call, reads only the messages appended since
it last looked (one ``last_seq`` query, plus a read of the new tail when
another writer appended). The client's messages are digested once per call;
only new ones are validated in full, when appended.
"""

from __future__ import annotations

import hashlib
import json
import threading
from array import array
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from contextfold.core.errors import InvalidInput
from contextfold.core.log import LoggedMessage
from contextfold.core.messages import Message


class Logged(Protocol):
    """What matching needs of a session (``contextfold.memory.session.Session``)."""

    @property
    def id(self) -> str: ...
    @property
    def created_at(self) -> float: ...
    def last_seq(self) -> int: ...
    def messages(self, *, after: int = 0, limit: int | None = None) -> list[LoggedMessage]: ...
    def extend(
        self, messages: Sequence[Message], *, keys: Sequence[str | None], parent: int | None
    ) -> list[LoggedMessage]: ...


_SYSTEM_ROLES = frozenset({"system", "developer"})


def digest(message: Mapping[str, Any]) -> bytes:
    """What a model sees of a message, hashed: equal digests, equal messages.

    Missing, null and empty content are one; a tool call is its id, function
    name and arguments (its ``type`` is always "function"); ``meta`` is not
    sent to a model and is left out.
    """
    seen: dict[str, Any] = {"role": message.get("role")}
    content = message.get("content")
    if content is not None and content != "":
        seen["content"] = content
    for key in ("name", "tool_call_id", "refusal"):
        if message.get(key) is not None:
            seen[key] = message[key]
    calls = message.get("tool_calls")
    if calls:
        seen["tool_calls"] = (
            [_call_of(call) for call in calls] if isinstance(calls, list) else calls
        )
    role, text = seen["role"], seen.get("content")
    if len(seen) == 2 and type(text) is str and type(role) is str and "\0" not in role:
        # The common message, role and text alone: hashed without a JSON dump. The
        # leading 0 byte keeps it apart from every JSON text (which starts with "{").
        text = f"\0{role}\0{text}"
    else:
        text = json.dumps(seen, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _call_of(call: Any) -> Any:
    if not isinstance(call, Mapping):
        return call
    function = call.get("function")
    if not isinstance(function, Mapping):
        return [call.get("id"), function]
    return [call.get("id"), function.get("name"), function.get("arguments", "")]


_ROLES = ("system", "developer", "user", "assistant", "tool")
_SIZE = 16  # bytes of a digest


@dataclass
class LogDigest:
    """A session's log as digests, up to ``last_seq``; ``created_at`` tells a recreated session.

    Digests and roles are packed (16 bytes and one byte a message), so a long
    log costs 17 bytes a message, not a Python object each.
    """

    created_at: float
    last_seq: int = 0
    digests: bytearray = field(default_factory=bytearray)
    roles: bytearray = field(default_factory=bytearray)
    parents: array[int] = field(default_factory=lambda: array("I"))
    forks: dict[int, list[int]] = field(default_factory=dict)
    """The children of a message other than the seq right after it, oldest first."""
    system: int = 0  # leading system/developer messages
    lock: threading.RLock = field(default_factory=threading.RLock)
    """Held while the entry is read up to date, matched and appended to: one writer at a time."""
    # Views this process made ready (created if new, watched by the runner) for this
    # incarnation of the session, by (name, runner): a recreated session starts empty.
    views: set[tuple[str, int]] = field(default_factory=set)

    def __len__(self) -> int:
        return len(self.roles)

    def digest_at(self, i: int) -> bytes:
        return bytes(self.digests[i * _SIZE : (i + 1) * _SIZE])

    def role_at(self, i: int) -> str:
        code = self.roles[i]
        return _ROLES[code] if code < len(_ROLES) else "unknown"

    def add(self, logged: Sequence[LoggedMessage]) -> None:
        for record in logged:
            if record.seq != self.last_seq + 1:
                raise ValueError(f"log read out of order: seq {record.seq} after {self.last_seq}")
            role = record.role
            parent = record.seq - 1 if record.parent is None else record.parent
            if self.system == len(self.roles) == parent and role in _SYSTEM_ROLES:
                self.system += 1
            if parent != record.seq - 1:
                self.forks.setdefault(parent, []).append(record.seq)
            self.digests += digest(record.message)
            self.roles.append(_ROLES.index(role) if role in _ROLES else 255)
            self.parents.append(parent)
            self.last_seq = record.seq

    def depth(self, seq: int) -> int:
        """How many messages the branch ending at ``seq`` holds, ``seq`` included."""
        count = 0
        while 0 < seq <= len(self.parents):
            count, seq = count + 1, self.parents[seq - 1]
        return count

    def children(self, seq: int, wanted: bytes) -> list[int]:
        """The messages following ``seq`` (0: first messages) whose digest is ``wanted``,
        newest first."""
        found = [c for c in reversed(self.forks.get(seq, ())) if self.digest_at(c - 1) == wanted]
        after = seq + 1
        follows = after <= len(self.parents) and self.parents[after - 1] == seq
        if follows and self.digest_at(seq) == wanted:
            found.append(after)
        return found


class LogDigests:
    """Each session's log digests in this process, within ``capacity`` messages in all;
    the least recently used sessions are dropped first (and read again when next used).

    Callers serialise calls on one session (the proxy holds a per-session
    lock); the lock here guards the table and its count.
    """

    def __init__(self, capacity: int = 2_000_000) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._table: OrderedDict[str, LogDigest] = OrderedDict()
        self._messages = 0

    def current(self, session: Logged) -> LogDigest:
        """The session's digests brought up to the log's last seq (reading only the new tail).

        A session deleted and created again under its id (another ``created_at``)
        is read afresh.
        """
        session_id, created_at = session.id, session.created_at
        last = session.last_seq()
        with self._lock:
            entry = self._table.get(session_id)
            if entry is None or entry.created_at != created_at or entry.last_seq > last:
                if entry is not None:
                    self._messages -= len(entry)
                entry = LogDigest(created_at)
                self._table[session_id] = entry
            self._table.move_to_end(session_id)
        with entry.lock:
            if entry.last_seq < last:
                tail = session.messages(after=entry.last_seq, limit=last - entry.last_seq)
                self.add(session_id, entry, tail)
        return entry

    def add(self, session_id: str, entry: LogDigest, logged: Sequence[LoggedMessage]) -> None:
        """Add messages just read or appended to the session's entry, within the capacity."""
        before = len(entry)
        entry.add(logged)
        with self._lock:
            if self._table.get(session_id) is entry:
                self._messages += len(entry) - before
            while self._messages > self.capacity and len(self._table) > 1:
                oldest, dropped = next(iter(self._table.items()))
                if oldest == session_id:
                    self._table.move_to_end(oldest)
                    continue
                del self._table[oldest]
                self._messages -= len(dropped)

    def advance(self, session_id: str, entry: LogDigest, logged: Sequence[LoggedMessage]) -> None:
        """Add what was just appended; an append that met older records (a retry, another
        writer) drops the entry instead, to be read afresh."""
        first = entry.last_seq + 1
        if [m.seq for m in logged] == list(range(first, first + len(logged))):
            self.add(session_id, entry, logged)
        else:
            self.forget(session_id)

    def forget(self, session_id: str) -> None:
        with self._lock:
            entry = self._table.pop(session_id, None)
            if entry is not None:
                self._messages -= len(entry)


@dataclass(frozen=True)
class Match:
    """Where a client's conversation meets the log: ``client[matched:]`` is new, and goes
    after seq ``at`` (0: a new first message); ``skipped`` leading system messages of
    the log were not in the client's list."""

    at: int
    matched: int
    skipped: int


def match(log: LogDigest, client: Sequence[Message], *, after: int | None = None) -> Match:
    """The longest prefix of ``client`` that a branch of the log starts with.

    A client list starting with a system (or developer) message is matched from
    the log's first message; any other after the log's leading system messages.
    With ``after`` (a logged seq: a continued response), the list is matched
    from there, as the rest of that message's branch.
    """
    if after is not None:
        skipped = log.depth(after)
        start = after
    else:
        starts_with_system = bool(client) and client[0].get("role") in _SYSTEM_ROLES
        skipped = start = 0 if starts_with_system else log.system
    wanted = [digest(message) for message in client]
    best = (0, start)
    # Depth first, newest branch first: the first deepest match found is the newest's.
    stack = [(0, start)]
    while stack:
        matched, at = stack.pop()
        if matched > best[0]:
            best = (matched, at)
        if matched < len(wanted):
            found = log.children(at, wanted[matched])
            stack += [(matched + 1, child) for child in reversed(found)]
    return Match(best[1], best[0], skipped)


def append_keys(at: int, messages: Sequence[Message]) -> list[str]:
    """Idempotency keys for ``messages`` appended after seq ``at``: each names its place
    by that seq and every message from there to it, so a retry (another process
    appending the same conversation) finds them logged, and no other list does."""
    keys: list[str] = []
    chain = hashlib.blake2b(str(at).encode(), digest_size=16)
    for message in messages:
        chain.update(digest(message))
        keys.append(f"proxy@{at}:{chain.hexdigest()}")
    return keys


@dataclass(frozen=True)
class Recorded:
    """What ``Session.record`` did with a client's conversation."""

    at: int
    """The seq of the conversation's last message in the log: the head of its branch, to
    render (``View.render(branch=at)``) and to append after; 0 for an empty conversation."""
    logged: list[LoggedMessage]
    """The messages this call appended (those the log did not hold yet)."""
    matched: int
    """How many leading messages of the conversation the log already held."""
    skipped: int
    """The log's leading system messages before the match that the conversation left out."""


def record(
    session: Logged,
    digests: LogDigests,
    messages: Sequence[Message],
    *,
    after: int | None = None,
    most: int | None = None,
) -> Recorded:
    """Match ``messages`` against the session's branches and append what is new.

    ``after``: match from that logged seq on (a continued response); ``most``: refuse
    a conversation with more new messages than that, naming ``messages``. Errors name
    the index in ``messages``. Holds the session's entry lock throughout, so two
    threads recording the same conversation log it once; two processes do too, as
    the appended messages go under keys naming their place (``append_keys``).
    """
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise InvalidInput(f"expected a message object, got {type(message).__name__}", index=i)
    entry = digests.current(session)
    # A thread waiting here matches against what the one before it appended (it advanced
    # this entry); what another writer appended unseen is found by its keys.
    with entry.lock:
        found = match(entry, messages, after=after)
        new = list(messages[found.matched :])
        if most is not None and len(new) > most:
            raise InvalidInput(
                f"messages holds {len(new)} messages new to the session, over the limit of "
                f"{most} one call may append",
                field="messages",
            )
        if not new:
            return Recorded(found.at, [], found.matched, found.skipped)
        try:
            logged = session.extend(new, keys=append_keys(found.at, new), parent=found.at)
        except InvalidInput as exc:
            index = None if exc.index is None else exc.index - found.skipped
            raise InvalidInput(exc.reason, index=index, field=exc.field) from None
        digests.advance(session.id, entry, logged)
    return Recorded(logged[-1].seq, logged, found.matched, found.skipped)
