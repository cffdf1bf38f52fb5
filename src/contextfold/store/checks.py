"""What every backend checks alike, so each refuses the same input with the same error.

Plain functions the backends call inside their methods (``check_batch`` inside
the append's write transaction); nothing here reads or writes a store.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from contextfold.core.checks import check_limit
from contextfold.core.errors import InvalidInput
from contextfold.core.log import ApiKey, LoggedMessage, NewMessage
from contextfold.core.order import SYSTEM_KEY, Tail, first_violation


def check_batch(
    tail: Tail,
    batch: Sequence[NewMessage],
    depth: Callable[[], int] | None = None,
    *,
    whole_keys: bool = False,
) -> None:
    """Raise the first rule ``batch`` breaks after ``tail``; every store calls it in its write.

    ``depth``, when given, counts the branch before the batch (``tail.last_seq``
    is then 0): read only when a rule needs it (a system prompt) or an error
    names the message's place, so a sound append reads nothing for it.
    ``whole_keys``: see ``check_whole_keys``.
    """
    if whole_keys:
        check_whole_keys(tail, batch)
    if depth is not None and any(new.key == SYSTEM_KEY for new in batch):
        tail, depth = replace(tail, last_seq=depth()), None
    violation = first_violation(tail, [new.message for new in batch], [new.key for new in batch])
    if violation is None:
        return
    if depth is not None:
        index = (violation.index or 0) + depth()
        raise InvalidInput(violation.reason, index=index, field=violation.field)
    raise violation


def check_whole_keys(tail: Tail, batch: Sequence[NewMessage]) -> None:
    """A batch whose keys go together (one request's): every message keyed, and its keys
    taken all (a retry, answered from the log) or none (stored). Some taken and some not
    is ``InvalidInput`` naming ``key``: the keys were used with fewer messages before."""
    missing_key = next((i for i, new in enumerate(batch) if not new.key), None)
    if missing_key is not None:
        raise InvalidInput(
            "every message of a batch appended with whole keys needs a key",
            index=missing_key,
            field="key",
        )
    taken = [new.key for new in batch if new.key in tail.keyed]
    if taken and len(taken) != len(batch):
        raise InvalidInput(
            f"idempotency keys {taken[0]!r}... were used with fewer messages; use new keys "
            "for new messages",
            field="key",
        )


def resumed(
    batch: Sequence[NewMessage], known: Mapping[str, LoggedMessage], after: int
) -> int | None:
    """The seq the batch's first new message follows when its leading messages are logged
    already under their keys at the very place the batch goes (after ``after``, each after
    the one before: another writer appended the same batch there): the last of them. None
    when the first message is new, or a keyed record sits elsewhere in the log."""
    seq = None
    for new in batch:
        found = known.get(new.key) if new.key else None
        if found is None or (found.parent or 0) != after:
            break
        seq = after = found.seq
    return seq


def system_prompt(system: NewMessage | None) -> list[NewMessage]:
    """The batch that logs a session's system prompt: itself under ``SYSTEM_KEY``."""
    if system is None:
        return []
    if not isinstance(system, NewMessage) or system.message.get("role") != "system":
        raise InvalidInput("the system prompt must be a system message", field="system")
    return [NewMessage(system.message, system.tokens, SYSTEM_KEY)]


def check_lease(owner: str, ttl_s: float) -> None:
    """Refuse what would make a lease meaningless; shared by every store."""
    if not owner:
        raise InvalidInput("lease owner must not be empty", field="owner")
    number = isinstance(ttl_s, int | float) and not isinstance(ttl_s, bool)
    if not (number and ttl_s > 0 and math.isfinite(ttl_s)):
        raise InvalidInput(
            f"lease ttl must be a positive number of seconds, not {ttl_s}", field="ttl_s"
        )


def view_config_json(name: str, config: Mapping[str, Any]) -> str:
    """The configuration as stored JSON; refuses, for every store alike, what none could keep.

    NaN and infinities are refused too: they are not JSON, and a database's
    JSON column would reject them.
    """
    if not name:
        raise InvalidInput("view name must not be empty", field="view")
    if not isinstance(config, Mapping):
        raise InvalidInput(
            f"view configuration must be a mapping, not {type(config).__name__}", field="config"
        )
    try:
        return json.dumps(dict(config), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"view configuration is not JSON data: {exc}", field="config") from exc


def check_listing(prefix: str, after: str | None, limit: int | None, search: str | None) -> None:
    """Refuse a listing's arguments that no backend could honour; shared by every store."""
    for name, value in (("prefix", prefix), ("after", after), ("search", search)):
        if value is not None and not isinstance(value, str):
            raise InvalidInput(f"{name} must be a string, not {type(value).__name__}", field=name)
    if limit is not None:
        check_limit(limit)


def listed(
    ids: Iterable[str], prefix: str, after: str | None, limit: int | None, search: str | None
) -> list[str]:
    """The listing ``ServiceStore.list_sessions`` defines, over ids in any order."""
    needle = fold_ascii(search) if search else ""
    found = sorted(
        i
        for i in ids
        if i.startswith(prefix)
        and (after is None or i > after)
        and needle in fold_ascii(i[len(prefix) :])
    )
    return found if limit is None else found[:limit]


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def fold_ascii(text: str) -> str:
    """ASCII letters lowered, every other character kept: what SQL engines agree on."""
    return text.translate(_ASCII_LOWER)


def check_api_key(key: ApiKey) -> None:
    """Refuse a key record no store should keep."""
    if not isinstance(key, ApiKey):
        raise InvalidInput(f"key must be an ApiKey, not {type(key).__name__}", field="key")
    for name in ("id", "tenant", "secret_hash"):
        value = getattr(key, name)
        if not isinstance(value, str) or not value:
            raise InvalidInput(f"key {name} must be a non-empty string", field=name)
