"""Idempotency keys on appends: a retried request is answered, not stored twice.

A request's ``Idempotency-Key: K`` becomes the store key ``K:i`` of its message
``i``, and the batch is appended with ``whole_keys``: inside its write, the
store stores the batch when none of its keys is taken, answers it from the
records when all are taken by these messages (a retry), and refuses it whole
otherwise (some taken: the key came with fewer messages; one taken by another
message). ``K:n``, never stored by this request, tells whether the key came
with more messages: read before the append (nothing to try then) and after a
retry's answer (a longer batch under the key is stored in one transaction, so
if its first records are seen, its ``K:n`` is too).

The store alone decides, so the answer is the same whichever process took the
first request, when two processes take one key at the same instant, and after a
restart: each message is logged once, and no part of a request the key refuses
is stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.log import LoggedMessage
from contextfold.core.messages import Message, validate_message
from contextfold.memory.session import Session
from contextfold.server.errors import ServiceError


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


def append_idempotent(
    session: Session, messages: list[dict[str, Any]], key: str, parent: int | None = None
) -> list[LoggedMessage]:
    """Append ``messages`` under the request key ``key``: stored once, a retry answered
    from the log, any other use of the key a 409 (``mismatch``)."""
    keys = [f"{key}:{i}" for i in range(len(messages))]
    beyond = f"{key}:{len(messages)}"
    known = session.keyed([*keys, beyond])
    if known:
        # Taken: a retry when it holds exactly these messages, else a 409; nothing to store.
        if sorted(known) != sorted(keys):
            raise mismatch(key)
        logged = [known[k] for k in keys]
    else:
        try:
            logged = session.extend(messages, keys=keys, parent=parent, whole_keys=True)
        except InvalidInput as exc:
            # Taken meanwhile (another process): with fewer or other messages.
            if exc.field == "key":
                raise mismatch(key) from None
            raise
        if session.keyed([beyond]):  # answered from a longer batch stored meanwhile
            raise mismatch(key)
    if [r.message for r in logged] != validated(messages, key):
        raise mismatch(key)
    return logged
