"""Idempotency keys on appends: a retried request is answered, not stored twice.

A request's ``Idempotency-Key: K`` becomes the store key ``K:i`` of its message
``i``, so the store itself never logs a keyed message twice, whichever process
or retry sends it. This process also remembers, for each recent key, a digest
of the request's messages and the seqs they got: a retry is answered from the
log, and the same key sent with another body is refused with 409 before
anything is stored. A key this process has not seen (another process took the
first request, or it restarted) falls back to the store: the records it hands
back for known keys are compared with the request, and a mismatch is a 409.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from contextfold.core.log import LoggedMessage
from contextfold.core.messages import validate_message
from contextfold.memory.session import Session
from contextfold.server.errors import ServiceError

REMEMBERED = 100_000


def digest(messages: Sequence[dict[str, Any]]) -> str:
    text = json.dumps(messages, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def mismatch(key: str) -> ServiceError:
    return ServiceError(
        409,
        "conflict",
        f"Idempotency-Key {key!r} was used with other messages; use a new key for new messages",
        field="Idempotency-Key",
    )


class IdempotentAppends:
    """Appends under request keys, remembering the last ``REMEMBERED`` keys in this process."""

    def __init__(self, remembered: int = REMEMBERED) -> None:
        self._lock = threading.Lock()
        self._seen: OrderedDict[tuple[str, str], tuple[str, int, int]] = OrderedDict()
        self._remembered = remembered

    def append(
        self, session: Session, messages: list[dict[str, Any]], key: str
    ) -> list[LoggedMessage]:
        body = digest(messages)
        seen = self._recall(session.id, key)
        if seen is not None:
            if seen[0] != body:
                raise mismatch(key)
            return session.store.messages(session.id, seen[1], seen[1] + seen[2] - 1)
        before = session.store.last_seq(session.id)
        logged = session.extend(messages, keys=[f"{key}:{i}" for i in range(len(messages))])
        earlier = [r.seq <= before for r in logged]
        if any(earlier):
            same = all(earlier) and [r.message for r in logged] == [
                validate_message(m, index=i) for i, m in enumerate(messages)
            ]
            if not same:
                raise mismatch(key)
        seqs = [r.seq for r in logged]
        if seqs == list(range(seqs[0], seqs[0] + len(seqs))):
            self._remember(session.id, key, (body, seqs[0], len(seqs)))
        return logged

    def _recall(self, session_id: str, key: str) -> tuple[str, int, int] | None:
        with self._lock:
            found = self._seen.get((session_id, key))
            if found is not None:
                self._seen.move_to_end((session_id, key))
            return found

    def _remember(self, session_id: str, key: str, entry: tuple[str, int, int]) -> None:
        with self._lock:
            self._seen[(session_id, key)] = entry
            while len(self._seen) > self._remembered:
                self._seen.popitem(last=False)

    def forget(self, session_id: str) -> None:
        """The session was deleted: its keys mean nothing now."""
        with self._lock:
            for k in [k for k in self._seen if k[0] == session_id]:
                del self._seen[k]
