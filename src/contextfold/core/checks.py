"""Checks of the arguments public entry points take, shared so every entry point
refuses a bad value the same way: ``InvalidInput`` naming the field.

Messages have their own module (``contextfold.core.messages``); these are the
scalars and collections around them: budgets, idempotency keys, ids, and the
iterable a batch of messages comes in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import check_json

MAX_BUDGET = 2**31 - 1
"""The largest budget taken: far past any model's window, and a number every store,
JSON encoder and database integer column keeps as it is."""


def check_budget(value: Any, field: str = "budget") -> int | None:
    """A token budget: a positive ``int`` (not a bool, float or string) up to
    ``MAX_BUDGET``, or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidInput(f"budget must be a positive integer, not {value!r}", field=field)
    if value > MAX_BUDGET:
        raise InvalidInput(
            f"budget must be at most {MAX_BUDGET:,} tokens, not {value}", field=field
        )
    return value


def check_limit(value: Any, field: str = "limit") -> int:
    """A page size: a positive ``int`` (not a bool, float or string)."""
    if type(value) is not int or value < 1:
        raise InvalidInput(f"{field} must be a positive integer, not {value!r}", field=field)
    return value


def check_name(value: Any, field: str) -> str:
    """An id or name: a non-empty string that every store can keep."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{field} must be a non-empty string, not {value!r}", field=field)
    return str(check_json(value, field))


def check_key(value: Any, field: str = "key") -> str | None:
    """An idempotency key: a non-empty string, or None for no key."""
    return None if value is None else check_name(value, field)


def batch_of(items: Any, field: str) -> list[Any]:
    """Any iterable of items as a list; a string, bytes, a mapping or None is refused,
    since iterating one would read characters, bytes or keys as items."""
    if items is None or isinstance(items, str | bytes | bytearray | Mapping):
        raise InvalidInput(
            f"{field} must be an iterable of items (a list, a tuple, a generator), not "
            f"{type(items).__name__}",
            field=field,
        )
    if not isinstance(items, Iterable):
        raise InvalidInput(f"{field} must be iterable, not {type(items).__name__}", field=field)
    return list(items)
