"""Idempotency keys on appends: a retried request is answered, not stored twice.

A request's ``Idempotency-Key: K`` becomes the store key ``K:i`` of its message
``i``. Before appending, the store is asked which of ``K:0`` .. ``K:n`` it holds
(``ServiceStore.keyed``; ``K:n`` tells whether the key came with more messages):

- none: the batch is appended under its keys;
- ``K:0`` .. ``K:n-1`` and not ``K:n``, holding the request's messages: a retry;
  the stored records are returned and nothing is stored;
- anything else (some keys, other messages, more or fewer of them): 409, and
  nothing is stored.

The store is the only memory, so the answer is the same whichever process took
the first request, and after a restart. Within this process the look-up and the
append of one key run under a lock, so concurrent requests with one key queue
and the later ones are answered as retries. Two processes sent one key at the
same instant can both find it unknown; the store checks each key inside its
write, so each message is logged once: the later request gets the stored
records when they hold its messages, and a 409 when the store refused a key
used for other messages (nothing of its batch is stored). Only a later request
with more messages than the first has its extra messages stored before its
409: the store has no conditional append to close this last window.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.log import LoggedMessage
from contextfold.core.messages import Message, validate_message
from contextfold.memory.session import Session
from contextfold.server.errors import ServiceError

STRIPES = 64
"""Locks shared by hash of (session, key): enough that unrelated keys seldom wait."""


def mismatch(key: str) -> ServiceError:
    return ServiceError(
        409,
        "conflict",
        f"Idempotency-Key {key!r} was used with other messages; use a new key for new messages",
        field="Idempotency-Key",
    )


def validated(messages: Sequence[dict[str, Any]], key: str) -> list[Message]:
    """The messages as the log would hold them; a message the log would refuse cannot
    be what the key stored, so it is the key's mismatch."""
    try:
        return [validate_message(m, index=i) for i, m in enumerate(messages)]
    except InvalidInput:
        raise mismatch(key) from None


class IdempotentAppends:
    """Appends under request keys, each checked against the store before anything is stored."""

    def __init__(self) -> None:
        self._locks = [threading.Lock() for _ in range(STRIPES)]

    def append(
        self, session: Session, messages: list[dict[str, Any]], key: str, parent: int | None = None
    ) -> list[LoggedMessage]:
        keys = [f"{key}:{i}" for i in range(len(messages))]
        with self._locks[hash((session.id, key)) % STRIPES]:
            known = session.keyed([*keys, f"{key}:{len(messages)}"])
            try:
                logged = None if known else session.extend(messages, keys=keys, parent=parent)
            except InvalidInput as exc:
                # Another process stored one of the keys with other messages meanwhile:
                # the store refused the reuse inside its write.
                if exc.field == "key":
                    raise mismatch(key) from None
                raise
        if logged is None:
            if sorted(known) != sorted(keys):
                raise mismatch(key)
            logged = [known[k] for k in keys]
        # Also after an append: another process may have stored the keys meanwhile.
        if [r.message for r in logged] != validated(messages, key):
            raise mismatch(key)
        return logged
