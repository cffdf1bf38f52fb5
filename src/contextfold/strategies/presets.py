"""Named setups, and the registry third parties add theirs to.

A preset is a function returning a ``Pipeline``; options are passed through, so
``get_preset("offline", keep_last=3)`` tunes the masking step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from contextfold.errors import InvalidInput
from contextfold.strategies.extractive import ExtractiveSummary
from contextfold.strategies.keep_recent import KeepRecent
from contextfold.strategies.masking import ObservationMasking
from contextfold.strategies.pipeline import Pipeline
from contextfold.strategies.triggers import OverBudget

PresetFactory = Callable[..., Pipeline]
_PRESETS: dict[str, PresetFactory] = {}


def register_preset(name: str, factory: PresetFactory) -> None:
    """Make ``factory`` available as ``get_preset(name)`` and ``--preset name``."""
    _PRESETS[name] = factory


def get_preset(name: str, **options: Any) -> Pipeline:
    try:
        factory = _PRESETS[name]
    except KeyError:
        raise InvalidInput(
            f"unknown preset {name!r} (expected one of {', '.join(preset_names())})", field="preset"
        ) from None
    try:
        return factory(**options)
    except TypeError as exc:
        raise InvalidInput(f"preset {name!r}: {exc}", field="preset") from exc


def preset_names() -> list[str]:
    return sorted(_PRESETS)


def offline(
    *, keep_last: int = 5, exclude_tools: tuple[str, ...] = (), **extractive: Any
) -> Pipeline:
    """The default: mask old tool output, then fold old rounds extractively. No model."""
    return Pipeline(
        [
            ObservationMasking(
                keep_last=keep_last, exclude_tools=exclude_tools, trigger=OverBudget()
            ),
            ExtractiveSummary(**extractive),
        ],
        name="offline",
    )


def keep_recent() -> Pipeline:
    """Drop the oldest messages until the prompt fits: the baseline."""
    return Pipeline([KeepRecent()], name="keep-recent")


def disabled() -> Pipeline:
    """Never folds; render's last-resort cut still keeps the prompt within budget."""
    return Pipeline([], name="disabled")


register_preset("offline", offline)
register_preset("keep-recent", keep_recent)
register_preset("disabled", disabled)
