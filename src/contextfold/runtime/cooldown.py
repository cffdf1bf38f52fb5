"""The pause a runner takes on a view after one of its jobs failed.

A failing model (a server down, a key revoked, a model that keeps answering
with errors) must not be asked again on every append: that is a retry storm,
each append paying a whole job's calls. After a failed job the runner leaves
the view alone for ``base_s`` seconds, doubling with each failure in a row up
to ``max_s``; appends meanwhile only extend the log (the view renders from its
previous folds). The first append after the pause tries again, and a cycle
that fails nothing ends the pause for good, as does a change of the view's
stored configuration (another model, another pipeline).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from contextfold.core.errors import InvalidInput

Key = tuple[str, str]


@dataclass(frozen=True)
class Cooldown:
    """Exponential backoff per view after a failed job: ``base_s``, doubled, at most ``max_s``."""

    base_s: float = 1.0
    max_s: float = 300.0

    def __post_init__(self) -> None:
        if not 0 <= self.base_s <= self.max_s:
            raise InvalidInput(
                f"a cooldown needs 0 <= base_s <= max_s, got {self.base_s} and {self.max_s}",
                field="cooldown",
            )

    def pause(self, failures: int) -> float:
        """Seconds to leave a view alone after ``failures`` failed cycles in a row."""
        return float(min(self.max_s, self.base_s * 2.0 ** max(failures - 1, 0)))


DEFAULT_COOLDOWN = Cooldown()


class Cooldowns:
    """Which views are cooling down, and how many cycles in a row failed on each."""

    def __init__(self, policy: Cooldown) -> None:
        self.policy = policy
        self._lock = threading.Lock()
        self._views: dict[Key, tuple[int, float, int]] = {}

    def cooling(self, key: Key, version: Callable[[], int]) -> bool:
        """True while ``key`` is paused after a failure at the configuration ``version()``."""
        with self._lock:
            found = self._views.get(key)
        return found is not None and time.monotonic() < found[1] and version() == found[2]

    def failed(self, key: Key, version: int) -> float:
        """Record a failed cycle of the configuration ``version``; returns the pause it earned."""
        with self._lock:
            failures = self._views.get(key, (0, 0.0, 0))[0] + 1
            pause = self.policy.pause(failures)
            self._views[key] = (failures, time.monotonic() + pause, version)
        return pause

    def succeeded(self, key: Key) -> None:
        with self._lock:
            self._views.pop(key, None)
