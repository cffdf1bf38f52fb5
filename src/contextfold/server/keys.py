"""API keys: their form, their hash, making one, and finding the tenant a key speaks for.

A key is ``cf_<id>_<secret>``: ``id`` 12 hex digits (the record's id, shown by
``keys list``), ``secret`` 32 URL-safe characters, shown once when made. The
store keeps only the secret's SHA-256, compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time

from contextfold.core.log import ApiKey
from contextfold.memory.session import Memory
from contextfold.server.errors import ServiceError
from contextfold.server.ids import check_tenant

KEY = re.compile(r"cf_([0-9a-f]{12})_([A-Za-z0-9_-]{32})")


def new_key() -> tuple[str, str, str]:
    """A fresh key: ``(id, secret, the key as the client sends it)``."""
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(24)
    return key_id, secret, f"cf_{key_id}_{secret}"


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_key(memory: Memory, tenant: str, label: str = "") -> str:
    """Store a new key of ``tenant`` (its hash only); the key as a client sends it, shown once."""
    key_id, secret, key = new_key()
    record = ApiKey(key_id, check_tenant(tenant), hash_secret(secret), label, time.time())
    memory.api_keys.put(record)
    return key


def parse_key(key: str) -> tuple[str, str] | None:
    """``(id, secret)`` of a well-formed key, else None."""
    match = KEY.fullmatch(key)
    return None if match is None else (match.group(1), match.group(2))


def unauthorized(message: str) -> ServiceError:
    return ServiceError(
        401, "unauthorized", message, headers={"WWW-Authenticate": 'Bearer realm="contextfold"'}
    )


def tenant_of_key(memory: Memory, key: str | None) -> str:
    """The tenant ``key`` belongs to; 401 when it is missing, malformed, unknown or revoked."""
    if not key:
        raise unauthorized("an API key is required: send 'Authorization: Bearer cf_...'")
    parsed = parse_key(key)
    if parsed is None:
        raise unauthorized("the API key is not a contextfold key (cf_<id>_<secret>)")
    key_id, secret = parsed
    record = memory.api_keys.get(key_id)
    if record is None or not hmac.compare_digest(record.secret_hash, hash_secret(secret)):
        raise unauthorized("unknown API key")
    if record.revoked_at is not None and record.revoked_at <= time.time():
        raise unauthorized("the API key was revoked")
    return check_tenant(record.tenant)


class KeyCache:
    """Keys verified in the last ``ttl_s`` seconds, so a busy client costs no store read and
    no hash per request; a revoked key stops working within ``ttl_s``. Only good keys are
    kept, and at most ``size`` of them."""

    def __init__(self, ttl_s: float, size: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.size = size
        self._found: dict[str, tuple[str, float]] = {}

    def tenant(self, memory: Memory, key: str | None) -> str:
        now = time.monotonic()
        if key is not None and self.ttl_s > 0:
            found = self._found.get(key)
            if found is not None and found[1] > now:
                return found[0]
        tenant = tenant_of_key(memory, key)
        if key is not None and self.ttl_s > 0:
            if len(self._found) >= self.size:
                self._found = {k: v for k, v in self._found.items() if v[1] > now}
            if len(self._found) < self.size:
                self._found[key] = (tenant, now + self.ttl_s)
        return tenant
