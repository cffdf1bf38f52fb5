"""What the service's tests share: an app over a fresh store, keys, a real server on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import fastapi.routing
import uvicorn
from fastapi import FastAPI

from contextfold.core.log import ApiKey
from contextfold.server.auth import hash_secret, new_key
from contextfold.server.service import Service
from contextfold.server.settings import Settings
from contextfold.store.base import Store
from contextfold.store.ram import RAMStore


def make_service(store: Store | None = None, **settings: object) -> Service:
    return Service(Settings(**settings), store=store if store is not None else RAMStore())  # type: ignore[arg-type]


def add_key(store: Store, tenant: str, label: str = "") -> str:
    """A new key of ``tenant`` in ``store``, as a client sends it."""
    key_id, secret, key = new_key()
    store.put_api_key(ApiKey(key_id, tenant, hash_secret(secret), label, time.time()))
    return key


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def running(app: FastAPI, timeout: float = 20.0) -> Iterator[str]:
    """Serve ``app`` with uvicorn on 127.0.0.1 in a thread; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=1,
        )
    )
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout)


def every_route(routes: Iterable[Any]) -> Iterator[Any]:
    """The app's routes with included routers flattened (newer FastAPI nests them)."""
    flatten = getattr(fastapi.routing, "iter_route_contexts", None)
    yield from (flatten(list(routes)) if flatten is not None else routes)
