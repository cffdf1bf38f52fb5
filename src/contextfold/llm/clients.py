"""SDK clients made on first use: one sync client, one async client per event loop.

An async client's connections belong to the event loop that opened them, so a
client made under one ``asyncio.run()`` must not serve the next one.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable
from typing import Any


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
