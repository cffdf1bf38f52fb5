"""The proxy's routes: any app gets compaction by changing its ``base_url``.

``POST /v1/chat/completions`` (OpenAI Chat Completions) and ``POST
/v1/messages`` (Anthropic Messages), ``POST /v1/responses`` (the OpenAI
Responses API), streamed or not, tools included, and ``POST
/v1/messages/count_tokens``; every route runs the one flow of
``contextfold.server.proxy_flow`` with its wire format
(``contextfold.server.proxy_wire``):

1. The session is the ``X-Contextfold-Session`` header, else the body's
   ``user`` field; it is the caller's tenant's session ``f"{tenant}/{sid}"``,
   created on first use. Another tenant's session of the same name is never
   touched: the tenant comes from the key alone.
2. The client's conversation is matched against the log's branches
   (``Session.record``), and only the rest is appended, where
   the conversation parts from them (a regenerate or an edit starts a branch).
3. The view (``X-Contextfold-View``, default ``default``; created on first
   use with the server's preset and model, and watched by the background
   runner) renders the prompt, for ``X-Contextfold-Budget`` tokens when given,
   else for the window of the request's model less room for the answer
   (``contextfold.server.proxy_budget``; ``serve --budget`` fixes it), or the
   view's budget when that is smaller. The answer's ``X-Contextfold-Budget``
   and ``X-Contextfold-Budget-Source`` headers say which.
4. The request goes to the upstream of the wire's kind with the rendered
   prompt in place of the client's conversation, every other field
   unchanged; the answer comes back unchanged (streamed events byte for byte)
   and is logged.

With ``X-Contextfold-Recall-Tools: on`` (or ``serve --recall-tools``), the
upstream model is also offered the recall tools, and the proxy answers their
calls itself before the client gets its answer
(``contextfold.server.proxy_recall``).

``GET /v1/models`` passes the OpenAI-compatible upstream's list through.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import Response

from contextfold.server.auth import Tenant
from contextfold.server.errors import ServiceError
from contextfold.server.proxy_chat import CHAT
from contextfold.server.proxy_count import count_tokens
from contextfold.server.proxy_flow import Call, serve, whole
from contextfold.server.proxy_messages import MESSAGES, UNMARKED_MESSAGES
from contextfold.server.proxy_responses import RESPONSES, RESPONSES_BODY
from contextfold.server.proxy_shared import ProxyState, proxy_state
from contextfold.server.proxy_upstream import UpstreamError
from contextfold.server.service import ServiceDep

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
_MESSAGES_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "description": "An Anthropic Messages request; fields other than system "
                    "and messages go upstream unchanged.",
                    "required": ["messages"],
                    "properties": {
                        "model": {"type": "string"},
                        "system": {"oneOf": [{"type": "string"}, {"type": "array"}]},
                        "messages": {"type": "array", "minItems": 1, "items": {"type": "object"}},
                        "max_tokens": {"type": "integer"},
                        "stream": {"type": "boolean"},
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


@asynccontextmanager
async def _lifespan(app: Any) -> AsyncIterator[None]:
    """Close the upstream clients with the app (FastAPI merges a router's lifespan into the app's)."""
    try:
        yield
    finally:
        state: ProxyState | None = getattr(app.state, "proxy", None)
        if state is not None:
            await state.aclose()
        app.state.proxy = None


router = APIRouter(tags=["proxy"], lifespan=_lifespan)


def _call(
    request: Request,
    tenant: Tenant,
    service: ServiceDep,
    x_contextfold_session: Annotated[str | None, Header()] = None,
    x_contextfold_view: Annotated[str | None, Header()] = None,
    x_contextfold_budget: Annotated[str | None, Header()] = None,
    x_contextfold_recall_tools: Annotated[str | None, Header()] = None,
) -> Call:
    """One proxied call's caller and headers, read the same way for every wire format."""
    return Call(
        request,
        tenant,
        service,
        x_contextfold_session,
        x_contextfold_view,
        x_contextfold_budget,
        x_contextfold_recall_tools,
    )


ProxyCall = Annotated[Call, Depends(_call)]


@router.post(
    "/v1/chat/completions",
    openapi_extra=_CHAT_BODY,
    responses=_ANSWERS,
    summary="Chat completion through the session's compacted prompt",
)
async def chat_completions(call: ProxyCall) -> Response:
    return await serve(call, CHAT)


@router.post(
    "/v1/messages",
    openapi_extra=_MESSAGES_BODY,
    responses=_ANSWERS,
    summary="Anthropic Messages through the session's compacted prompt",
)
async def messages(call: ProxyCall) -> Response:
    return await serve(
        call, MESSAGES if call.service.settings.cache_breakpoints else UNMARKED_MESSAGES
    )


@router.post(
    "/v1/messages/count_tokens",
    openapi_extra=_MESSAGES_BODY,
    summary="Tokens of the compacted prompt the next Messages call would send",
)
async def messages_count_tokens(call: ProxyCall) -> Response:
    return await count_tokens(call)


@router.post(
    "/v1/responses",
    openapi_extra=RESPONSES_BODY,
    responses={
        **_ANSWERS,
        400: {
            "description": "previous_response_id names no answer of this session, or the "
            "request names a conversation (code invalid_input)."
        },
    },
    summary="OpenAI Responses through the session's compacted prompt",
)
async def responses(call: ProxyCall) -> Response:
    return await serve(call, RESPONSES)


@router.get("/v1/models", summary="The upstream's models, passed through")
async def models(request: Request, tenant: Tenant) -> Response:
    upstream = proxy_state(request).upstream(CHAT)
    try:
        answer = await upstream.send("GET", "/models")
    except UpstreamError as exc:
        raise ServiceError(502, "upstream_error", exc.reason) from exc
    return await whole(upstream, answer, CHAT, None)
