"""The web page: one HTML shell at ``/`` and ``/sessions/{sid}``, and its files.

The page is static (plain HTML, CSS and JavaScript modules shipped in the
package, no build step, nothing from a CDN). Everything it shows it reads from
``/api/v1`` with the key the user gives it, so it sees exactly what that key may
see: the tenant rules live in the API alone. Log text is put in the page as
text nodes, never parsed as HTML, and the content security policy allows no
inline script and no other origin.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Final

from fastapi import APIRouter
from fastapi.responses import Response

from contextfold.server.errors import ServiceError

_TYPES: Final = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}
_POLICY: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
    "form-action 'self'"
)
_HEADERS: Final = {
    "Content-Security-Policy": _POLICY,
    "X-Content-Type-Options": "nosniff",
    # The event stream's URL carries the key (?api_key=): never send it elsewhere.
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _load_assets() -> dict[str, tuple[bytes, str]]:
    """Every shipped file by name, read once: a request can name only these."""
    folder = files("contextfold.server").joinpath("static")
    assets: dict[str, tuple[bytes, str]] = {}
    for entry in folder.iterdir():
        suffix = entry.name[entry.name.rfind(".") :]
        if entry.is_file() and suffix in _TYPES:
            assets[entry.name] = (entry.read_bytes(), _TYPES[suffix])
    return assets


_ASSETS: Final = _load_assets()

router = APIRouter(include_in_schema=False)


def _asset(name: str) -> Response:
    body, media_type = _ASSETS[name]
    return Response(body, media_type=media_type, headers=_HEADERS)


@router.get("/")
def sessions_page() -> Response:
    """The sessions list (the shell; the script reads ``?q=``)."""
    return _asset("index.html")


@router.get("/sessions/{sid}")
def session_page() -> Response:
    """One session: the same shell; the script reads the id from the path."""
    return _asset("index.html")


@router.get("/static/{name}")
def static_file(name: str) -> Response:
    if name not in _ASSETS:
        raise ServiceError(404, "not_found", f"no page file {name!r}", field="name")
    return _asset(name)
