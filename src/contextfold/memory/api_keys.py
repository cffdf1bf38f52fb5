"""The service's API keys, reached through ``Memory.api_keys``.

The built-in stores keep them (``ServiceStore``); a user's store written for
the library only still serves the library, and the first key asked of it is
``InvalidInput`` naming what it lacks (``store.base.service_port``).
"""

from __future__ import annotations

from contextfold.core.log import ApiKey
from contextfold.store.base import Store, service_port


class ApiKeys:
    """The service's API keys in a store: records with the secret's hash, never the secret."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def put(self, key: ApiKey) -> None:
        """Store a new key; ``InvalidInput`` naming ``id`` if the id is taken."""
        service_port(self._store).put_api_key(key)

    def get(self, key_id: str) -> ApiKey | None:
        return service_port(self._store).get_api_key(key_id)

    def listing(self, tenant: str | None = None) -> list[ApiKey]:
        """Every key (or the tenant's), by creation time, revoked ones included."""
        return service_port(self._store).list_api_keys(tenant)

    def revoke(self, key_id: str) -> bool:
        """Mark the key revoked; False if there is no such key or it was revoked already."""
        return service_port(self._store).revoke_api_key(key_id)
