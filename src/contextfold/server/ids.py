"""The shapes of the service's names: API session ids, view names and tenants.

An API session ``S`` of tenant ``T`` is the store session ``T/S``: neither may
hold a ``/``, so no id of one tenant can name another's session.
"""

from __future__ import annotations

import re

from contextfold.core.errors import InvalidInput

_ANY = "A-Za-z0-9._:@-"
_NOT_DOT = "A-Za-z0-9_:@-"
NAME = (
    rf"(?:[{_NOT_DOT}][{_ANY}]{{0,127}}"
    rf"|\.[{_NOT_DOT}][{_ANY}]{{0,126}}"
    rf"|\.\.[{_ANY}]{{1,126}})"
)
"""What an API session id or view name may be (the OpenAPI spec says it too): 1 to 128 of
``A-Za-z0-9._:@-``, but not ``.`` or ``..``, which clients drop from a URL's path (so
``/sessions/..`` would name another resource). Written without a look-ahead, which
pydantic's regex engine lacks."""
_NAME = re.compile(NAME)
TENANT = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


def check_api_name(value: object, field: str = "session_id") -> str:
    """``value`` if it is a name of the API's shape, else ``InvalidInput`` naming ``field``."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise InvalidInput(
            f"{field} must be 1 to 128 of A-Z a-z 0-9 . _ : @ - (not . or ..), not {value!r}",
            field=field,
        )
    return value


def store_id(tenant: str, session_id: str) -> str:
    """The store's id of the tenant's API session ``session_id`` (both checked)."""
    return f"{check_tenant(tenant)}/{check_api_name(session_id)}"


def check_tenant(tenant: str) -> str:
    if not isinstance(tenant, str) or not TENANT.fullmatch(tenant):
        raise InvalidInput(
            f"a tenant is 1 to 64 of a-z 0-9 _ - starting with a letter or digit, not {tenant!r}",
            field="tenant",
        )
    return tenant
