"""The shapes of the service's names: API session ids and tenants.

An API session ``S`` of tenant ``T`` is the store session ``T/S``: neither may
hold a ``/``, so no id of one tenant can name another's session.
"""

from __future__ import annotations

import re

from contextfold.core.errors import InvalidInput

SESSION_ID = re.compile(r"[A-Za-z0-9._:@-]{1,128}")
TENANT = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


def check_session_id(session_id: str, field: str = "session_id") -> str:
    if not isinstance(session_id, str) or not SESSION_ID.fullmatch(session_id):
        raise InvalidInput(
            f"a session id is 1 to 128 of A-Z a-z 0-9 . _ : @ -, not {session_id!r}", field=field
        )
    return session_id


def check_tenant(tenant: str) -> str:
    if not isinstance(tenant, str) or not TENANT.fullmatch(tenant):
        raise InvalidInput(
            f"a tenant is 1 to 64 of a-z 0-9 _ - starting with a letter or digit, not {tenant!r}",
            field="tenant",
        )
    return tenant
