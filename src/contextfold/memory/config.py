"""A view's configuration as a record: what the store keeps, so any process rebuilds the view.

A ``ViewConfig`` holds a preset name and its options, or a pipeline written as
data (``contextfold.strategies.registry``), plus the budget, a declarative
filter, the model as a ``get_model`` string and the water marks. With neither
a preset nor a pipeline it takes ``DEFAULT_PRESET`` (``offline``): a view
created without one, by the library, the service or the proxy, folds without a
model, and so does a record stored that way by an earlier version (set
``preset="disabled"`` for a view that only renders). Everything in
it is JSON; ``from_data`` checks a stored or posted record field by field, so a
bad record is refused with the field named and nothing stored changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from contextfold.core.checks import check_budget
from contextfold.core.errors import InvalidInput
from contextfold.memory.filters import MessageFilter, check_filter, compile_filter
from contextfold.memory.recalled import RecallSettings
from contextfold.strategies.base import HIGH_WATER, LOW_WATER
from contextfold.strategies.pipeline import Pipeline
from contextfold.strategies.presets import DEFAULT_PRESET, check_preset, get_preset
from contextfold.strategies.registry import (
    from_data,
    pipeline_from_data,
    pipeline_to_data,
    to_data,
)
from contextfold.strategies.templates import check_template, load_template


def as_read(record: Mapping[str, Any]) -> dict[str, Any]:
    """A stored record with the default preset filled in, as ``ViewConfig`` reads it.

    For showing a record (the service's view listings) without building its pipeline.
    """
    data = dict(record)
    if _takes_default(data.get("preset"), data.get("pipeline"), bool(data.get("local"))):
        data["preset"] = DEFAULT_PRESET
    return data


def _takes_default(preset: str | None, pipeline: Any, local: bool) -> bool:
    """Neither a preset nor a pipeline, and not a local view: the default preset applies."""
    return preset is None and pipeline is None and not local


@dataclass(frozen=True)
class ViewConfig:
    """How a view folds and renders; neither preset nor pipeline means ``DEFAULT_PRESET``."""

    preset: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    pipeline: Mapping[str, Any] | None = None
    budget: int | None = None
    filter: Mapping[str, Any] | None = None
    model: str | None = None
    high_water: float = HIGH_WATER
    low_water: float = LOW_WATER
    local: bool = False
    recall: Mapping[str, Any] | bool | None = None
    """Recall from the log (``contextfold.memory.recall``): true, false, or
    ``{"share": 0.4, "limit": 16}``; None takes the preset's default (on for
    ``chat`` and ``offline``)."""

    def __post_init__(self) -> None:
        if _takes_default(self.preset, self.pipeline, self.local):
            object.__setattr__(self, "preset", DEFAULT_PRESET)  # frozen: set once, here
        if self.preset is not None and self.pipeline is not None:
            raise InvalidInput("give a preset or a pipeline, not both", field="pipeline")
        if self.local and (self.preset is not None or self.pipeline is not None):
            raise InvalidInput("a local view's pipeline is not stored", field="local")
        if self.preset is not None:
            check_preset(self.preset)
        check_budget(self.budget)
        if self.model is not None and (not isinstance(self.model, str) or not self.model):
            raise InvalidInput(
                "model is a get_model string such as 'openai:gpt-4o-mini'", field="model"
            )
        if self.filter is not None:
            check_filter(self.filter)
        for name in ("high_water", "low_water"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
                raise InvalidInput(f"{name} is a share of the budget in (0, 1]", field=name)
        if self.low_water >= self.high_water:
            raise InvalidInput("low_water must be below high_water", field="low_water")
        # A record that cannot be built, or whose prompt templates or recall
        # settings are wrong, is refused before it is stored.
        pipeline = self.build_pipeline()
        _ = self.recall_settings
        for i, strategy in enumerate(pipeline.strategies if pipeline is not None else ()):
            prompt = getattr(strategy, "prompt", None)
            if isinstance(prompt, str | Path):
                try:
                    check_template(load_template(strategy.name, prompt))
                except InvalidInput as exc:
                    where = "options.prompt" if self.preset else f"strategies[{i}].options.prompt"
                    raise InvalidInput(exc.reason, field=f"pipeline.{where}") from None

    @classmethod
    def of(
        cls,
        *,
        preset: str | None = None,
        pipeline: Pipeline | None = None,
        options: Mapping[str, Any] | None = None,
        local: bool = False,
        **settings: Any,
    ) -> ViewConfig:
        """A config from objects: the pipeline and options are written as data here.

        With ``local`` the pipeline is not written at all: it holds Python code
        (a predicate, an unregistered strategy) and runs only in this process.
        """
        if local:
            return cls(local=True, **settings)
        return cls(
            preset=preset,
            options=to_data(dict(options or {}), "options"),
            pipeline=None if pipeline is None else pipeline_to_data(pipeline),
            **settings,
        )

    def build_pipeline(self) -> Pipeline | None:
        """The pipeline the record describes; None only for a local view's (not stored)."""
        if self.preset is not None:
            return get_preset(self.preset, **from_data(dict(self.options)))
        if self.pipeline is not None:
            return pipeline_from_data(self.pipeline)
        return None

    @cached_property
    def recall_settings(self) -> RecallSettings | None:
        """What the view recalls (None: recall is off), the preset's default filled in.

        Only a named preset has a default: a pipeline stored as data recalls only
        when ``recall`` says so, the same in every process.
        """
        pipeline = self.build_pipeline() if self.preset is not None else None
        return RecallSettings.of(self.recall, pipeline is not None and pipeline.recall)

    def message_filter(self) -> MessageFilter | None:
        return None if self.filter is None else compile_filter(self.filter)

    def changed(self, **changes: Any) -> ViewConfig:
        unknown = sorted(set(changes) - {f.name for f in fields(self)})
        if unknown:
            raise InvalidInput(f"unknown view setting {unknown[0]!r}", field=unknown[0])
        return replace(self, **changes)

    def to_data(self) -> dict[str, Any]:
        return {
            f.name: dict(value) if isinstance(value, Mapping) else value
            for f in fields(self)
            for value in [getattr(self, f.name)]
        }

    @classmethod
    def from_data(cls, data: Any) -> ViewConfig:
        """A stored or posted record; settings it leaves out take their defaults."""
        if not isinstance(data, Mapping):
            raise InvalidInput("a view configuration is an object", field="config")
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise InvalidInput(f"unknown view setting {unknown[0]!r}", field=unknown[0])
        options = data.get("options") or {}
        if not isinstance(options, Mapping):
            raise InvalidInput("options is an object", field="options")
        return cls(**{**data, "options": dict(options)})
