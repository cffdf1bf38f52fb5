"""The upstream the proxy forwards to: one shared ``httpx.AsyncClient`` with keep-alive.

The server is started with ``--upstream openai-compatible:URL`` (URL is the
base the OpenAI SDK would take, ending in ``/v1`` for most servers) and/or
``--upstream anthropic:URL`` (the Anthropic SDK's base, e.g.
``https://api.anthropic.com/v1``): each wire format goes to the upstream of
its kind. Each key is read from the server's environment, never taken from
the client: sent as ``Authorization: Bearer`` to an OpenAI-compatible server,
as ``x-api-key`` to Anthropic. A successful
answer goes back to the client unchanged. An error answer never does: its body
may quote the server's key or another tenant's request, so the client gets the
status and a fixed message (``failure_of``, ``refusal_body``) and the body goes
to the server's log with secrets masked (``Upstream.scrub``). The client keeps
no cookie either: the shared client has no cookie jar, so what one tenant's
answer set is never sent with another's call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from http.cookiejar import CookieJar, DefaultCookiePolicy

import httpx

from contextfold.core.errors import InvalidInput
from contextfold.redact import MASK, redact

KINDS = {"openai-compatible:": "openai", "anthropic:": "anthropic"}
"""An upstream spec's prefix, and the kind of upstream (the wire formats it serves) it names."""
# Headers of an upstream answer worth passing on: the body's type, the request
# id a user quotes to the provider, rate limits and the retry hint an SDK obeys.
_PASSED = frozenset({"content-type", "retry-after", "x-request-id", "request-id"})
_PASSED_PREFIXES = ("openai-", "x-ratelimit-", "anthropic-ratelimit-")
_BODY_LOGGED = 2000
_BODY_READ = 1 << 16  # of an error body, read for the log before it is cut
# A value of an upstream's error body the client may see: a plain lowercase word or
# words (``context_length_exceeded``), no digits, nothing a key or an id looks like.
_TOKEN = re.compile(r"[a-z][a-z_.]{0,63}")
_BEARER = re.compile(r"(?i)(bearer|basic)\s+[^\s\"',;]+")


def parse_upstream(spec: str) -> tuple[str, str]:
    """The kind (``openai`` or ``anthropic``) and base URL, without a trailing slash, of an
    ``openai-compatible:URL`` or ``anthropic:URL`` spec."""
    prefix = next((p for p in KINDS if isinstance(spec, str) and spec.startswith(p)), None)
    if prefix is None:
        raise InvalidInput(
            f"upstream must be 'openai-compatible:URL' or 'anthropic:URL', not "
            f"{redact(str(spec))!r}",
            field="upstream",
        )
    url = spec[len(prefix) :].rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise InvalidInput(
            f"upstream URL must start with http:// or https://, not {redact(url)!r}",
            field="upstream",
        )
    return KINDS[prefix], url


class UpstreamError(Exception):
    """The upstream could not give an answer the client should see as is (HTTP 502)."""

    def __init__(self, reason: str, status: int | None = None) -> None:
        self.reason = reason
        self.status = status
        super().__init__(reason)


def failure_of(status: int) -> UpstreamError | None:
    """Whether an upstream status is the server's failure (502) or the client's answer.

    2xx and most 4xx go back with their status: a bad parameter, an unknown
    model, a context too long, a rate limit (with its retry-after) are the
    client's to see, and its SDK raises the matching error. 5xx is the upstream
    failing, and 401/403/407 mean the server's own upstream key was refused;
    passed on, they would tell the client its contextfold key was wrong. The
    reason is fixed: an upstream's body is never quoted to a client.
    """
    if status < 400 or (status < 500 and status not in (401, 403, 407)):
        return None
    if status in (401, 403, 407):
        return UpstreamError(
            f"upstream answered HTTP {status}: it refused this server's own credentials "
            "(the server's upstream key); the server's log says more",
            status,
        )
    return UpstreamError(f"upstream answered HTTP {status}; the server's log says more", status)


def refusal_body(status: int, body: bytes, secrets: Iterable[str] = ()) -> bytes:
    """What a client sees of an upstream's 4xx: an OpenAI error with a fixed message.

    Only the error's ``type``, ``code`` and ``param`` are kept, and only when
    each is a plain lowercase word (``context_length_exceeded``) that is no part
    of a secret; the SDK raises the same error class from the status.
    """
    hidden = [s for s in secrets if s]
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        error = None
    kept: dict[str, str | None] = {}
    for key in ("type", "code", "param"):
        value = error.get(key) if isinstance(error, dict) else None
        if isinstance(value, str) and _TOKEN.fullmatch(value) is not None:
            kept[key] = None if any(value in s for s in hidden) else value
        else:
            kept[key] = None
    said = f", code {kept['code']}" if kept["code"] else ""
    message = f"the upstream refused the request (HTTP {status}{said})"
    return json.dumps({"error": {"message": message, **kept}}).encode()


def passed_headers(headers: Mapping[str, str], secrets: Iterable[str] = ()) -> dict[str, str]:
    """The answer's headers a client may see: never a cookie, never one quoting a secret."""
    hidden = [s for s in secrets if s]
    return {
        k: v
        for k, v in headers.items()
        if (k.lower() in _PASSED or k.lower().startswith(_PASSED_PREFIXES))
        and not any(s in v for s in hidden)
    }


def mask_secrets(data: bytes, secrets: Iterable[str]) -> bytes:
    """``data`` with each secret in it replaced by ``***``: what an upstream echoes of the
    server's key never reaches a client, even in an answer passed on as is."""
    for secret in secrets:
        if secret and secret.encode() in data:
            data = data.replace(secret.encode(), MASK.encode())
    return data


class _NoCookies(DefaultCookiePolicy):
    """A jar policy that keeps no cookie and sends none."""

    def set_ok(self, cookie: object, request: object) -> bool:
        return False

    def return_ok(self, cookie: object, request: object) -> bool:
        return False


class Upstream:
    """A model server of one kind (``openai`` or ``anthropic``), reached through one pooled
    async client."""

    def __init__(
        self, base_url: str, *, api_key: str | None, timeout_s: float, kind: str = "openai"
    ) -> None:
        self.base_url = base_url
        self.kind = kind
        self.secrets: tuple[str, ...] = (api_key,) if api_key else ()
        """What no client may see and no log may hold: the server's upstream key."""
        # Every request the proxy sends is JSON or has no body; set once, with the URLs
        # parsed once, building a request costs a third less.
        headers = {"content-type": "application/json"}
        if api_key and kind == "anthropic":
            headers["x-api-key"] = api_key
        elif api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self._urls: dict[str, httpx.URL] = {}
        self.client = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
            cookies=CookieJar(policy=_NoCookies()),
        )

    async def send(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """Send (with ``headers`` added) and return the response with its body still to read
        (stream it or ``aread``).

        A connection refused, a timeout or a broken exchange is an ``UpstreamError``.
        """
        url = self._urls.get(path)
        if url is None:
            url = self._urls.setdefault(path, httpx.URL(self.base_url + path))
        request = self.client.build_request(method, url, content=body, headers=headers)
        try:
            return await self.client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            raise UpstreamError(redact(f"upstream timed out: {type(exc).__name__} {exc}")) from exc
        except httpx.HTTPError as exc:
            raise UpstreamError(
                redact(f"upstream unreachable at {self.base_url}: {type(exc).__name__} {exc}")
            ) from exc

    async def read(self, response: httpx.Response) -> bytes:
        """The whole body; a body cut short or too slow is an ``UpstreamError``."""
        try:
            return await response.aread()
        except httpx.TimeoutException as exc:
            raise UpstreamError(f"upstream timed out: {type(exc).__name__} {exc}") from exc
        except httpx.HTTPError as exc:
            raise UpstreamError(f"upstream answer broken: {type(exc).__name__} {exc}") from exc
        finally:
            await response.aclose()

    def scrub(self, body: bytes) -> str:
        """An upstream's body as the server's log may keep it: the server's key, credentials
        after ``Bearer``/``Basic`` and URL passwords masked, then cut to 2,000 characters
        (masked first, so no part of a key is left at the cut)."""
        text = redact(mask_secrets(body[:_BODY_READ], self.secrets).decode("utf-8", "replace"))
        return _BEARER.sub(lambda m: f"{m[1]} {MASK}", text)[:_BODY_LOGGED]

    async def aclose(self) -> None:
        await self.client.aclose()
