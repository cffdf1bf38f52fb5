"""Matching a client's whole conversation against a session's log.

An OpenAI client resends its whole conversation on every call. The proxy keeps
the log append-only, so the rule is strict: the log's messages must be a
prefix of the client's list, and only what follows that prefix is new. A list
that differs from the log anywhere, or is shorter than it, is a divergence
(HTTP 409 naming the index), never a silent merge.

The session's system prompt: a client whose list starts with a system (or
developer) message is matched against the log from seq 1, so its system
message is the log's first message (logged on the first call). A client whose
list starts with anything else is matched against the log after its leading
system messages: a session created through the REST API with a system prompt
keeps it server-side, and the client need not know it.

Matching is cheap: messages are compared by a 16-byte digest of what a model
sees (role, content, name, tool calls, tool call id, refusal). ``LogDigests``
keeps each session's digests in this process (17 bytes a message, two million
messages in all by default) and, on each call, reads only the messages
appended since it last looked (one ``last_seq`` query, plus a read of
the new tail when another writer appended). The client's messages are digested
once per call; only one that differs from the log, or is new, is validated
in full.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextfold.core.log import LoggedMessage
from contextfold.core.messages import Message, validate_message
from contextfold.memory.session import Session

_SYSTEM_ROLES = frozenset({"system", "developer"})


class Divergence(Exception):
    """The client's conversation is not the log followed by new messages."""

    def __init__(self, index: int, reason: str) -> None:
        self.index = index
        self.reason = reason
        super().__init__(reason)


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
    system: int = 0  # leading system/developer messages
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
            if self.system == len(self.roles) and role in _SYSTEM_ROLES:
                self.system += 1
            self.digests += digest(record.message)
            self.roles.append(_ROLES.index(role) if role in _ROLES else 255)
            self.last_seq = record.seq


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

    def current(self, session: Session) -> LogDigest:
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

    def forget(self, session_id: str) -> None:
        with self._lock:
            entry = self._table.pop(session_id, None)
            if entry is not None:
                self._messages -= len(entry)


def new_from(log: LogDigest, client: Sequence[Message]) -> tuple[int, int]:
    """Where the client's new messages start, and the log seq of its first message minus one.

    Returns ``(first_new, skipped)``: ``client[first_new:]`` are new, and
    ``client[i]`` is the log's ``seq = skipped + i + 1``. Raises ``InvalidInput``
    for a malformed message met on the way and ``Divergence`` when the log is
    not a prefix of the client's list.
    """
    starts_with_system = bool(client) and client[0].get("role") in _SYSTEM_ROLES
    skipped = 0 if starts_with_system else log.system
    stored = len(log) - skipped
    packed = memoryview(log.digests)
    for i, message in enumerate(client[:stored]):
        at = (skipped + i) * _SIZE
        if digest(message) != packed[at : at + _SIZE]:
            validate_message(message, index=i)
            role = log.role_at(skipped + i)
            raise Divergence(
                i,
                f"the conversation diverges from the session's log at message {i}: the log "
                f"holds a different {role} message there (seq {skipped + i + 1}); the log is "
                "append-only, so send the conversation as logged or use a new session",
            )
    if len(client) < stored:
        missing = stored - len(client)
        raise Divergence(
            len(client),
            f"the conversation ends at message {len(client)} but the session's log holds "
            f"{missing} more message(s) from there (the first a "
            f"{log.role_at(skipped + len(client))} message, e.g. an answer logged for a call "
            "whose reply the client did not keep); send the conversation as logged or use a "
            "new session",
        )
    return stored, skipped
