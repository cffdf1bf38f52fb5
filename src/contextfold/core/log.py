"""Records of the append-only log."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contextfold.core.messages import Message


@dataclass(frozen=True)
class LoggedMessage:
    """A message as stored: its place (``seq`` from 1), its token count, counted once, and
    its ``parent``: the seq of the message before it on its branch, 0 for a first message
    (``contextfold.core.branches``; None only in a record no store made)."""

    seq: int
    message: Message
    tokens: int
    key: str | None = None
    created_at: float = 0.0
    parent: int | None = None

    @property
    def role(self) -> str:
        return str(self.message["role"])


@dataclass(frozen=True)
class NewMessage:
    """A validated message on its way into the log."""

    message: Message
    tokens: int
    key: str | None = None


@dataclass(frozen=True)
class SessionRecord:
    """A session: its id, the encoding its token counts use, and free metadata."""

    id: str
    encoding: str
    meta: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0


@dataclass(frozen=True)
class SessionInfo:
    """A session with the figures a listing shows: its size and when it last grew."""

    id: str
    encoding: str
    meta: dict[str, Any]
    created_at: float
    last_seq: int
    """The highest seq handed out, 0 for an empty log."""
    messages: int
    tokens: int
    """The sum of the stored messages' token counts."""
    last_at: float
    """When the newest message was logged; the session's creation time while it has none."""


@dataclass(frozen=True)
class ApiKey:
    """An API key of the service: who it speaks for, and the hash of its secret (never the secret)."""

    id: str
    tenant: str
    secret_hash: str
    label: str = ""
    created_at: float = 0.0
    revoked_at: float | None = None


@dataclass(frozen=True)
class ViewRecord:
    """A view's stored configuration (JSON data) and its version, bumped by each update."""

    session_id: str
    name: str
    config: dict[str, Any]
    version: int
    updated_at: float = 0.0


def json_copy(value: Any) -> Any:
    """A copy of JSON data (dicts, lists, scalars) sharing nothing mutable with ``value``.

    What stores and caches hand out, so editing it changes nothing they keep.
    Only the containers are rebuilt: strings and numbers cannot be edited, so
    they are shared, which keeps a prompt's copy cheap however long its texts.
    """
    kind = type(value)
    if kind is dict:
        out = value.copy()
        for key, item in value.items():
            if type(item) not in _SCALARS:
                out[key] = json_copy(item)
        return out
    if kind is list or kind is tuple:
        return [item if type(item) in _SCALARS else json_copy(item) for item in value]
    if isinstance(value, dict):
        return {key: json_copy(item) for key, item in value.items()}
    return value


_SCALARS = frozenset({str, int, float, bool, type(None)})


def copies(records: list[LoggedMessage]) -> list[LoggedMessage]:
    """The records, each with a message of its own, copied in one pass."""
    messages = json_copy([r.message for r in records])
    return [
        LoggedMessage(r.seq, m, r.tokens, r.key, r.created_at, r.parent)
        for r, m in zip(records, messages, strict=True)
    ]


def copied(logged: LoggedMessage) -> LoggedMessage:
    """The record with a message of its own."""
    return LoggedMessage(
        logged.seq,
        json_copy(logged.message),
        logged.tokens,
        logged.key,
        logged.created_at,
        logged.parent,
    )
