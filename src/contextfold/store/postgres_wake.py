"""Wake-ups through PostgreSQL: an append in any process reaches the runners of every other.

``notify(session_id)`` sends ``pg_notify(channel, session_id)`` on one of the
store's pooled connections, then fans out to this process's listeners at once.
While anyone here listens, a daemon thread holds one dedicated connection in
``LISTEN channel`` and fans each notification out to the listeners of the
session it names. There is one channel per schema, so stores in other schemas
of the database stay apart.

The listener hears this process's own notifications too; they were fanned out
already when sent. Each one sent while listening is counted as an echo to
expect, and a notification for a session with echoes pending is taken as one
and dropped. That may drop another process's notification instead of ours, but
only one delivered before our own, so committed before it: the local fan-out,
which ran after ours was committed, already woke the listeners after that
append too. Nothing is lost; at most the order of two wakes blurs.

When the listening connection fails, the thread logs it, reconnects after a
pause, and then wakes every listened session once, since an append may have
been missed meanwhile. A failed ``NOTIFY`` is logged and the local fan-out still
runs: the append itself was stored.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg
from psycopg import sql

from contextfold.core.errors import StoreError
from contextfold.core.events import log
from contextfold.store.wake import LocalWake, WakeCallback

Announce = Callable[[str, str], None]
"""Send ``NOTIFY channel, session_id``; raises ``StoreError`` when it cannot."""

POLL_S = 0.25
RETRY_S = 1.0
READY_S = 10.0


def channel_for(schema: str) -> str:
    """The schema's channel, within PostgreSQL's 63-byte limit on names."""
    return f"contextfold_{schema}"[:63]


class PostgresWake(LocalWake):
    """``LocalWake`` plus ``NOTIFY`` on append and a ``LISTEN`` thread for other processes."""

    def __init__(
        self,
        conninfo: str,
        schema: str,
        announce: Announce,
        *,
        where: str = "postgresql",
        poll_s: float = POLL_S,
    ) -> None:
        super().__init__()
        self.channel = channel_for(schema)
        self.poll_s = poll_s
        self._conninfo = conninfo
        self._announce = announce
        self._where = where
        self._echoes: dict[str, int] = {}
        self._listening = False
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._closed = threading.Event()

    def listen(self, session_id: str, callback: WakeCallback) -> Callable[[], None]:
        """As ``LocalWake.listen``; returns once ``LISTEN`` is on, so no later append is missed."""
        stop = super().listen(session_id, callback)
        with self._lock:
            if self._thread is None and not self._closed.is_set():
                self._ready = threading.Event()
                self._thread = threading.Thread(
                    target=self._run,
                    args=(self._ready,),
                    name="contextfold-wake-listen",
                    daemon=True,
                )
                self._thread.start()
            ready = self._ready
        if not ready.wait(READY_S):
            log.warning("LISTEN on %s is not on yet after %ss", self._where, READY_S)
        return stop

    def notify(self, session_id: str) -> None:
        with self._lock:
            echo = self._listening
            if echo:
                self._echoes[session_id] = self._echoes.get(session_id, 0) + 1
        try:
            self._announce(self.channel, session_id)
        except StoreError as exc:
            log.warning("NOTIFY of an append to session %s failed: %s", session_id, exc)
            if echo:
                self._heard_echo(session_id)
        super().notify(session_id)

    def listening(self) -> bool:
        """Whether the listener thread's ``LISTEN`` is on now."""
        with self._lock:
            return self._listening

    def close(self) -> None:
        """Stop the listener thread (local listeners stay, woken by this process only)."""
        self._closed.set()
        with self._lock:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.poll_s * 4 + RETRY_S)

    def _heard_echo(self, session_id: str) -> bool:
        """Take one pending echo of ``session_id``; False when none was pending."""
        with self._lock:
            pending = self._echoes.get(session_id, 0)
            if pending > 1:
                self._echoes[session_id] = pending - 1
            elif pending == 1:
                del self._echoes[session_id]
            return pending > 0

    def _heard(self, session_id: str) -> None:
        if not self._heard_echo(session_id):
            LocalWake.notify(self, session_id)

    def _deaf(self) -> None:
        """The connection is gone: echoes pending will never come."""
        with self._lock:
            self._listening = False
            self._echoes.clear()

    def _done(self) -> bool:
        """Nobody listens any more, or the store closed: the thread ends (a later listen restarts it)."""
        with self._lock:
            if self._thread is not threading.current_thread():
                return True  # a newer thread took over
            if self._listeners and not self._closed.is_set():
                return False
            self._thread = None
            self._listening = False
            self._echoes.clear()
            return True

    def _run(self, ready: threading.Event) -> None:
        missed = False
        while True:
            try:
                with psycopg.connect(self._conninfo, autocommit=True) as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    with self._lock:
                        self._listening = True
                        self._echoes.clear()
                    ready.set()
                    if missed:
                        for session_id in self.sessions():
                            LocalWake.notify(self, session_id)
                        missed = False
                    while not self._done():
                        for note in conn.notifies(timeout=self.poll_s):
                            self._heard(note.payload)
                    return
            except psycopg.Error as exc:
                log.warning("LISTEN on %s failed, retrying in %ss: %s", self._where, RETRY_S, exc)
                self._deaf()
                missed = True
                ready.set()  # a listen() waits for LISTEN, not for the database to return
                if self._closed.wait(RETRY_S) or self._done():
                    return
