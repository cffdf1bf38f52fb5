"""What a wire format's messages keep goes back upstream with the prompt's unchanged messages.

A wire that reads more than a chat message holds (a Responses reasoning item,
an image's detail) keeps it in the logged message's ``meta`` under its own
key (the proxy's ``Wire.keeps``; the Agents SDK session keeps the Responses
items too). It lives here, below the interfaces, because the proxy and the
framework adapters both give it back. Render sends no ``meta`` to a model, so the rendered
prompt has none; ``with_kept`` puts the wire's key back on each prompt
message that is a logged message shown whole (``Rendered.shown`` less
``clipped``, and the system prompt), found in log order by what a model sees
of it. Folds, markers, clipped messages and the synthetic answers of
unanswered calls get nothing: the wire then writes them from their fields.

Reading the shown messages again on every call would cost more than the
render itself, so ``KeptMeta`` remembers, per session in this process, the
logged messages that keep something (the log is append-only: a seq's message
never changes) and reads only what was appended since it last looked.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from contextfold.core.messages import Message, for_model
from contextfold.core.render import Rendered
from contextfold.memory.session import Session

_PAGE = 1000  # messages read at once when catching up with a log


@dataclass
class _Seen:
    """A session's log as far as read: the messages keeping something under ``key``, by seq."""

    created_at: float
    key: str
    upto: int = 0
    kept: dict[int, tuple[Message, Any]] = field(default_factory=dict)


class KeptMeta:
    """Per session, the logged messages that keep a wire's ``meta``, within ``capacity``
    messages in all; the least recently used sessions are dropped first (and read again
    when next used). Callers serialise calls on one session (the proxy's session lock,
    an adapter's own lock)."""

    def __init__(self, capacity: int = 50_000) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._table: OrderedDict[str, _Seen] = OrderedDict()
        self._size = 0

    def of(self, session: Session, last_seq: int, key: str) -> Mapping[int, tuple[Message, Any]]:
        """The session's messages up to ``last_seq`` that keep ``meta[key]``, by seq: each as
        a model sees it, and what it keeps."""
        with self._lock:
            seen = self._table.get(session.id)
            fresh = seen is None or seen.created_at != session.created_at or seen.key != key
            if seen is None or fresh or seen.upto > last_seq:
                if seen is not None:
                    self._size -= len(seen.kept)
                seen = _Seen(session.created_at, key)
                self._table[session.id] = seen
            self._table.move_to_end(session.id)
        before = len(seen.kept)
        while seen.upto < last_seq:
            page = session.messages(after=seen.upto, limit=min(_PAGE, last_seq - seen.upto))
            if not page:
                break
            for logged in page:
                meta = logged.message.get("meta")
                if isinstance(meta, dict) and key in meta:
                    seen.kept[logged.seq] = (for_model(logged.message), meta[key])
            seen.upto = page[-1].seq
        with self._lock:
            if self._table.get(session.id) is seen:
                self._size += len(seen.kept) - before
            while self._size > self.capacity and len(self._table) > 1:
                oldest, dropped = next(iter(self._table.items()))
                if oldest == session.id:
                    self._table.move_to_end(oldest)
                    continue
                del self._table[oldest]
                self._size -= len(dropped.kept)
        return seen.kept


def with_kept(
    rendered: Rendered, kept: Mapping[int, tuple[Message, Any]], key: str, system: int
) -> list[Message]:
    """``rendered.messages`` with ``meta[key]`` of the logged messages they show whole.

    ``kept`` is ``KeptMeta.of``; ``system`` the number of leading system
    messages of the log (the system prompt render puts first).
    """
    whole = (set(rendered.shown) - set(rendered.clipped)) | set(range(1, system + 1))
    found = [kept[seq] for seq in sorted(whole) if seq in kept]
    if not found:
        return rendered.messages
    out: list[Message] = []
    at = 0
    for message in rendered.messages:
        match = next((j for j in range(at, len(found)) if found[j][0] == message), None)
        if match is None:
            out.append(message)
            continue
        out.append({**message, "meta": {key: found[match][1]}})
        at = match + 1
    return out
