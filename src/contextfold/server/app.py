"""``create_app``: the FastAPI app over one ``Service``.

Routers by resource: ``sessions`` and ``views`` (the REST API under
``/api/v1``), ``proxy`` (``/v1/chat/completions``), ``page`` (the web page) and
``docs`` (Swagger UI at ``/docs``, served from the package); plain appends and
renders are taken off the routing by ``hot``.
The service's runner starts and stops with the app's lifespan.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI, Response
from fastapi.middleware.cors import CORSMiddleware
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from contextfold.server import docs, errors, page, proxy, sessions, views
from contextfold.server.errors import ServiceError, error_body
from contextfold.server.hosts import LoopbackHosts
from contextfold.server.hot import HotRoutes, replaying
from contextfold.server.metrics import RequestMetrics
from contextfold.server.service import Service, ServiceDep
from contextfold.server.settings import Settings

API_TITLE = "contextfold"
API_VERSION = "1"


class BodyLimit:
    """ASGI middleware answering 413 to a body over ``limit`` bytes, declared or streamed."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length":
                if value.isdigit() and int(value) > self.limit:
                    await self._refuse(send)
                    return
                await self.app(scope, receive, send)
                return
        # No declared length (a chunked body): read it here, up to the limit, then replay it.
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.limit:
                await self._refuse(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self.app(scope, replaying(b"".join(chunks), receive), send)

    def _message(self) -> str:
        return f"the request body is over the limit of {self.limit} bytes"

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(error_body("payload_too_large", self._message(), "body")).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


health = APIRouter()


@health.get("/healthz", include_in_schema=False)
async def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@health.get("/readyz", include_in_schema=False)
async def readyz(svc: ServiceDep) -> dict[str, str]:
    """The store answers: a cheap read of it."""
    try:
        svc.memory.sessions(limit=1)
    except Exception as exc:
        raise ServiceError(503, "store_unavailable", f"the store does not answer: {exc}") from exc
    return {"status": "ready"}


@health.get("/metrics", include_in_schema=False)
async def metrics(svc: ServiceDep) -> Response:
    """Prometheus text; with workers, read partly from Redis (on a thread, off the loop)."""
    runner = svc.runner
    svc.metrics.watched.set(len(runner.watched()) if runner is not None else 0)
    body = (
        svc.metrics.expose() if svc.workers is None else await run_in_threadpool(svc.metrics.expose)
    )
    return Response(body, media_type=CONTENT_TYPE_LATEST)


def create_app(config: Settings | Service | None = None) -> FastAPI:
    """The app over ``config``: settings (a service is made from them) or a service."""
    svc = config if isinstance(config, Service) else Service(config or Settings())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        svc.start()
        try:
            yield
        finally:
            svc.stop()

    # FastAPI's /docs and /redoc load from a CDN; ``docs`` serves Swagger UI from the package.
    app = FastAPI(
        title=API_TITLE, version=API_VERSION, lifespan=lifespan, docs_url=None, redoc_url=None
    )
    app.state.service = svc
    errors.install(app)
    app.include_router(health)
    for module in (sessions, views, proxy, page, docs):
        app.include_router(module.router)
    # Innermost: what reaches it passed the body limit, the host check and CORS.
    app.add_middleware(HotRoutes, service=svc)
    app.add_middleware(BodyLimit, limit=svc.settings.max_body_bytes)
    if svc.settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(svc.settings.cors_origins),
            allow_methods=["*"],
            allow_headers=["*"],
        )
    if not svc.settings.auth:
        # Outside CORS, so a rebound page's preflight is refused too.
        app.add_middleware(LoopbackHosts)
    app.add_middleware(RequestMetrics, metrics=svc.metrics)
    return app
