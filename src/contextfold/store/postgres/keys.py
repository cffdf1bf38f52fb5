"""The PostgreSQL store's API keys (``ServiceStore``), each call one statement of ``admin``.

``PostgresStore`` inherits them; they share its connections.
"""

from __future__ import annotations

from contextfold.core.log import ApiKey
from contextfold.store.checks import check_api_key
from contextfold.store.postgres import admin as admin
from contextfold.store.postgres.pool import Connections, nul_free


class PostgresKeys:
    """API keys in the ``api_keys`` table, read and written through the store's pool."""

    _db: Connections

    def put_api_key(self, key: ApiKey) -> None:
        check_api_key(key)
        nul_free(id=key.id, tenant=key.tenant, secret_hash=key.secret_hash, label=key.label)
        with self._db.read() as cur:
            admin.put_api_key(cur, key)

    def get_api_key(self, key_id: str) -> ApiKey | None:
        with self._db.read() as cur:
            return admin.get_api_key(cur, key_id)

    def list_api_keys(self, tenant: str | None = None) -> list[ApiKey]:
        with self._db.read() as cur:
            return admin.list_api_keys(cur, tenant)

    def revoke_api_key(self, key_id: str) -> bool:
        with self._db.read() as cur:
            return admin.revoke_api_key(cur, key_id)
