"""The OpenAI-compatible proxy: any app gets compaction by changing its ``base_url``.

``POST /v1/chat/completions``, streamed or not, tools included:

1. The session is the ``X-Contextfold-Session`` header, else the body's
   ``user`` field; it is the caller's tenant's session ``f"{tenant}/{sid}"``,
   created on first use. Another tenant's session of the same name is never
   touched: the tenant comes from the key alone.
2. The client's messages are matched against the log's branches
   (``contextfold.server.proxy_match``): the call continues at the end of
   the longest common prefix, and the rest is appended there (a regenerate or
   an edit starts a branch).
3. The view (``X-Contextfold-View``, default ``default``; created on first
   use with the server's preset and model, and watched by the background
   runner) renders the prompt of the branch the call continues, for ``X-Contextfold-Budget`` tokens when given,
   else for the window of the request's model less room for the answer
   (``contextfold.server.proxy_budget``; ``serve --budget`` fixes it), or the
   view's budget when that is smaller. The answer's ``X-Contextfold-Budget``
   and ``X-Contextfold-Budget-Source`` headers say which.
4. The request goes upstream with the rendered messages in place of the
   client's, every other field unchanged; the answer comes back unchanged
   (streamed events byte for byte) and is appended to the log: streamed
   answers assembled (``contextfold.server.proxy_stream``), tool calls
   included. An upstream failure appends no answer: the log keeps the
   client's messages, so a retry of the same conversation goes on from there.

Calls on one session are served one at a time in a process (a lock held from
the match until the answer is logged), so two identical concurrent calls
cannot log two answers. ``GET /v1/models`` passes through.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any

import httpx
from fastapi import APIRouter, Header, Request
from fastapi.responses import Response

from contextfold.core.errors import InvalidInput, NotFound
from contextfold.core.messages import Message, validate_messages
from contextfold.memory.session import Session
from contextfold.server.auth import Tenant
from contextfold.server.errors import ServiceError
from contextfold.server.proxy_budget import Fit, create_view, fit
from contextfold.server.proxy_match import (
    LogDigest,
    LogDigests,
    append_keys,
    client_messages,
    completion_message,
    match,
)
from contextfold.server.proxy_request import (
    check_json_type,
    check_new,
    read_body,
    read_budget,
    read_session_id,
    read_view_name,
)
from contextfold.server.proxy_stream import RelayResponse
from contextfold.server.proxy_upstream import (
    Upstream,
    UpstreamError,
    failure_of,
    mask_secrets,
    parse_upstream,
    passed_headers,
    refusal_body,
)
from contextfold.server.service import Service, ServiceDep

log = logging.getLogger("contextfold.proxy")

_CHAT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "description": "An OpenAI chat completion request; fields other than "
                    "messages go upstream unchanged.",
                    "required": ["messages"],
                    "properties": {
                        "model": {"type": "string"},
                        "messages": {"type": "array", "minItems": 1, "items": {"type": "object"}},
                        "stream": {"type": "boolean"},
                        "user": {"type": "string", "description": "session id fallback"},
                    },
                    "additionalProperties": True,
                }
            }
        },
    }
}
_ANSWERS: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The upstream's answer, unchanged (JSON, or server-sent events when "
        "stream is true); an upstream 4xx other than 401/403/407 keeps its status, with a "
        "fixed message and the error's type, code and param when they are plain words.",
        "content": {"application/json": {}, "text/event-stream": {}},
    },
    413: {"description": "The body is over the size limit (code payload_too_large)."},
    415: {"description": "The body is not sent as application/json (unsupported_media_type)."},
    422: {
        "description": "Bad request field or header, more than 1,000 messages, or a body "
        "that is not plain JSON (code invalid_input)."
    },
    502: {
        "description": "The upstream failed, timed out or refused the server's key, or the "
        "server has no upstream (code upstream_error)."
    },
}


@dataclass
class ProxyState:
    """What the proxy keeps per app: the upstream client, log digests, per-session locks."""

    upstream: Upstream | None
    digests: LogDigests = field(default_factory=LogDigests)
    locks: dict[str, tuple[asyncio.Lock, int]] = field(default_factory=dict)

    async def hold(self, key: str) -> Callable[[], None]:
        """Wait for the session's lock; returns its release (idempotent)."""
        held = self.locks.get(key)
        lock, users = held if held is not None else (asyncio.Lock(), 0)
        self.locks[key] = (lock, users + 1)
        try:
            await lock.acquire()
        except BaseException:
            self._leave(key)
            raise
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                lock.release()
                self._leave(key)

        return release

    def _leave(self, key: str) -> None:
        lock, users = self.locks[key]
        if users == 1:
            del self.locks[key]
        else:
            self.locks[key] = (lock, users - 1)


def proxy_state(request: Request) -> ProxyState:
    """The app's proxy state, made on first use inside the server's event loop."""
    state: ProxyState | None = getattr(request.app.state, "proxy", None)
    if state is None:
        settings = request.app.state.service.settings
        upstream = None
        if settings.upstream:
            upstream = Upstream(
                parse_upstream(settings.upstream),
                api_key=os.environ.get(settings.upstream_key_env) or None,
                timeout_s=settings.upstream_timeout_s,
            )
        state = ProxyState(upstream)
        request.app.state.proxy = state
    return state


@asynccontextmanager
async def _lifespan(app: Any) -> AsyncIterator[None]:
    """Close the upstream client with the app (FastAPI merges a router's lifespan into the app's)."""
    try:
        yield
    finally:
        state: ProxyState | None = getattr(app.state, "proxy", None)
        if state is not None and state.upstream is not None:
            await state.upstream.aclose()
        app.state.proxy = None


router = APIRouter(tags=["proxy"], lifespan=_lifespan)


def _upstream(state: ProxyState) -> Upstream:
    if state.upstream is None:
        raise ServiceError(
            502,
            "upstream_error",
            "this server has no upstream, so no proxy: start it with "
            "--upstream openai-compatible:URL",
        )
    return state.upstream


@dataclass
class _Turn:
    """One call's side of the session: where it is, and how to log the answer."""

    service: Service
    session: Session
    log: LogDigest
    digests: LogDigests
    prompt: list[Message]
    headers: dict[str, str]
    """The budget the prompt was rendered to, and where it came from, for the client."""
    at: int
    """The seq the call continues: its answer is logged after it."""

    async def log_answer(self, answer: Message) -> None:
        await self.service.run(self._append, answer)

    def truncated(self, reason: str) -> None:
        """Tell the session's event streams that a streamed answer was cut short."""
        data = {"session": self.session.id.partition("/")[2], "reason": reason}
        self.service.hub.publish(self.session.id, {"event": "truncated", "data": data})

    def _append(self, answer: Message) -> None:
        keys = append_keys(self.at, [answer])
        logged = self.session.extend([answer], keys=keys, parent=self.at)
        _advance(self.digests, self.log, self.session.id, logged)


def _advance(digests: LogDigests, log: LogDigest, sid: str, logged: list[Any]) -> None:
    """Add what was just appended; an append that met older records drops the cache instead."""
    if [m.seq for m in logged] == list(range(log.last_seq + 1, log.last_seq + 1 + len(logged))):
        digests.add(sid, log, logged)
    else:
        digests.forget(sid)


def _prepare(
    service: Service,
    state: ProxyState,
    store_id: str,
    messages: list[Message],
    view_name: str,
    budget: int | None,
    fitted: Fit,
) -> _Turn:
    """Match and append the client's new messages, then render the view.

    Runs through ``Service.run``: on the loop for SQLite and RAM, on a worker
    thread for a store that waits on a network.
    """
    try:
        session = service.memory.existing_session(store_id)
    except NotFound:
        # A new session's messages are all new: refuse bad ones before creating it.
        check_new(len(messages))
        validate_messages(messages)
        session = service.memory.session(store_id)
    log = state.digests.current(session)
    found = match(log, messages)
    new, at = messages[found.matched :], found.at
    check_new(len(new))
    if new:
        try:
            logged = session.extend(new, keys=append_keys(at, new), parent=at)
        except InvalidInput as exc:
            index = None if exc.index is None else exc.index - found.skipped
            raise InvalidInput(exc.reason, index=index, field=exc.field) from None
        _advance(state.digests, log, store_id, logged)
        at = logged[-1].seq
    ready = (view_name, id(service.runner))
    if ready not in log.views:
        if session.view(view_name).version == 0:
            create_view(service, session, view_name, fitted)
        service.watch(session, view_name)
        log.views.add(ready)
    view = session.view(view_name)
    budget, source = fitted.choose(budget, view.config.budget)
    prompt = view.render(budget, branch=at)
    shown = str(budget if budget is not None else view.config.budget)
    headers = {"X-Contextfold-Budget": shown, "X-Contextfold-Budget-Source": source}
    return _Turn(service, session, log, state.digests, prompt, headers, at)


@router.post(
    "/v1/chat/completions",
    openapi_extra=_CHAT_BODY,
    responses=_ANSWERS,
    summary="Chat completion through the session's compacted prompt",
)
async def chat_completions(
    request: Request,
    tenant: Tenant,
    service: ServiceDep,
    x_contextfold_session: Annotated[str | None, Header()] = None,
    x_contextfold_view: Annotated[str | None, Header()] = None,
    x_contextfold_budget: Annotated[str | None, Header()] = None,
) -> Response:
    check_json_type(request.headers.get("content-type"))
    body = read_body(await request.body())
    sid = read_session_id(x_contextfold_session, body)
    view_name = read_view_name(x_contextfold_view)
    budget = read_budget(x_contextfold_budget)
    settings = service.settings
    fitted = fit(settings.budget, settings.model_windows, body)
    messages = client_messages(body.get("messages"))
    state = proxy_state(request)
    upstream = _upstream(state)
    store_id = service.store_id(tenant, sid)
    release = await state.hold(store_id)
    try:
        turn = await service.run(
            _prepare, service, state, store_id, messages, view_name, budget, fitted
        )
        payload = json.dumps(
            {**body, "messages": turn.prompt}, ensure_ascii=False, separators=(",", ":")
        ).encode()
        try:
            answer = await upstream.send("POST", "/chat/completions", payload)
        except UpstreamError as exc:
            raise ServiceError(502, "upstream_error", exc.reason) from exc
        if body.get("stream") and answer.status_code == 200:
            relay = RelayResponse(
                answer,
                turn.log_answer,
                turn.session.id,
                release,
                truncated=turn.truncated,
                secrets=upstream.secrets,
            )
            relay.headers.update(turn.headers)
            release = _nothing
            return relay
        return await _whole(upstream, answer, turn)
    finally:
        release()


def _nothing() -> None:
    """The release of a lock the streamed response now holds."""


async def _whole(upstream: Upstream, answer: httpx.Response, turn: _Turn | None) -> Response:
    """A whole upstream answer back to the client, and logged when it is a completion.

    An error answer's body stays in the server's log (secrets masked): the
    client gets its status and a fixed message (``proxy_upstream``).
    """
    try:
        data = await upstream.read(answer)
    except UpstreamError as exc:
        raise ServiceError(502, "upstream_error", exc.reason) from exc
    status = answer.status_code
    if status >= 400:
        where = f"for {turn.session.id}" if turn is not None else "for /v1/models"
        log.warning("upstream answered HTTP %d %s: %s", status, where, upstream.scrub(data))
        failure = failure_of(status)
        if failure is not None:
            raise ServiceError(502, "upstream_error", failure.reason)
        data = refusal_body(status, data, upstream.secrets)
    elif turn is not None and status < 300:
        message = completion_message(data)
        try:
            if message is None:
                raise InvalidInput("the answer has no choices[0].message", field="choices")
            await turn.log_answer(message)
        except InvalidInput as exc:
            # The upstream's answer, not the client's fault: it goes back unchanged; the
            # client's next call sends it, and is told then what the log cannot keep.
            log.warning("answer for %s not logged: %s", turn.session.id, exc)
    if status < 400:
        data = mask_secrets(data, upstream.secrets)
    headers = passed_headers(answer.headers, upstream.secrets)
    if status >= 400:
        headers["content-type"] = "application/json"
    if turn is not None:
        headers.update(turn.headers)
    return Response(data, status, headers=headers)


@router.get("/v1/models", summary="The upstream's models, passed through")
async def models(request: Request, tenant: Tenant) -> Response:
    upstream = _upstream(proxy_state(request))
    try:
        answer = await upstream.send("GET", "/models")
    except UpstreamError as exc:
        raise ServiceError(502, "upstream_error", exc.reason) from exc
    return await _whole(upstream, answer, None)
