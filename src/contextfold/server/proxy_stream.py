"""A streamed answer relayed to the client while its wire's assembler builds the message to log.

The proxy passes the upstream's server-sent events to the client byte for
byte (an event at a time) and feeds the same bytes to the wire's
``StreamAssembler``. A stream that ends without its format's end (the
connection broke, or the upstream closed it cleanly too early) is truncated:
the client gets the format's own last error event (its SDK raises it), the
session's log keeps the client's messages but no answer, and the server's log
and the session's event stream (event ``truncated``) say so.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

import httpx
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from contextfold.core.messages import Message
from contextfold.server.proxy_upstream import mask_secrets, passed_headers
from contextfold.server.proxy_wire import StreamAssembler

log = logging.getLogger("contextfold.proxy")


def _whole_events(data: bytes) -> tuple[bytes, bytes]:
    """``data`` split after its last complete event (a blank line), so a stream the
    upstream breaks never leaves the client half an event before the error event."""
    end = max(data.rfind(b"\n\n") + 2, data.rfind(b"\r\n\r\n") + 4, 0)
    return data[:end], data[end:]


class RelayResponse(StreamingResponse):
    """The upstream's event stream, passed on byte for byte while the answer is assembled.

    The answer is logged as soon as the stream's end is seen, before those
    bytes go on, so a client that has read the whole stream finds it in the
    log. Bytes go on an event at a time (a partial event waits for its end),
    so a stream the upstream breaks gets one last whole error event (the SDK
    raises it) and logs nothing, and the server's upstream key, should the
    upstream echo it, is masked in whole events; a client that leaves early
    logs nothing either. The session's lock and the upstream response are
    released however the response ends, even if it never starts. A stream
    that ends without its end event gets an error event too, and
    ``truncated`` is told why.
    """

    def __init__(
        self,
        answer: httpx.Response,
        assembled: StreamAssembler,
        log_answer: Callable[[Message], Awaitable[object]],
        session: str,
        release: Callable[[], None],
        *,
        truncated: Callable[[str], None],
        secrets: Iterable[str] = (),
    ) -> None:
        self._answer = answer
        self._assembled = assembled
        self._log_answer = log_answer
        self._session = session
        self._release = release
        self._truncated = truncated
        self._secrets = tuple(secrets)
        super().__init__(self._relay(), headers=passed_headers(answer.headers, self._secrets))

    def _masked(self, events: bytes) -> bytes:
        """Whole events with the server's upstream key masked (an upstream may echo it in an
        error event); a key cannot straddle two pieces, as only whole events go on."""
        return mask_secrets(events, self._secrets)

    async def _relay(self) -> AsyncIterator[bytes]:
        assembled = self._assembled
        logged = False
        held = b""  # the start of an event not ended yet: passed on once it is whole
        try:
            async for chunk in self._answer.aiter_bytes():
                assembled.feed(chunk)
                if assembled.ended and not logged:
                    logged = await self._log()
                whole, held = _whole_events(held + chunk)
                if whole:
                    yield self._masked(whole)
        except httpx.HTTPError as exc:
            reason = f"upstream stream broken: {type(exc).__name__}; no answer was logged"
            log.warning("%s (session %s): %s", reason, self._session, exc)
            self._truncated(reason)
            yield assembled.error_event(reason)
            return
        assembled.close()
        if not logged:
            await self._log()
        if held:
            yield self._masked(held)
        if not assembled.ended:
            reason = (
                f"the upstream ended the stream without {assembled.end}: the answer is "
                "incomplete and was not logged"
            )
            log.warning("stream for %s truncated: %s", self._session, reason)
            self._truncated(reason)
            yield (b"\n\n" if held else b"") + assembled.error_event(reason)

    async def _log(self) -> bool:
        message = self._assembled.message()
        if message is None:
            reason = (self._assembled.failed or f"no {self._assembled.end}").encode()
            log.warning(
                "stream for %s ended without an answer to log: %s",
                self._session,
                # Masked before it is cut, so no part of a key is left.
                mask_secrets(reason, self._secrets).decode()[:600],
            )
            return True
        try:
            await self._log_answer(message)
        except Exception:
            log.exception("could not log the streamed answer of %s", self._session)
        return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._answer.aclose()
            self._release()
