"""Records of the append-only log."""

from __future__ import annotations

import marshal
from dataclasses import dataclass, field
from typing import Any

from contextfold.core.messages import Message


@dataclass(frozen=True)
class LoggedMessage:
    """A message as stored: its place (``seq`` from 1) and its token count, counted once."""

    seq: int
    message: Message
    tokens: int
    key: str | None = None
    created_at: float = 0.0

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
    ``marshal`` copies plain data in C, several times faster than
    ``copy.deepcopy``; anything it cannot write (a dict subclass) is walked.
    """
    try:
        return marshal.loads(marshal.dumps(value))
    except ValueError:
        return _walked(value)


def _walked(value: Any) -> Any:
    if type(value) is dict:
        return {k: v if type(v) is str else _walked(v) for k, v in value.items()}
    if type(value) is list or type(value) is tuple:
        return [v if type(v) is str else _walked(v) for v in value]
    if isinstance(value, dict):
        return {k: _walked(v) for k, v in value.items()}
    return value


def copies(records: list[LoggedMessage]) -> list[LoggedMessage]:
    """The records, each with a message of its own, copied in one pass."""
    messages = json_copy([r.message for r in records])
    return [
        LoggedMessage(r.seq, m, r.tokens, r.key, r.created_at)
        for r, m in zip(records, messages, strict=True)
    ]


def copied(logged: LoggedMessage) -> LoggedMessage:
    """The record with a message of its own."""
    return LoggedMessage(
        logged.seq, json_copy(logged.message), logged.tokens, logged.key, logged.created_at
    )
