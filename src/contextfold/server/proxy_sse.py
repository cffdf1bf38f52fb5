"""Server-sent events read from bytes fed in any pieces: what every wire's stream shares.

An event is its ``event:`` name (empty when not given) and its ``data:``
lines joined by newlines, ended by a blank line; comments, ids and retry
hints carry no answer and are skipped. ``close`` dispatches an event the
stream ended without its blank line.
"""

from __future__ import annotations

from collections.abc import Callable


class SseReader:
    """Feed it a stream's bytes; ``on_event(name, data)`` is called once per whole event."""

    def __init__(self, on_event: Callable[[str, bytes], None]) -> None:
        self._on_event = on_event
        self._pending = b""
        self._name = ""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> None:
        lines = (self._pending + chunk).split(b"\n")
        self._pending = lines.pop()
        for line in lines:
            self._line(line.rstrip(b"\r"))

    def close(self) -> None:
        if self._pending:
            self._line(self._pending.rstrip(b"\r"))
            self._pending = b""
        self._dispatch()

    def _line(self, line: bytes) -> None:
        if not line:
            self._dispatch()
        elif line.startswith(b"data:"):
            value = line[5:]
            self._data.append(value[1:] if value.startswith(b" ") else value)
        elif line.startswith(b"event:"):
            self._name = line[6:].strip().decode("utf-8", "replace")

    def _dispatch(self) -> None:
        if not self._data:
            self._name = ""
            return
        name, data = self._name, b"\n".join(self._data)
        self._name, self._data = "", []
        self._on_event(name, data)
