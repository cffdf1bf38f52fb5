"""Records of the append-only log."""

from __future__ import annotations

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
