"""Open a store by URL: one registry of schemes, the built-in ones included.

::

    open_store(None)                               # RAMStore, as does "memory://"
    open_store("chat.db")                          # SQLiteStore; so does a Path
    open_store("sqlite:///var/lib/app/chat.db")    # absolute path
    open_store("sqlite://chat.db?durability=full") # relative path, fsync per commit
    open_store("postgresql://app@db:5432/prod?schema=chat")  # PostgresStore

A backend in another package makes its URLs open the same way with
``register_store("myscheme", factory)``: ``factory`` gets the whole URL string
and returns the store. Registering a scheme again replaces its factory.

A string without ``://`` is read as ``sqlite://<string>`` (so its
``?durability=...`` counts); a ``PathLike`` always opens a ``SQLiteStore`` at
exactly that path.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import cast
from urllib.parse import parse_qs

from contextfold.core.errors import InvalidInput
from contextfold.store.base import Store
from contextfold.store.ram import RAMStore
from contextfold.store.sqlite import Durability, SQLiteStore

StoreFactory = Callable[[str], Store]

_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")
_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_FACTORIES: dict[str, StoreFactory] = {}


def register_store(scheme: str, factory: StoreFactory) -> None:
    """Make ``open_store`` open ``<scheme>://...`` URLs with ``factory(url)``."""
    if not isinstance(scheme, str) or not _SCHEME.fullmatch(scheme):
        raise InvalidInput(
            f"a store scheme is lowercase letters, digits, '+', '-' or '.', not {scheme!r}",
            field="scheme",
        )
    _FACTORIES[scheme] = factory


def open_store(url: str | os.PathLike[str] | None = None) -> Store:
    """The store ``url`` names; None is a fresh in-memory store."""
    if url is None:
        return RAMStore()
    if isinstance(url, os.PathLike):
        return SQLiteStore(url)
    if not isinstance(url, str):
        raise InvalidInput(
            f"a store URL is a string or a path, not {type(url).__name__}", field="url"
        )
    match = _URL.match(url)
    if match is None:  # a plain path
        scheme, url = "sqlite", f"sqlite://{url}"
    else:
        scheme = match.group(1).lower()
    factory = _FACTORIES.get(scheme)
    if factory is None:
        raise InvalidInput(
            f"no store is registered for {scheme!r} URLs; known schemes: {sorted(_FACTORIES)}",
            field="url",
        )
    return factory(url)


def _rest(url: str) -> str:
    """What follows ``scheme://``."""
    return url.partition("://")[2]


def _memory(url: str) -> Store:
    if _rest(url):
        raise InvalidInput(f"memory:// takes no path or options, got {url!r}", field="url")
    return RAMStore()


def _sqlite(url: str) -> Store:
    """``sqlite:///abs.db`` or ``sqlite://rel.db``, with an optional ``?durability=``."""
    path, _, query = _rest(url).partition("?")
    if not path:
        raise InvalidInput(f"no database path in {url!r}", field="url")
    options: dict[str, list[str]] | None
    try:
        options = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        options = None
    if (
        options is None
        or set(options) - {"durability"}
        or any(len(values) > 1 for values in options.values())
    ):
        raise InvalidInput(
            f"a sqlite URL takes one option, durability=process|full; got {query!r}",
            field="url",
        )
    if "durability" in options:
        # Any string may come from a URL; SQLiteStore refuses one it does not know.
        return SQLiteStore(path, durability=cast(Durability, options["durability"][0]))
    return SQLiteStore(path)


def _postgres(url: str) -> Store:
    """``postgresql://user@host:5432/db?schema=name``; psycopg is imported only now."""
    from contextfold.store.postgres import PostgresStore

    return PostgresStore(url)


register_store("memory", _memory)
register_store("sqlite", _sqlite)
register_store("postgresql", _postgres)
register_store("postgres", _postgres)
