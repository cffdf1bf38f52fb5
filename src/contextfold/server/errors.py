"""Errors as JSON, mapped in one place.

Every error answer is ``{"error": {"code", "message", "field", "index"}}``, with
a stable ``code``:

=====================  ======  ===============================================
code                   status  raised for
=====================  ======  ===============================================
invalid_input          422     ``InvalidInput`` (its field and index), a body
                               or parameter the request models refuse, a
                               body that is not JSON
budget_too_small       422     ``BudgetError``
not_found              404     ``NotFound``, an unknown route, another
                               tenant's session
conflict               409     ``FoldConflict``/``ViewConflict``, an
                               idempotency key reused with another body
unauthorized           401     a missing, unknown or revoked API key
payload_too_large      413     a body over the size limit
unsupported_media_type 415     a body not declared ``application/json``
host_not_allowed       421     with auth off (``--no-auth``, ``--demo``), a
                               ``Host`` that is not a loopback name: a page
                               reached by DNS rebinding
method_not_allowed     405     a known route, another method
store_unavailable      503     any other ``StoreError``
broker_unavailable     503     compact with workers while their Redis
                               does not answer (nothing was queued)
upstream_error         502     ``ModelError``
internal_error         500     a bug: logged with its traceback
=====================  ======  ===============================================

The proxy and the page raise library errors or ``ServiceError`` and get the
same shape.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from contextfold.core.errors import (
    BudgetError,
    ContextfoldError,
    InvalidInput,
    ModelError,
    NotFound,
    StoreError,
    VersionConflict,
)
from contextfold.redact import redact

log = logging.getLogger("contextfold.server")


class ServiceError(Exception):
    """An error with its HTTP status and code, for what the library has no error for."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        index: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.index = index
        self.headers = headers
        super().__init__(message)


def printable(text: str) -> str:
    """``text`` as UTF-8 can carry it: a lone surrogate quoted from bad input becomes ``\\udXXX``."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def error_body(
    code: str, message: str, field: str | None = None, index: int | None = None
) -> dict[str, Any]:
    # A message may quote a URL (an unreachable upstream, a store): never its password. It
    # may quote the bad input too, lone surrogates included, which no JSON answer can hold.
    return {
        "error": {
            "code": code,
            "message": printable(redact(message)),
            "field": None if field is None else printable(field),
            "index": index,
        }
    }


def error_response(error: ServiceError) -> JSONResponse:
    return JSONResponse(
        error_body(error.code, error.message, error.field, error.index),
        status_code=error.status,
        headers=error.headers,
    )


def from_library(exc: ContextfoldError) -> ServiceError:
    """The HTTP face of a library error."""
    if isinstance(exc, InvalidInput):
        return ServiceError(422, "invalid_input", str(exc), exc.field, exc.index)
    if isinstance(exc, BudgetError):
        return ServiceError(422, "budget_too_small", str(exc), "budget")
    if isinstance(exc, NotFound):
        return ServiceError(404, "not_found", str(exc))
    if isinstance(exc, VersionConflict):
        return ServiceError(409, "conflict", str(exc), "expected_version")
    if isinstance(exc, StoreError):
        return ServiceError(503, "store_unavailable", f"the store failed: {exc}")
    if isinstance(exc, ModelError):
        return ServiceError(502, "upstream_error", str(exc))
    return ServiceError(500, "internal_error", str(exc))


def field_of(loc: Sequence[Any]) -> tuple[str | None, int | None]:
    """A pydantic error location as the library names a field: ``messages[2].role``.

    The location's first part (body, query, path, header) is dropped; the index
    of a message in ``messages`` becomes ``index`` as the library reports it.
    """
    parts = list(loc[1:]) if loc and loc[0] in ("body", "query", "path", "header") else list(loc)
    index = None
    if len(parts) >= 2 and parts[0] == "messages" and isinstance(parts[1], int):
        index = parts[1]
    name = ""
    for part in parts:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name or None, index


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 401: "unauthorized"}


def raised_answer(exc: Exception, method: str, path: str) -> JSONResponse:
    """The answer to what a handler's work raised: a ``ServiceError``, a library error, or
    a bug (logged with its traceback, answered 500 with nothing of it)."""
    if isinstance(exc, ServiceError):
        return error_response(exc)
    if isinstance(exc, ContextfoldError):
        error = from_library(exc)
        if error.status >= 500:
            log.error("%s %s failed: %s", method, path, exc)
        return error_response(error)
    log.exception("%s %s failed", method, path, exc_info=exc)
    return error_response(ServiceError(500, "internal_error", "internal error"))


def install(app: FastAPI) -> None:
    """Map every error the app can meet to the one JSON shape."""

    async def raised(request: Request, exc: Exception) -> JSONResponse:
        return raised_answer(exc, request.method, request.url.path)

    async def validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        field, index = field_of(first.get("loc", ()))
        message = str(first.get("msg", "invalid request"))
        if field:
            message = f"{field}: {message}"
        return error_response(ServiceError(422, "invalid_input", message, field, index))

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 400:  # FastAPI's answer to a body that is not JSON
            return error_response(
                ServiceError(422, "invalid_input", f"body: {exc.detail}", field="body")
            )
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        return error_response(
            ServiceError(exc.status_code, code, str(exc.detail), headers=dict(exc.headers or {}))
        )

    app.add_exception_handler(ServiceError, raised)
    app.add_exception_handler(ContextfoldError, raised)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, raised)
