"""Optional parts import their dependencies late, inside ``needs_extra``.

The core install (``pip install contextfold``) has tiktoken and rich only; the
service, workers, PostgreSQL, plots and SDK adapters come with extras. Their
modules are imported where they are used, so every command and module that
does not need them works without them, and one that does fails with
``MissingExtra`` naming what to install.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from contextfold.core.errors import MissingExtra


@contextmanager
def needs_extra(what: str, extra: str) -> Iterator[None]:
    """Turn an ``ImportError`` raised inside into ``MissingExtra(what, extra)``."""
    try:
        yield
    except MissingExtra:
        raise
    except ImportError as exc:
        raise MissingExtra(what, extra) from exc
