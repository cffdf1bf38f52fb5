"""The two hottest requests served without FastAPI's routing and dependency solving.

An append with no ``Idempotency-Key`` and a render with no query string make
most of a busy service's traffic; FastAPI's route matching, dependency solving
and exception wrapping cost about as much CPU as their own work. ``HotRoutes``
recognises exactly these requests, checks them with the same functions and
models the routes use, and runs the same work (``sessions.append_records``,
``views.render_body``). Whatever it does not take plainly (another route, a
query, a header it does not read, a body over 64 KB or one the model refuses,
a key refused) goes to the app with its body replayed, so every refusal keeps
the app's own answer; errors raised by the work itself are answered as the
app's handlers answer them (``errors.raised_answer``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from contextfold.server.auth import tenant
from contextfold.server.errors import ServiceError, raised_answer
from contextfold.server.ids import NAME
from contextfold.server.models import MessagesIn
from contextfold.server.responses import FastJSON
from contextfold.server.service import Service
from contextfold.server.sessions import append_records
from contextfold.server.views import render_body

APPEND = re.compile(f"/api/v1/sessions/({NAME})/messages")
RENDER = re.compile(f"/api/v1/sessions/({NAME})/views/({NAME})/render")
APPEND_ROUTE = "/api/v1/sessions/{sid}/messages"
RENDER_ROUTE = "/api/v1/sessions/{sid}/views/{name}/render"
PASSED_HEADERS = frozenset(
    b"host authorization x-api-key content-type content-length user-agent accept "
    b"accept-encoding connection".split()
)
"""The headers a hot request may carry; any other (an ``Idempotency-Key``, a transfer
encoding) sends it to the app."""


HOT_BODY_BYTES = 1 << 16
"""The largest append body taken here: parsing a larger one dwarfs what the routing costs,
and one the model refuses would be parsed twice (here, then by the app)."""


@dataclass(frozen=True)
class Template:
    """The route a hot request stands for in its scope: ``server.metrics`` counts a
    request under its route's ``path``."""

    path: str


class HotRoutes:
    """ASGI middleware taking the plain appends and renders off the app (see the module)."""

    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["query_string"]
            or scope.get("root_path")
            or any(name not in PASSED_HEADERS for name, _ in scope["headers"])
        ):
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        if method == "POST" and (found := APPEND.fullmatch(path)):
            await self._append(found.group(1), scope, receive, send)
        elif method == "GET" and (found := RENDER.fullmatch(path)):
            await self._render(found.group(1), found.group(2), scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _tenant(self, scope: Scope, receive: Receive) -> str | None:
        """The request's tenant, or None when the app should answer the refusal."""
        try:
            return await tenant(Request(scope, receive))
        except ServiceError:
            return None

    async def _append(self, sid: str, scope: Scope, receive: Receive, send: Send) -> None:
        length = next((v for k, v in scope["headers"] if k == b"content-length"), b"")
        if not length.isdigit() or int(length) > HOT_BODY_BYTES:
            await self.app(scope, receive, send)
            return
        body = await _body(receive)
        if body is None:  # the client went away
            return
        parsed = _messages(scope, body)
        who = None if parsed is None else await self._tenant(scope, receive)
        if parsed is None or who is None:
            await self.app(scope, replaying(body, receive), send)
            return
        scope["route"] = Template(APPEND_ROUTE)
        answer: JSONResponse
        try:
            answer = FastJSON(
                {"messages": await append_records(self.service, who, sid, parsed, None)},
                status_code=201,
            )
        except Exception as exc:
            answer = raised_answer(exc, "POST", scope["path"])
        await answer(scope, receive, send)

    async def _render(
        self, sid: str, name: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        who = await self._tenant(scope, receive)
        if who is None:
            await self.app(scope, receive, send)
            return
        scope["route"] = Template(RENDER_ROUTE)
        answer: JSONResponse
        try:
            answer = FastJSON(await render_body(self.service, who, sid, name))
        except Exception as exc:
            answer = raised_answer(exc, "GET", scope["path"])
        await answer(scope, receive, send)


async def _body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def replaying(body: bytes, receive: Receive) -> Receive:
    """``receive`` giving ``body`` first, then what the connection sends next: a body a
    middleware read is handed on as if unread."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def _messages(scope: Scope, body: bytes) -> MessagesIn | None:
    """The body as the route's model reads it (JSON by the standard library, as FastAPI
    reads it); None for anything the app should answer: not declared JSON, not JSON,
    refused by the model."""
    kind = next((v for k, v in scope["headers"] if k == b"content-type"), b"")
    if kind.split(b";")[0].strip().lower() != b"application/json":
        return None
    try:
        data: Any = json.loads(body)
        return MessagesIn.model_validate(data)
    except (ValueError, ValidationError):
        return None
