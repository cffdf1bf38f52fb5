"""What a ``postgresql://`` URL asks of the store, checked before anything connects.

The store's own options are taken out of the query string; the rest of the URL
(host, user, database, libpq options such as ``sslmode`` or ``connect_timeout``)
goes to libpq untouched; ``application_name`` is ``contextfold <schema>`` unless
the URL names one.

- ``schema``: where the tables live (default ``public``); letters, digits and
  ``_``, not starting with a digit, at most 63 characters (PostgreSQL's limit).
- ``pool_size``: the most connections the store opens (default 10).
- ``durability``: what a write survives once the call returned. ``full``
  (default): the server flushed it to disk (``synchronous_commit=on``), so it
  survives a server crash or power loss. ``process``: the server has it
  (``synchronous_commit=off``), so it survives this process dying; a crash of
  the server or its machine may lose the last fraction of a second of commits
  (about three ``wal_writer_delay``), never leaving the database inconsistent.
  It spares a disk flush per write, which on a busy disk is most of an append.
- ``timeout``: seconds a call waits for a connection before ``StoreError``
  (default 30), the first open included.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from contextfold.core.errors import InvalidInput

SCHEMA = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
OURS = ("schema", "pool_size", "timeout", "durability")
# What ``synchronous_commit`` each durability sets.
SYNCHRONOUS_COMMIT = {"process": "off", "full": "on"}


@dataclass(frozen=True)
class PostgresOptions:
    conninfo: str
    """The URL without the store's own options, for libpq."""
    display: str
    """The URL without a password, for messages and logs."""
    schema: str = "public"
    pool_size: int = 10
    timeout: float = 30.0
    application_name: str = "contextfold"
    """What ``pg_stat_activity`` shows for the store's connections."""
    durability: str = "full"


def parse_url(url: str, *, pool_size: int | None = None) -> PostgresOptions:
    """Split ``url`` into libpq's part and the store's options; ``InvalidInput`` naming the bad one."""
    if not isinstance(url, str):
        raise InvalidInput(f"a PostgreSQL URL is a string, not {type(url).__name__}", field="url")
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("postgresql", "postgres"):
        raise InvalidInput(
            f"a PostgreSQL URL starts with postgresql:// or postgres://, not {url!r}", field="url"
        )
    try:
        query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise InvalidInput(f"the URL's query {parts.query!r} does not parse", field="url") from exc
    ours: dict[str, str] = {}
    rest: list[tuple[str, str]] = []
    for name, value in query:
        if name in OURS:
            if name in ours:
                raise InvalidInput(f"the URL names {name} twice", field=name)
            ours[name] = value
        else:
            rest.append((name, value))
    schema = ours.get("schema", "public")
    if not SCHEMA.fullmatch(schema):
        raise InvalidInput(
            "schema is letters, digits and '_', not starting with a digit, at most 63 long; "
            f"got {schema!r}",
            field="schema",
        )
    size = pool_size if pool_size is not None else _number(ours, "pool_size", int)
    size = 10 if size is None else size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise InvalidInput(
            f"pool_size must be a whole number from 1, not {size!r}", field="pool_size"
        )
    timeout = _number(ours, "timeout", float)
    timeout = 30.0 if timeout is None else timeout
    if not (timeout > 0 and math.isfinite(timeout)):
        raise InvalidInput(
            f"timeout must be a positive number of seconds, not {timeout}", field="timeout"
        )
    durability = ours.get("durability", "full")
    if durability not in SYNCHRONOUS_COMMIT:
        raise InvalidInput(
            f"durability must be one of {sorted(SYNCHRONOUS_COMMIT)}, not {durability!r}",
            field="durability",
        )
    named = dict(rest).get("application_name")
    if named is None:
        named = f"contextfold {schema}"[:63]
        rest.append(("application_name", named))
    conninfo = urlunsplit(parts._replace(query=urlencode(rest, quote_via=quote)))
    netloc = parts.netloc
    if "@" in netloc and ":" in netloc.partition("@")[0]:
        netloc = f"{netloc.partition('@')[0].partition(':')[0]}:***@{netloc.partition('@')[2]}"
    display = urlunsplit(parts._replace(netloc=netloc, query=""))
    return PostgresOptions(
        conninfo, f"{display} schema {schema}", schema, size, timeout, named, durability
    )


def _number(ours: dict[str, str], name: str, kind: type[int] | type[float]) -> int | float | None:
    """The option as a number, None when the URL does not name it."""
    if name not in ours:
        return None
    try:
        return kind(ours[name])
    except ValueError as exc:
        raise InvalidInput(f"{name} must be a number, not {ours[name]!r}", field=name) from exc
