"""``/api/v1/sessions``: create, list, get and delete sessions; append to and page their log.

Handlers are thin: parse (the models), call the library, answer. The hot ones
(append, history) build their JSON from the records directly instead of
through response models: the models still describe them in the spec.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import StreamingResponse

from contextfold.core.errors import InvalidInput
from contextfold.server.auth import OpenStreamKey, StreamTenant, Tenant
from contextfold.server.idempotency import append_idempotent
from contextfold.server.models import (
    ERRORS,
    SESSION_ID_PATTERN,
    Appended,
    BranchList,
    History,
    LoggedOut,
    MessagesIn,
    SessionIn,
    SessionList,
    SessionOut,
    SessionPath,
)
from contextfold.server.responses import FastJSON
from contextfold.server.service import Service, ServiceDep

router = APIRouter(prefix="/api/v1/sessions", tags=["sessions"], responses=ERRORS)

PAGE = 50
MAX_PAGE = 500
HISTORY_PAGE = 200
MAX_HISTORY_PAGE = 1000
KEEPALIVE_S = 15.0
TICK_S = 0.5


@router.post("", status_code=201)
async def create_session(body: SessionIn, svc: ServiceDep, tenant: Tenant) -> SessionOut:
    """Create a session, with its system prompt as message 1; 409 if the id is taken."""
    session_id = body.id or uuid.uuid4().hex

    def create() -> SessionOut:
        session = svc.create(
            tenant, session_id, system=body.system, meta=body.meta, encoding=body.encoding
        )
        return SessionOut.of(session_id, session.info())

    return await svc.run(create)


@router.get("")
async def list_sessions(
    svc: ServiceDep,
    tenant: Tenant,
    q: Annotated[str | None, Query(max_length=128, description="substring of the id")] = None,
    after: Annotated[str | None, Query(pattern=SESSION_ID_PATTERN)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = PAGE,
) -> SessionList:
    """The tenant's sessions by id, a page at a time."""
    prefix = f"{tenant}/"

    def listing() -> SessionList:
        ids = svc.memory.sessions(
            prefix,
            after=None if after is None else prefix + after,
            limit=limit + 1,
            search=q or None,
        )
        page = [SessionOut.of(sid[len(prefix) :], svc.memory.session_info(sid)) for sid in ids]
        more = len(page) > limit
        return SessionList(sessions=page[:limit], next=page[limit - 1].id if more else None)

    return await svc.run(listing)


@router.get("/{sid}")
async def get_session(sid: SessionPath, svc: ServiceDep, tenant: Tenant) -> SessionOut:
    def get() -> SessionOut:
        session = svc.session(tenant, sid)
        return SessionOut.of(sid, session.info())

    return await svc.run(get)


@router.delete("/{sid}", status_code=204)
async def delete_session(sid: SessionPath, svc: ServiceDep, tenant: Tenant) -> Response:
    """Delete the session: its log, views and folds. It cannot be undone."""
    await svc.run(svc.delete, tenant, sid)
    return Response(status_code=204)


@router.post("/{sid}/messages", status_code=201, response_model=Appended)
async def append_messages(
    sid: SessionPath,
    body: MessagesIn,
    svc: ServiceDep,
    tenant: Tenant,
    idempotency_key: Annotated[
        str | None,
        Header(
            min_length=1,
            max_length=200,
            description="a retry with the same key stores nothing new and gets the same records",
        ),
    ] = None,
) -> FastJSON:
    """Append one message or a batch, all or none: after the newest message, or after
    ``parent`` (a branch when that is not a branch's last message)."""
    records = await append_records(svc, tenant, sid, body, idempotency_key)
    return FastJSON({"messages": records}, status_code=201)


async def append_records(
    svc: Service, tenant: str, sid: str, body: MessagesIn, idempotency_key: str | None
) -> list[dict[str, Any]]:
    """The append's work, shared with ``server.hot``: the records as the answer lists them."""
    messages = [m.model_dump(exclude_unset=True) for m in body.messages]

    def append() -> list[dict[str, Any]]:
        session = svc.session(tenant, sid)
        try:
            if idempotency_key is None:
                logged = session.extend(messages, parent=body.parent)
            else:
                logged = append_idempotent(session, messages, idempotency_key, body.parent)
        except InvalidInput as exc:
            raise svc.in_batch(session, exc, body.parent) from None
        return [LoggedOut.data(r) for r in logged]

    records = await svc.run(append)
    svc.metrics.appended.inc(len(records))
    return records


@router.get("/{sid}/messages", response_model=History)
async def history(
    sid: SessionPath,
    svc: ServiceDep,
    tenant: Tenant,
    after: Annotated[int, Query(ge=0, description="the last seq already read")] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_HISTORY_PAGE)] = HISTORY_PAGE,
    branch: Annotated[
        int | None, Query(ge=0, description="only this branch's messages (its head seq)")
    ] = None,
) -> FastJSON:
    """The whole log, never folded, by seq (every branch's; with ``branch``, that
    branch's alone): messages after ``after``, each with its ``parent``."""

    def read() -> dict[str, Any]:
        session = svc.session(tenant, sid)
        page = session.messages(after=after, limit=limit + 1, branch=branch)
        more = len(page) > limit
        page = page[:limit]
        return {
            "messages": [LoggedOut.data(r) for r in page],
            "next_after": page[-1].seq if more else None,
        }

    return FastJSON(await svc.run(read))


@router.get("/{sid}/branches", response_model=BranchList)
async def branches(sid: SessionPath, svc: ServiceDep, tenant: Tenant) -> FastJSON:
    """The log's branches, newest head first: a regenerated answer or an edited message
    starts one; each is named by its head seq."""

    def read() -> dict[str, Any]:
        found = svc.session(tenant, sid).branches()
        return {"branches": [asdict(b) for b in found]}

    return FastJSON(await svc.run(read))


@router.get(
    "/{sid}/events",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "server-sent events"}},
)
async def events(
    sid: SessionPath,
    request: Request,
    svc: ServiceDep,
    tenant: StreamTenant,
    key: OpenStreamKey,
    api_key: Annotated[
        str | None, Query(description="the API key, for clients that cannot send headers")
    ] = None,
) -> StreamingResponse:
    """Server-sent events of the session: appended, planned, committed, failed, degraded,
    quarantined, budget (the budget a proxy view was made with, and how it was
    found), truncated (a proxied stream the upstream cut short) and recall (a round of
    recall tool calls the proxy answered for the upstream model). A comment line
    comes first once the stream listens, then one every 15 s while nothing happens.
    The stream ends within a second of its key's revocation, and no event is sent
    once the key is revoked."""
    session = await svc.run(svc.session, tenant, sid)

    async def stream() -> AsyncIterator[str]:
        subscription = svc.hub.subscribe(session.id)
        last_seq = await svc.run(session.last_seq)
        svc.metrics.streams.inc()
        try:
            yield f": listening, last_seq {last_seq}\n\n"
            quiet = 0.0
            while not subscription.closed:
                event = await subscription.get(TICK_S)
                if not await key.valid():
                    return
                if event is None:
                    # A gone client is noticed here, not only at the next write.
                    if await request.is_disconnected():
                        return
                    quiet += TICK_S
                    if quiet >= KEEPALIVE_S:
                        quiet = 0.0
                        yield ": keepalive\n\n"
                    continue
                quiet = 0.0
                data = json.dumps(event["data"], ensure_ascii=False, separators=(",", ":"))
                yield f"event: {event['event']}\ndata: {data}\n\n"
        finally:
            subscription.close()
            svc.metrics.streams.dec()

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
