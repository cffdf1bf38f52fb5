"""What a service keeps beside the logs, reached through ``Memory``: session listings
and figures, and API keys.

The built-in stores keep them; a user's store written for the library only
(``Store`` without these methods) still serves the library, and the first
listing or key asked of it is ``InvalidInput`` naming the missing methods, so
``contextfold serve`` over such a store says what it lacks instead of failing
on an attribute.
"""

from __future__ import annotations

from typing import Protocol, cast

from contextfold.core.errors import InvalidInput
from contextfold.core.log import ApiKey, SessionInfo

SERVICE_METHODS = (
    "list_sessions",
    "session_info",
    "put_api_key",
    "get_api_key",
    "list_api_keys",
    "revoke_api_key",
)


class ServiceStore(Protocol):
    """The store methods only the service calls (see ``contextfold.store.base.Store``)."""

    def list_sessions(
        self,
        prefix: str = "",
        *,
        after: str | None = None,
        limit: int | None = None,
        search: str | None = None,
    ) -> list[str]: ...

    def session_info(self, session_id: str) -> SessionInfo: ...

    def put_api_key(self, key: ApiKey) -> None: ...

    def get_api_key(self, key_id: str) -> ApiKey | None: ...

    def list_api_keys(self, tenant: str | None = None) -> list[ApiKey]: ...

    def revoke_api_key(self, key_id: str) -> bool: ...


def service_port(store: object) -> ServiceStore:
    """``store`` as the service's port; ``InvalidInput`` naming what it lacks."""
    missing = [name for name in SERVICE_METHODS if not callable(getattr(store, name, None))]
    if missing:
        raise InvalidInput(
            f"the store {type(store).__name__} keeps no listings or API keys for the "
            f"service: it lacks {', '.join(missing)}",
            field="store",
        )
    return cast(ServiceStore, store)


class ApiKeys:
    """The service's API keys in a store: records with the secret's hash, never the secret."""

    def __init__(self, store: object) -> None:
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
