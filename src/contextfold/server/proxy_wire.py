"""A wire format of the proxy: how one client protocol maps to and from the log.

The proxy's flow (auth, session, lock, match and append, render, forward,
relay or whole answer, log the answer, truncated streams, errors, budget
headers) is written once (``contextfold.server.proxy_flow``); what differs
between OpenAI Chat Completions, the OpenAI Responses API and the Anthropic
Messages API is a ``Wire``: how a request's conversation reads as log
messages, how the rendered prompt is written back into the request, how an
answer (whole or streamed) becomes the message to log, and how an upstream's
refusal is told in the format's own error shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from contextfold.core.messages import Message
from contextfold.core.provider_items import ProviderName


@dataclass(frozen=True)
class Conversation:
    """A request's history as log messages (a system prompt first).

    ``continues`` is a previous response's id (formats with server state):
    the history is then the log up to and including the answer logged with
    that id (``meta["responses"]["id"]``), followed by ``messages``.
    """

    messages: list[Message]
    continues: str | None = None


class StreamAssembler(Protocol):
    """Builds the logged answer from a relayed event stream (bytes go to the client unchanged)."""

    end: str
    """What ends this format's stream, as messages say it (``[DONE] or a finish reason``)."""

    def feed(self, chunk: bytes) -> None: ...

    def close(self) -> None:
        """The stream ended: an event not ended by a blank line still counts."""

    @property
    def complete(self) -> bool:
        """The stream ended properly (its format's done or stop event) and carried no error."""

    @property
    def ended(self) -> bool:
        """The stream's end was seen (even with an error event in it): not truncated."""

    @property
    def failed(self) -> str | None:
        """Why no answer can be logged: an error event or an event that is not JSON."""

    def message(self) -> Message | None:
        """The assembled assistant message, or None when incomplete or failed."""

    def error_event(self, reason: str) -> bytes:
        """This format's last event for a stream that did not end properly."""


class Wire(Protocol):
    """One client protocol, to and from the log."""

    name: str
    """``chat_completions``, ``responses`` or ``messages``."""
    upstream: str
    """The kind of upstream that serves it: ``openai`` or ``anthropic``."""
    upstream_path: str
    """Where the request goes, under the upstream's base URL."""
    provider: ProviderName | None
    """The provider whose own compaction this wire sends back (a fold's items, rendered for
    it and written verbatim): ``openai`` (Responses), ``anthropic`` (Messages), or None."""
    keeps: str | None
    """The ``meta`` key under which this format's messages keep what a chat message cannot
    hold; the prompt's unchanged messages carry it to ``upstream_body``
    (``contextfold.memory.kept``). None: the prompt has no ``meta``."""

    def conversation(self, body: dict[str, Any]) -> Conversation:
        """The client's history as log messages; ``InvalidInput(field=...)`` on bad input."""

    def upstream_body(self, body: dict[str, Any], prompt: list[Message]) -> dict[str, Any]:
        """The client's body with its conversation replaced by ``prompt``, every other
        field unchanged."""

    def upstream_headers(self, headers: Mapping[str, str], prompt: list[Message]) -> dict[str, str]:
        """Request headers of the client's that the upstream needs (a protocol version), and
        those the ``prompt`` needs (a beta for the provider's items it carries)."""

    def answer(self, data: bytes) -> Message | None:
        """The message to log from a whole 2xx answer, or None when it has none."""

    def assembler(self) -> StreamAssembler: ...

    def refusal(self, status: int, data: bytes, secrets: Iterable[str]) -> bytes:
        """What the client sees of an upstream's 4xx: a fixed message in this format's
        error shape, never the upstream's own words."""
