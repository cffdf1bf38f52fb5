"""The in-memory store's API keys (``ServiceStore``), kept apart from the sessions.

``RAMStore`` inherits them; they have their own lock, since no call touches
keys and sessions at once.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from contextfold.core.errors import InvalidInput
from contextfold.core.log import ApiKey
from contextfold.store.checks import check_api_key


class KeyRing:
    """API keys by id, in a dict behind their own lock."""

    def __init__(self) -> None:
        self._keys_lock = threading.Lock()
        self._api_keys: dict[str, ApiKey] = {}

    def put_api_key(self, key: ApiKey) -> None:
        check_api_key(key)
        with self._keys_lock:
            if key.id in self._api_keys:
                raise InvalidInput(f"an API key with id {key.id!r} exists", field="id")
            self._api_keys[key.id] = key

    def get_api_key(self, key_id: str) -> ApiKey | None:
        with self._keys_lock:
            return self._api_keys.get(key_id)

    def list_api_keys(self, tenant: str | None = None) -> list[ApiKey]:
        with self._keys_lock:
            keys = list(self._api_keys.values())
        return [k for k in keys if tenant is None or k.tenant == tenant]

    def revoke_api_key(self, key_id: str) -> bool:
        with self._keys_lock:
            key = self._api_keys.get(key_id)
            if key is None or key.revoked_at is not None:
                return False
            self._api_keys[key_id] = replace(key, revoked_at=time.time())
            return True
