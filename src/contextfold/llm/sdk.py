"""What the official SDKs (``openai``, ``anthropic``) share: client lifecycle and errors.

Clients are made on first use: one sync client, and one async client per event
loop, since an async client's connections belong to the loop that opened them.
Both SDKs raise the same tree of exceptions (``APIStatusError``,
``APITimeoutError``, ...), so ``translated_errors`` maps either at the boundary.
"""

from __future__ import annotations

import asyncio
import json
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from contextfold.core.errors import ModelError
from contextfold.llm.base import RetryableError, body_text, status_error


class SDKClients:
    def __init__(self, make_sync: Callable[[], Any], make_async: Callable[[], Any]) -> None:
        self._make_sync = make_sync
        self._make_async = make_async
        self._sync: Any = None
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def sync(self) -> Any:
        with self._lock:
            if self._sync is None:
                self._sync = self._make_sync()
            return self._sync

    def for_running_loop(self) -> Any:
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._async.get(loop)
            if client is None:
                client = self._make_async()
                self._async[loop] = client
            return client


class SDKProvider:
    """Base of the providers: where to reach the API, and its clients."""

    base_url: str
    _clients: SDKClients

    def client(self) -> Any:
        return self._clients.sync()

    def async_client(self) -> Any:
        return self._clients.for_running_loop()


@contextmanager
def translated_errors(
    name: str, timeout: float, sdk: ModuleType, root: type[Exception]
) -> Iterator[None]:
    """Map every exception of ``sdk`` (whose base class is ``root``) to ModelError or RetryableError."""
    try:
        yield
    except sdk.APIStatusError as exc:
        raise status_error(
            f"{name}: HTTP {exc.status_code}: {exc.message}",
            status=exc.status_code,
            body=body_text(exc.body),
            headers=exc.response.headers,
        ) from exc
    except sdk.APITimeoutError as exc:
        raise RetryableError(f"{name}: no answer within {timeout} s") from exc
    except sdk.APIConnectionError as exc:
        raise RetryableError(f"{name}: connection failed: {exc}") from exc
    except sdk.APIResponseValidationError as exc:
        raise ModelError(
            f"{name}: unexpected response: {exc.message}",
            status=exc.status_code,
            body=body_text(exc.body),
        ) from exc
    except root as exc:
        asks_again = getattr(sdk, "RetryableError", None)  # anthropic's middleware signal
        if asks_again is not None and isinstance(exc, asks_again):
            raise RetryableError(f"{name}: {exc}") from exc
        raise ModelError(f"{name}: {type(exc).__name__}: {exc}") from exc
    except json.JSONDecodeError as exc:
        # The SDKs read a JSON content type with json.loads and let this through.
        raise ModelError(f"{name}: response body is not JSON: {exc}") from exc
