"""How ``contextfold serve`` runs until a signal, and stops with nothing left behind.

SIGTERM (systemd, Docker, Kubernetes) and SIGINT (Ctrl-C) stop it the same way:

1. no new connections; open requests get ``timeout_graceful_shutdown`` seconds
   (event streams never end on their own, so they are cut then);
2. the runner stops: jobs running get a few seconds to finish and commit,
   those still running then are abandoned (never committed: a fold commits in
   one transaction or not at all); its worker processes end;
3. the store is closed and the process exits 0.

A second signal during the stop skips both waits: open requests are cut and
running jobs abandoned at once. uvicorn replays the signals it caught once it
returns (to end the process the default way); here they reach the same handler
instead, so the service is always closed and the exit code is 0.
"""

from __future__ import annotations

import signal
import socket
from collections.abc import Sequence
from types import FrameType
from typing import Any

import uvicorn
from fastapi import FastAPI

from contextfold.server.service import Service

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Server(uvicorn.Server):
    """uvicorn's server, whose second signal also hurries the service's stop."""

    def __init__(self, config: uvicorn.Config, service: Service) -> None:
        super().__init__(config)
        self.service = service

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit:
            self.force_exit = True
            self.service.hurry()
        super().handle_exit(sig, frame)


def run_until_stopped(
    service: Service,
    app: FastAPI,
    sockets: Sequence[socket.socket] | None = None,
    **config: Any,
) -> None:
    """Serve ``app`` (over ``service``) with uvicorn, ``config`` as ``uvicorn.Config``
    takes it, until SIGTERM or SIGINT; return once everything it started has ended.
    ``sockets``: listening sockets bound already (shared by several server processes)."""
    server = _Server(uvicorn.Config(app, **config), service)
    before = {sig: signal.signal(sig, server.handle_exit) for sig in SIGNALS}
    try:
        server.run(sockets=list(sockets) if sockets is not None else None)
    finally:
        # Stopped here too: a second signal (or a failed start) skips the app's shutdown.
        service.close(drain=False)
        for sig, handler in before.items():
            signal.signal(sig, handler)
