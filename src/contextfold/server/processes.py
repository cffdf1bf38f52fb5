"""``contextfold serve --processes N``: N server processes behind one port.

The supervisor binds the listening socket once, then forks N children before
it has opened a store or started a thread; each child runs its own service
(store connections, runner, event hub) on the inherited socket, and the
kernel hands each new connection to one of them. Nothing a child holds in
memory matters to another: the store decides idempotency, matching reads the
log, leases give each view one compaction job at a time, and the store's
wake carries appends and events to every child's streams.

Stopping: SIGTERM or SIGINT to the supervisor is passed on as SIGTERM to every
child, which stops as a lone server does (``contextfold.server.lifecycle``); a
second signal is passed on again and hurries them. The supervisor exits 0 once
every child has ended. The children run in their own process group, so Ctrl-C
in a terminal (which signals the whole group) reaches them once, through the
supervisor, and each child asks the kernel for SIGTERM should the supervisor
die without passing anything on.

A child that ends while the service is not stopping (a crash, the OOM killer)
is reported on stderr with its exit status and started again; one that dies
within ``STEADY_S`` of its start waits before its restart, a pause doubled at
each such death (at most ``MAX_PAUSE_S``), so a child that cannot start does
not spin.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from types import FrameType

from contextfold.core.errors import InvalidInput

STEADY_S = 30.0
"""A child alive this long counts as started well: its next death restarts it at once."""
FIRST_PAUSE_S = 0.5
MAX_PAUSE_S = 30.0
_PR_SET_PDEATHSIG = 1


def bind(host: str, port: int) -> socket.socket:
    """The listening socket every child shares (IPv6 when ``host`` is an IPv6 address)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise InvalidInput(
            f"cannot listen on {host}:{port}: {exc.strerror}", field="port"
        ) from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _die_with_parent() -> None:
    """Ask Linux for SIGTERM when the supervisor dies (elsewhere: nothing to ask)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class Supervisor:
    """Forks ``count`` children that each call ``serve(socket)``, keeps them running, and
    stops them on a signal; ``run`` returns once every child has ended."""

    def __init__(
        self,
        count: int,
        sock: socket.socket,
        serve: Callable[[socket.socket], None],
        report: Callable[[str], None],
    ) -> None:
        self.count = count
        self.sock = sock
        self._serve = serve
        self._report = report
        self._children: dict[int, float] = {}
        """Each live child's pid and when it started."""
        self._pauses: list[float] = [0.0] * count
        self._slots: dict[int, int] = {}
        self._signals = 0

    def run(self) -> None:
        before = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            for slot in range(self.count):
                if not self._signals:
                    self._start(slot)
            while self._children:
                self._reap()
        finally:
            self.sock.close()
            for sig, handler in before.items():
                signal.signal(sig, handler)

    def _start(self, slot: int) -> None:
        pid = os.fork()
        if pid == 0:  # the child: serve until stopped, then leave without the parent's cleanup
            code = 0
            try:
                os.setpgid(0, 0)
                _die_with_parent()
                for sig in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(sig, signal.SIG_DFL)
                self._serve(self.sock)
            except Exception as exc:  # reported; the child ends with code 1
                self._report(f"server process {os.getpid()} failed: {exc!r}")
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        self._children[pid] = time.monotonic()
        self._slots[pid] = slot

    def _on_signal(self, sig: int, frame: FrameType | None) -> None:
        self._signals += 1
        for pid in list(self._children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def _reap(self) -> None:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            self._children.clear()
            return
        started = self._children.pop(pid, None)
        slot = self._slots.pop(pid, None)
        if started is None or slot is None or self._signals:
            return
        self._report(
            f"server process {pid} ended unexpectedly ({_status(status)}); starting another"
        )
        lived = time.monotonic() - started
        pause = self._pauses[slot]
        self._pauses[slot] = (
            0.0 if lived >= STEADY_S else min(MAX_PAUSE_S, max(FIRST_PAUSE_S, pause * 2))
        )
        deadline = time.monotonic() + self._pauses[slot]
        while not self._signals and time.monotonic() < deadline:
            time.sleep(0.05)
        if not self._signals:
            self._start(slot)


def _status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"
