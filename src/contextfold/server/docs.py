"""The API docs at ``/docs``: Swagger UI from files shipped in the package, not a CDN.

FastAPI's own ``/docs`` loads Swagger UI from jsDelivr, so it is blank on a
machine without internet. Here the page and its two assets (swagger-ui-dist
5.35.0 from npm, Apache-2.0: ``static/swagger/LICENSE`` and ``NOTICE``) come
from the app itself. Like the web page, they need no API key: the spec they
show is public (``/openapi.json``); the operations they try need one. ReDoc
(``/redoc``) is off: it too would load from a CDN.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from typing import Final

from fastapi import APIRouter
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response

from contextfold.server.errors import ServiceError

DOCS_URL: Final = "/docs"
ASSETS_URL: Final = "/docs/assets"
_TYPES: Final = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
}
_HEADERS: Final = {
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "public, max-age=86400",
}

router = APIRouter(include_in_schema=False)


@cache
def _asset(name: str) -> bytes:
    """A shipped asset, read on its first request (the bundle is 1.7 MB)."""
    return files("contextfold.server").joinpath("static", "swagger", name).read_bytes()


@router.get(DOCS_URL)
def docs() -> HTMLResponse:
    """Swagger UI over this app's ``/openapi.json``, every file from this app."""
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="contextfold API",
        swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
        swagger_favicon_url="/static/favicon.svg",
    )


@router.get(f"{ASSETS_URL}/{{name}}")
def asset(name: str) -> Response:
    if name not in _TYPES:
        raise ServiceError(404, "not_found", f"no docs file {name!r}", field="name")
    return Response(_asset(name), media_type=_TYPES[name], headers=_HEADERS)
