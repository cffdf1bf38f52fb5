"""Wake-ups through PostgreSQL: an append in any process reaches the runners of every other.

Every append of ``PostgresStore`` sends ``NOTIFY channel, session_id`` in its
own statement, delivered when it commits. While anyone here listens, a daemon
thread holds one dedicated connection in ``LISTEN channel`` and fans each
notification out to the listeners of the session it names. There is one
channel per schema, so stores in other schemas of the database stay apart.
``notify`` is the local fan-out, which ``Session.append`` runs after each append.

The listener hears this process's own appends too, which ``notify`` fans out
already. The store counts each append it sends while the thread listens as an
echo to expect (``expect_echo``), and a notification for a session with echoes
pending is taken as one and dropped. It may be another process's notification
that is dropped instead of ours; that one was delivered, so committed, before
our echo, which then arrives with nothing pending and wakes the listeners after
both appends. An append that fails or logs nothing gives its echo up
(``echo_lost``); if a notification was already taken in its name, the
listeners are woken then. Nothing is lost; at most a wake comes twice.

When the listening connection fails, the thread logs it, reconnects after a
pause, and then wakes every listened session once, since an append may have
been missed meanwhile.

Events (``announce``) go on the same channel as a JSON object naming the
announcing wake (``origin``), the session and the event, sent at once (not
inside a transaction); the listener hands those of other origins to the
session's event listeners, and takes them for no append's echo. PostgreSQL
refuses a payload of 8000 bytes or more: such an event is logged and not sent.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import psycopg
from psycopg import sql

from contextfold.core.events import log
from contextfold.store.wake import LocalWake, WakeCallback

POLL_S = 0.25
RETRY_S = 1.0
READY_S = 10.0
MAX_PAYLOAD = 7999


def channel_for(schema: str) -> str:
    """The schema's channel, within PostgreSQL's 63-byte limit on names."""
    return f"contextfold_{schema}"[:63]


class PostgresWake(LocalWake):
    """``LocalWake`` plus a ``LISTEN`` thread hearing the appends of other processes."""

    def __init__(
        self,
        conninfo: str,
        channel: str,
        *,
        where: str = "postgresql",
        poll_s: float = POLL_S,
        send: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__()
        self._send = send
        self.channel = channel
        self.poll_s = poll_s
        self._conninfo = conninfo
        self._where = where
        self._echoes: dict[str, int] = {}
        self._listening = False
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._closed = threading.Event()

    def listen(self, session_id: str, callback: WakeCallback) -> Callable[[], None]:
        """As ``LocalWake.listen``; returns once ``LISTEN`` is on, so no later append is missed."""
        stop = super().listen(session_id, callback)
        self._started()
        return stop

    def announce(self, session_id: str, data: str) -> None:
        if self._send is None:
            return
        payload = json.dumps({"origin": self.origin, "session": session_id, "event": data})
        if len(payload.encode()) > MAX_PAYLOAD:
            log.warning("an event for session %s is too long to notify; not sent", session_id)
            return
        self._send(payload)

    def _started(self) -> None:
        """Start the listener thread if none runs; returns once ``LISTEN`` is on."""
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

    def expect_echo(self, session_id: str) -> bool:
        """An append to ``session_id`` is about to notify: drop its echo. False (nothing
        counted) while the thread does not listen."""
        with self._lock:
            if not self._listening:
                return False
            self._echoes[session_id] = self._echoes.get(session_id, 0) + 1
            return True

    def echo_lost(self, session_id: str) -> None:
        """The append expected by ``expect_echo`` sent nothing after all."""
        if not self._heard_echo(session_id):
            LocalWake.notify(self, session_id)

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

    def _heard(self, payload: str) -> None:
        """A notification: an append's (the session id) or an event's (a JSON object)."""
        if payload.startswith("{"):
            try:
                note = json.loads(payload)
                origin, session_id, data = note["origin"], note["session"], note["event"]
            except (ValueError, KeyError, TypeError):
                log.warning("an unreadable event notification on %s was dropped", self._where)
                return
            if origin != self.origin:
                self._deliver(str(session_id), str(data))
        elif not self._heard_echo(payload):
            LocalWake.notify(self, payload)

    def _deaf(self) -> None:
        """The connection is gone: echoes pending will never come."""
        with self._lock:
            if self._thread is not threading.current_thread():
                return  # a newer thread listens
            self._listening = False
            self._echoes.clear()

    def _done(self) -> bool:
        """Nobody listens any more, or the store closed: the thread ends (a later listen restarts it)."""
        with self._lock:
            if self._thread is not threading.current_thread():
                return True  # a newer thread took over
            if self._anyone() and not self._closed.is_set():
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
