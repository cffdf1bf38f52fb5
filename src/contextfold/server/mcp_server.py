"""``contextfold mcp``: the recall tools as an MCP server, over stdio or streamable HTTP.

The tools are ``RecallTools`` (``contextfold.memory.recall_tools``) as MCP tools,
each also taking ``session`` (the session's id) and, optionally, ``view`` (the
view whose folds it reads; ``default`` when not given). A call opens the
session, answers with ``RecallTools.answer`` and hands its JSON back as the
result's text and structured content; a model's mistake (a missing session, a
bad argument) is a tool error naming the field, never a protocol error, so the
model can correct its call. Only an unknown tool name is a protocol error.

Tenancy is the service's: the session ``S`` of tenant ``T`` is the store's
``T/S`` (``server.ids.store_id``), and a call only ever looks up that name, so
another tenant's session is "not found" without being read. The tenant comes
from the transport, never from the call: over stdio it is fixed when the server
starts (``--tenant``); over HTTP it is the tenant of the request's API key (the
service's keys, ``server.keys``), checked before the SDK sees the request.

Over HTTP the server is stateless and answers in JSON (no event stream): every
request carries its own key, and any number of processes can serve one store.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import uvicorn
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from contextfold.core.errors import InvalidInput, NotFound, StoreError
from contextfold.memory.recall_tools import RecallTools, check_max_tokens, tool_definitions
from contextfold.memory.session import Memory
from contextfold.redact import redact
from contextfold.server.auth import bearer
from contextfold.server.errors import ServiceError
from contextfold.server.ids import check_api_name, store_id
from contextfold.server.keys import KeyCache

NAME = "contextfold"
DEFAULT_VIEW = "default"
MCP_PATH = "/mcp"
TENANT_SCOPE = "contextfold.tenant"
"""The ASGI scope key the key check leaves the request's tenant under."""
INSTRUCTIONS = (
    "Look up what was folded out of an agent's context: search a conversation's whole log, "
    "list its folds, and read the original messages a fold replaced. Every tool takes "
    "`session`, the id of the conversation, and optionally `view`, the view whose folds to read."
)
_SESSION = {"type": "string", "description": "the id of the conversation (session) to look in"}
_VIEW = {
    "type": "string",
    "description": f"the view whose folds to read (default {DEFAULT_VIEW!r})",
}
T = TypeVar("T")
TenantOf = Callable[[ServerRequestContext[Any, Any]], str]


def mcp_tools() -> list[types.Tool]:
    """The recall tools as MCP tools: their OpenAI schemas, plus ``session`` and ``view``."""
    tools = []
    for definition in tool_definitions():
        function = definition["function"]
        schema = dict(function["parameters"])
        schema["properties"] = {"session": _SESSION, "view": _VIEW, **schema["properties"]}
        schema["required"] = ["session", *schema.get("required", [])]
        tools.append(
            types.Tool(
                name=function["name"],
                description=function["description"],
                input_schema=schema,
                annotations=types.ToolAnnotations(read_only_hint=True, idempotent_hint=True),
            )
        )
    return tools


class RecallServer:
    """The recall tools over one store's sessions, each call within the tenant
    ``tenant_of`` gives for it."""

    def __init__(self, memory: Memory, tenant_of: TenantOf, *, max_tokens: int = 2000) -> None:
        check_max_tokens(max_tokens, "max_tokens")
        self.memory = memory
        self.tenant_of = tenant_of
        self.max_tokens = max_tokens
        self.tools = mcp_tools()
        self.names = frozenset(tool.name for tool in self.tools)

    def server(self) -> Server[Any]:
        """The SDK's server answering ``tools/list`` and ``tools/call``."""
        return Server(
            NAME,
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.tools)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name not in self.names:
            raise MCPError(
                types.INVALID_PARAMS,
                f"unknown tool {params.name!r}; the tools: {', '.join(sorted(self.names))}",
            )
        tenant = self.tenant_of(ctx)
        return await self._run(self.answer, tenant, params.name, params.arguments or {})

    async def _run(self, work: Callable[..., T], *args: Any) -> T:
        """Store work on the loop when the store answers from this process (SQLite, RAM),
        on a worker thread when it waits on a network (PostgreSQL), as the service does."""
        if self.memory.in_process:
            return work(*args)
        return await anyio.to_thread.run_sync(partial(work, *args))

    def answer(self, tenant: str, name: str, arguments: Mapping[str, Any]) -> types.CallToolResult:
        """Tool ``name`` called by ``tenant`` with ``arguments``, as an MCP result; a store
        that does not answer is a tool error too (the model may try again later)."""
        try:
            return self._answer(tenant, name, arguments)
        except NotFound:  # deleted while it was read
            return _error(f"no session {arguments.get('session')!r}", "session")
        except StoreError as exc:
            return _error(f"the store did not answer: {redact(str(exc))}", None)

    def _answer(self, tenant: str, name: str, arguments: Mapping[str, Any]) -> types.CallToolResult:
        given = dict(arguments)
        session_id = given.pop("session", None)
        view = given.pop("view", None)
        try:
            check_api_name(session_id, "session")
            if view is not None:
                check_api_name(view, "view")
            session = self.memory.existing_session(store_id(tenant, session_id))
        except InvalidInput as exc:
            return _error(exc.reason, exc.field or "arguments")
        except NotFound:
            return _error(f"no session {session_id!r}", "session")
        if view is not None and session.view_record(view) is None:
            known = ", ".join(repr(v) for v in session.views()) or "none"
            return _error(
                f"session {session_id!r} has no view {view!r} (its views: {known})", "view"
            )
        tools = RecallTools(session, view or DEFAULT_VIEW, max_tokens=self.max_tokens)
        text = tools.answer(name, given)
        result = json.loads(text)
        return types.CallToolResult(
            content=[types.TextContent(text=text)],
            structured_content=result,
            is_error="error" in result,
        )


def _error(reason: str, field: str | None) -> types.CallToolResult:
    """A tool error as ``RecallTools`` words a model's mistake: ``{"error", "field"}``."""
    result = {"error": reason, "field": field}
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(result, ensure_ascii=False))],
        structured_content=result,
        is_error=True,
    )


# -- stdio ----------------------------------------------------------------------


async def serve_stdio(memory: Memory, tenant: str, *, max_tokens: int) -> None:
    """Answer one MCP client on this process's stdin and stdout, as ``tenant``."""
    server = RecallServer(memory, lambda ctx: tenant, max_tokens=max_tokens).server()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


# -- streamable HTTP ------------------------------------------------------------


def tenant_of_request(ctx: ServerRequestContext[Any, Any]) -> str:
    """The tenant the key check (``KeyedApp``) found for the HTTP request of ``ctx``."""
    request = ctx.request
    tenant = request.scope.get(TENANT_SCOPE) if isinstance(request, Request) else None
    if not isinstance(tenant, str):  # a request that did not pass the key check
        raise MCPError(types.INVALID_REQUEST, "an API key is required")
    return tenant


class KeyedApp:
    """An ASGI app that lets through only requests with a valid API key (read as the
    service reads it: ``Authorization: Bearer``, else ``x-api-key``), with the key's
    tenant in their scope; others get the service's 401 JSON."""

    def __init__(self, app: ASGIApp, memory: Memory, keys: KeyCache) -> None:
        self.app = app
        self.memory = memory
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # the lifespan: no request to check
            await self.app(scope, receive, send)
            return
        key = bearer(Request(scope))
        try:
            if self.memory.in_process:
                tenant = self.keys.tenant(self.memory, key)
            else:
                tenant = await anyio.to_thread.run_sync(self.keys.tenant, self.memory, key)
        except ServiceError as exc:
            await _refuse(exc, send)
            return
        await self.app({**scope, TENANT_SCOPE: tenant}, receive, send)


async def _refuse(exc: ServiceError, send: Send) -> None:
    body = json.dumps(
        {"error": {"code": exc.code, "message": exc.message, "field": None, "index": None}}
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *((k.lower().encode(), v.encode()) for k, v in (exc.headers or {}).items()),
    ]
    await send({"type": "http.response.start", "status": exc.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def http_app(memory: Memory, *, host: str, max_tokens: int, key_cache_s: float = 1.0) -> ASGIApp:
    """The streamable HTTP app at ``/mcp``: stateless, JSON answers, behind the key check."""
    server = RecallServer(memory, tenant_of_request, max_tokens=max_tokens).server()
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH, stateless_http=True, json_response=True, host=host
    )
    return KeyedApp(app, memory, KeyCache(key_cache_s))


def serve_http(memory: Memory, *, host: str, port: int, max_tokens: int) -> None:
    """Serve ``http_app`` with uvicorn until SIGTERM or SIGINT."""
    app = http_app(memory, host=host, max_tokens=max_tokens)
    server = uvicorn.Server(
        uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
    )
    # uvicorn replays the signals it caught once it returns: they reach its handler
    # again instead of ending the process before the store is closed.
    signals = (signal.SIGINT, signal.SIGTERM)
    before = {sig: signal.signal(sig, server.handle_exit) for sig in signals}
    try:
        server.run()
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
