"""``/api/v1/sessions``: create, list, get, delete sessions; append and page their log."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from contextfold.server.auth import Tenant
from contextfold.server.service import ServiceDep

router = APIRouter(prefix="/api/v1/sessions", tags=["sessions"])


class SessionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(None, pattern=r"^[A-Za-z0-9._:@-]{1,128}$")
    system: str | None = None
    meta: dict[str, Any] | None = None
    encoding: str | None = None


class SessionOut(BaseModel):
    id: str
    encoding: str
    meta: dict[str, Any]
    created_at: float
    last_seq: int
    messages: int
    tokens: int
    last_at: float


@router.post("", status_code=201)
async def create_session(body: SessionIn, svc: ServiceDep, tenant: Tenant) -> SessionOut:
    session_id = body.id or uuid.uuid4().hex
    session = svc.create(
        tenant, session_id, system=body.system, meta=body.meta, encoding=body.encoding
    )
    record = svc.store.get_session(session.id)
    logged = svc.store.messages(session.id)
    return SessionOut(
        id=session_id,
        encoding=record.encoding,
        meta=record.meta,
        created_at=record.created_at,
        last_seq=logged[-1].seq if logged else 0,
        messages=len(logged),
        tokens=sum(m.tokens for m in logged),
        last_at=logged[-1].created_at if logged else record.created_at,
    )
