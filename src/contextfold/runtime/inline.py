"""The inline runner: each cycle runs inside the ``append`` that set it off.

For scripts and tests: deterministic, no threads of its own, and the caller
pays the model's latency on the hot path (which is what the other runners
exist to avoid). A view whose lease another process holds is left alone until
the next append.
"""

from __future__ import annotations

import time

from contextfold.memory.view import View
from contextfold.runtime.core import Runner

_POLL_S = 0.01


class InlineRunner(Runner):
    def _schedule(self, view: View) -> None:
        self._drive(view)

    def _retry_later(self, view: View) -> None:
        """Waiting here would block the caller's append: the next append tries again."""

    def stop(self, timeout: float = 5.0, *, drain: bool = True) -> bool:
        """Stop watching. Cycles other threads are running inline get ``timeout`` seconds
        to finish when ``drain``; then they are abandoned. True when none was left."""
        self._close(drain=drain)
        deadline = time.monotonic() + (timeout if drain else 0.0)
        while self.busy() and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        done = not self.busy()
        if not done:
            self._abandon()
        self._shut()
        return done

    def __enter__(self) -> InlineRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
