"""The ``Host`` check of the loopback-only modes (``--no-auth``, ``--demo``).

With auth off, the port's only guard is that just this machine reaches it. A
web page the user visits can get around that by DNS rebinding: its own name
re-pointed at 127.0.0.1, the browser sends the page's requests (and reads the
answers) as same-origin. Those requests carry the page's name in ``Host``, so
a request naming anything but a loopback host (``127.0.0.1``, ``localhost``,
``[::1]``, any port) is refused with 421 before any route runs.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

from contextfold.server.errors import error_body

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})


def host_name(host: str) -> str:
    """``host`` without its port: ``[::1]:8765`` is ``[::1]``, ``localhost:80`` is ``localhost``."""
    if host.startswith("["):
        end = host.find("]")
        return host[: end + 1] if end != -1 else host
    return host.partition(":")[0]


def loopback_host(host: str | None) -> bool:
    """True for a ``Host`` header naming this machine's loopback (any port, any case)."""
    return host is not None and host_name(host.strip().lower()) in LOOPBACK_NAMES


class LoopbackHosts:
    """ASGI middleware answering 421 to an HTTP request whose ``Host`` is not loopback."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = next((v for k, v in scope["headers"] if k == b"host"), None)
        if loopback_host(None if host is None else host.decode("latin-1")):
            await self.app(scope, receive, send)
            return
        shown = "none" if host is None else repr(host.decode("latin-1")[:100])
        body = json.dumps(
            error_body(
                "host_not_allowed",
                f"this server runs without API keys and answers only requests to "
                f"127.0.0.1, localhost or [::1], not to Host {shown}",
                field="Host",
            )
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 421,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
