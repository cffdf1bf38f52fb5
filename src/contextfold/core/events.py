"""Events: what compaction did, delivered to callbacks and to ``logging``.

Kinds: ``planned``, ``started``, ``committed``, ``rejected`` (the commit lost a
race with another commit), ``failed`` (the model's answers were unusable or the
call failed; the job was dropped), ``degraded`` (the view keeps its previous
folds and may be over budget until a later attempt succeeds) and
``quarantined`` (a stored fold was found damaged or at odds with the log and
is kept out of the view; ``data`` names the fold and the reason). Workers
(``contextfold.workers``) add ``retried`` (a failed job is sent again after a
pause) and ``parked`` (the view failed too often in a row; no job is queued for
it until its configuration changes or a compaction is asked for). Render adds
``provisional`` (it made a provisional fold where it would have cut, without a
model; ``duration_s`` is what making it took) and ``replaced`` (a committed fold
now lies over a provisional one; ``duration_s`` is how long it stood, ``data``
names both folds) (``contextfold.memory.bridge``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

log = logging.getLogger("contextfold")

EventKind = Literal[
    "planned",
    "started",
    "committed",
    "rejected",
    "failed",
    "degraded",
    "quarantined",
    "retried",
    "parked",
    "provisional",
    "replaced",
]


@dataclass(frozen=True)
class Event:
    kind: EventKind
    session: str
    view: str
    strategy: str
    start: int
    end: int
    tokens_before: int = 0
    tokens_after: int = 0
    usage: Mapping[str, Any] | None = None
    duration_s: float = 0.0
    detail: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)

    def to_data(self) -> dict[str, Any]:
        """The event as plain JSON data (what a stream or a broker sends)."""
        data = asdict(self)
        data["usage"] = None if self.usage is None else dict(self.usage)
        data["data"] = dict(self.data)
        return data

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Event:
        return cls(**data)

    def describe(self) -> str:
        text = (
            f"{self.kind} {self.strategy} {self.session}/{self.view} seq {self.start}..{self.end}"
        )
        if self.kind == "committed":
            text += f": {self.tokens_before} -> {self.tokens_after} tokens"
        if self.detail:
            text += f": {self.detail}"
        return text


EventCallback = Callable[[Event], None]


def emit(event: Event, callbacks: list[EventCallback]) -> None:
    """Log the event, then hand it to each callback; a failing callback is logged, not raised."""
    warn = ("failed", "degraded", "quarantined", "retried", "parked")
    level = logging.WARNING if event.kind in warn else logging.INFO
    log.log(level, event.describe())
    for callback in callbacks:
        try:
            callback(event)
        except Exception:
            log.exception("event callback failed on %s", event.kind)
