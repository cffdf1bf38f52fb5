"""The tenant of a request, from its API key (``server.keys``): FastAPI dependencies.

The tenant comes from the key alone, never from the request; with auth off
(loopback only) every request is tenant ``local``. A request is checked once,
through the key cache; a stream that outlives its request re-checks its key in
the store (``StreamKey.valid``) so a revoked key's streams end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

from contextfold.server.errors import ServiceError
from contextfold.server.keys import tenant_of_key
from contextfold.server.settings import LOCAL_TENANT

if TYPE_CHECKING:
    from contextfold.server.service import Service


def bearer(request: Request) -> str | None:
    """The request's key: ``Authorization: Bearer``, else ``x-api-key`` (as Anthropic's SDK
    sends it)."""
    header = request.headers.get("authorization")
    if not header:
        return request.headers.get("x-api-key") or None
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


def _service(request: Request) -> Service:
    found: Service = request.app.state.service
    return found


async def tenant(request: Request) -> str:
    """The request's tenant, from its bearer key (a FastAPI dependency).

    ``async`` so FastAPI calls it on the loop: a plain ``def`` dependency costs a
    hop through the thread pool on every request.
    """
    svc = _service(request)
    if not svc.settings.auth:
        return LOCAL_TENANT
    return svc.keys.tenant(svc.memory, bearer(request))


def _stream_key(request: Request) -> str | None:
    return bearer(request) or request.query_params.get("api_key")


async def stream_tenant(request: Request) -> str:
    """As ``tenant``, also reading ``?api_key=``: a browser's EventSource cannot send headers."""
    svc = _service(request)
    if not svc.settings.auth:
        return LOCAL_TENANT
    return svc.keys.tenant(svc.memory, _stream_key(request))


class StreamKey:
    """The key a stream was opened with, checked again in the store (not the cache)."""

    def __init__(self, svc: Service, key: str | None) -> None:
        self.svc = svc
        self.key = key

    async def valid(self) -> bool:
        """False once the key is revoked (or gone); always True with auth off."""
        if not self.svc.settings.auth:
            return True
        try:
            await self.svc.run(tenant_of_key, self.svc.memory, self.key)
        except ServiceError:
            return False
        return True


async def stream_key(request: Request) -> StreamKey:
    """The stream's key, to re-check while it is open (a FastAPI dependency)."""
    return StreamKey(_service(request), _stream_key(request))


Tenant = Annotated[str, Depends(tenant)]
StreamTenant = Annotated[str, Depends(stream_tenant)]
OpenStreamKey = Annotated[StreamKey, Depends(stream_key)]
