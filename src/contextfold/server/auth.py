"""The tenant of a request, from its API key (``server.keys``): FastAPI dependencies.

The tenant comes from the key alone, never from the request; with auth off
(loopback only) every request is tenant ``local``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

from contextfold.server.settings import LOCAL_TENANT

if TYPE_CHECKING:
    from contextfold.server.service import Service


def bearer(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if not header:
        return None
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


async def stream_tenant(request: Request) -> str:
    """As ``tenant``, also reading ``?api_key=``: a browser's EventSource cannot send headers."""
    svc = _service(request)
    if not svc.settings.auth:
        return LOCAL_TENANT
    return svc.keys.tenant(svc.memory, bearer(request) or request.query_params.get("api_key"))


Tenant = Annotated[str, Depends(tenant)]
StreamTenant = Annotated[str, Depends(stream_tenant)]
