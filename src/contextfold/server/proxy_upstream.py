"""The upstream the proxy forwards to: one shared ``httpx.AsyncClient`` with keep-alive.

The server is started with ``--upstream openai-compatible:URL`` (URL is the
base the OpenAI SDK would take, ending in ``/v1`` for most servers); the key is
read from the server's environment, never taken from the client. What the
upstream answers goes back to the client unchanged, except where the answer
is the server's fault rather than the client's (``failure_of``).
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from contextfold.core.errors import InvalidInput
from contextfold.redact import redact

SCHEME = "openai-compatible:"
# Headers of an upstream answer worth passing on: the body's type, the request
# id a user quotes to the provider, rate limits and the retry hint an SDK obeys.
_PASSED = frozenset({"content-type", "retry-after", "x-request-id", "request-id"})
_PASSED_PREFIXES = ("openai-", "x-ratelimit-")
_BODY_IN_ERROR = 2000


def parse_upstream(spec: str) -> str:
    """The base URL of an ``openai-compatible:URL`` spec, without a trailing slash."""
    if not isinstance(spec, str) or not spec.startswith(SCHEME):
        raise InvalidInput(
            f"upstream must be 'openai-compatible:URL', not {redact(str(spec))!r}", field="upstream"
        )
    url = spec[len(SCHEME) :].rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise InvalidInput(
            f"upstream URL must start with http:// or https://, not {redact(url)!r}",
            field="upstream",
        )
    return url


class UpstreamError(Exception):
    """The upstream could not give an answer the client should see as is (HTTP 502)."""

    def __init__(self, reason: str, status: int | None = None) -> None:
        self.reason = reason
        self.status = status
        super().__init__(reason)


def failure_of(status: int, body: bytes) -> UpstreamError | None:
    """Whether an upstream status is the server's failure (502) or the client's answer.

    2xx and most 4xx go back unchanged: a bad parameter, an unknown model, a
    context too long, a rate limit (with its retry-after) are the client's to
    see, and its SDK raises the matching error. 5xx is the upstream failing,
    and 401/403/407 mean the server's own upstream key was refused; passed on,
    they would tell the client its contextfold key was wrong.
    """
    if status < 400 or (status < 500 and status not in (401, 403, 407)):
        return None
    text = body[:_BODY_IN_ERROR].decode("utf-8", "replace")
    return UpstreamError(f"upstream answered HTTP {status}: {text}", status)


def passed_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {
        k: v
        for k, v in headers.items()
        if k.lower() in _PASSED or k.lower().startswith(_PASSED_PREFIXES)
    }


class Upstream:
    """An OpenAI-compatible server, reached through one pooled async client."""

    def __init__(self, base_url: str, *, api_key: str | None, timeout_s: float) -> None:
        self.base_url = base_url
        # Every request the proxy sends is JSON or has no body; set once, with the URLs
        # parsed once, building a request costs a third less.
        headers = {"content-type": "application/json"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self._urls: dict[str, httpx.URL] = {}
        self.client = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
        )

    async def send(self, method: str, path: str, body: bytes | None = None) -> httpx.Response:
        """Send and return the response with its body still to read (stream it or ``aread``).

        A connection refused, a timeout or a broken exchange is an ``UpstreamError``.
        """
        url = self._urls.get(path)
        if url is None:
            url = self._urls.setdefault(path, httpx.URL(self.base_url + path))
        request = self.client.build_request(method, url, content=body)
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

    async def aclose(self) -> None:
        await self.client.aclose()
