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

Changes travel typed (``ViewChanges``, one key per setting) from
``Session.view`` through ``View.update`` to ``ViewConfig.changed``. Checking
a config builds its pipeline, and the config keeps what it built.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

from contextfold.core.checks import check_budget
from contextfold.core.errors import InvalidInput
from contextfold.memory.filters import MessageFilter, compile_filter
from contextfold.memory.pin_rules import DEFAULT_SHARE, PinRule, check_share, pin_rules
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


class ViewChanges(TypedDict, total=False):
    """Stored settings to change (``View.update``); those left out keep their stored value.

    One key per ``ViewConfig`` field, typed as the field is, so a caller's
    checker sees a wrong name or type; at run time either is ``InvalidInput``
    naming the setting.
    """

    preset: str | None
    options: Mapping[str, Any]
    pipeline: Mapping[str, Any] | None
    budget: int | None
    filter: Mapping[str, Any] | None
    model: str | None
    high_water: float
    low_water: float
    local: bool
    recall: Mapping[str, Any] | bool | None
    wait_for_fold_s: float
    pins: Sequence[str | Mapping[str, Any]]
    pins_share: float


MAX_WAIT_S = 60.0
"""The longest a render may wait for a fold (``ViewConfig.wait_for_fold_s``)."""

SETTINGS: tuple[str, ...] = tuple(ViewChanges.__annotations__)
"""The names of a view's stored settings, in the order a record lists them."""


def folding_changes(
    *,
    preset: str | None,
    pipeline: Pipeline | None,
    options: Mapping[str, Any],
    local: bool,
) -> ViewChanges:
    """The changes that store how a view folds: a preset and its options, or a pipeline,
    written as data here (nothing is built). With ``local`` nothing of the pipeline is
    written: it holds Python code (a predicate, an unregistered strategy) and runs only
    in this process."""
    if local:
        return ViewChanges(preset=None, options={}, pipeline=None, local=True)
    return ViewChanges(
        preset=preset,
        options=to_data(dict(options), "options"),
        pipeline=None if pipeline is None else pipeline_to_data(pipeline),
        local=False,
    )


def given_changes(
    *,
    budget: int | None,
    filter: Mapping[str, Any] | None,
    model: str | None,
    high_water: float | None,
    low_water: float | None,
    recall: Mapping[str, Any] | bool | None,
    pins: Sequence[str | Mapping[str, Any]] | None = None,
    pins_share: float | None = None,
) -> ViewChanges:
    """The settings a caller gave (``Session.view``), None meaning not given."""
    changes = ViewChanges()
    if pins is not None:
        changes["pins"] = pins
    if pins_share is not None:
        changes["pins_share"] = pins_share
    if budget is not None:
        changes["budget"] = budget
    if filter is not None:
        changes["filter"] = filter
    if model is not None:
        changes["model"] = model
    if high_water is not None:
        changes["high_water"] = high_water
    if low_water is not None:
        changes["low_water"] = low_water
    if recall is not None:
        changes["recall"] = recall
    return changes


@dataclass(frozen=True)
class ViewConfig:
    """How a view folds and renders; neither preset nor pipeline means ``DEFAULT_PRESET``.

    Checking a config builds its pipeline, once: the config keeps it
    (``built_pipeline``) with its recall settings and compiled filter, so
    whoever runs the view reuses them instead of building again.
    """

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
    wait_for_fold_s: float = 0.0
    """How long a render that would leave messages out waits for a fold job of the view
    running in this process before it bridges them (``contextfold.memory.bridge``); 0
    bridges at once."""
    pins: Sequence[str | Mapping[str, Any]] = ()
    """Pin rules (``contextfold.memory.pins``): messages a fold covers that come back
    verbatim right after the folds; a preset's name or ``{"filter", "mode", "key"}``."""
    pins_share: float = DEFAULT_SHARE
    """The most of the budget pinned messages take; the oldest beyond it are left out."""
    _built: Pipeline | None = field(default=None, init=False, repr=False, compare=False)
    _recall: RecallSettings | None = field(default=None, init=False, repr=False, compare=False)
    _filter: MessageFilter | None = field(default=None, init=False, repr=False, compare=False)
    _pins: tuple[PinRule, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if _takes_default(self.preset, self.pipeline, self.local):
            object.__setattr__(self, "preset", DEFAULT_PRESET)  # frozen: set once, here
        self._check_folding()
        check_budget(self.budget)
        if self.model is not None and (not isinstance(self.model, str) or not self.model):
            raise InvalidInput(
                "model is a get_model string such as 'openai:gpt-4o-mini'", field="model"
            )
        for name in ("high_water", "low_water"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
                raise InvalidInput(f"{name} is a share of the budget in (0, 1]", field=name)
        if self.low_water >= self.high_water:
            raise InvalidInput("low_water must be below high_water", field="low_water")
        wait = self.wait_for_fold_s
        if (
            isinstance(wait, bool)
            or not isinstance(wait, int | float)
            or not 0 <= wait <= MAX_WAIT_S
        ):
            raise InvalidInput(
                f"wait_for_fold_s is seconds from 0 to {MAX_WAIT_S:g}", field="wait_for_fold_s"
            )
        object.__setattr__(self, "_pins", pin_rules(self.pins))
        object.__setattr__(self, "pins", tuple(self.pins))  # frozen: one type, whatever was given
        check_share(self.pins_share)
        # A record that cannot be built, or whose prompt templates, recall settings
        # or filter are wrong, is refused before it is stored. What is built is kept.
        pipeline = self._build()
        recall_default = self.preset is not None and pipeline is not None and pipeline.recall
        object.__setattr__(self, "_built", pipeline)
        object.__setattr__(self, "_recall", RecallSettings.of(self.recall, recall_default))
        if self.filter is not None:
            object.__setattr__(self, "_filter", compile_filter(self.filter))

    def _check_folding(self) -> None:
        """How the view folds: one of a preset, a pipeline and a local pipeline."""
        if self.preset is not None and not isinstance(self.preset, str):
            raise InvalidInput("preset is a preset's name", field="preset")
        if not isinstance(self.options, Mapping):
            raise InvalidInput("options is an object", field="options")
        if self.pipeline is not None and not isinstance(self.pipeline, Mapping):
            raise InvalidInput("pipeline is an object of strategies", field="pipeline")
        if not isinstance(self.local, bool):
            raise InvalidInput("local must be True or False", field="local")
        if self.preset is not None and self.pipeline is not None:
            raise InvalidInput("give a preset or a pipeline, not both", field="pipeline")
        if self.local and (self.preset is not None or self.pipeline is not None):
            raise InvalidInput("a local view's pipeline is not stored", field="local")
        if self.preset is not None:
            check_preset(self.preset)

    def _build(self) -> Pipeline | None:
        """The pipeline the record describes, its prompt templates checked; None only for a
        local view's (not stored)."""
        if self.preset is not None:
            pipeline = get_preset(self.preset, **from_data(dict(self.options)))
        elif self.pipeline is not None:
            pipeline = pipeline_from_data(self.pipeline)
        else:
            return None
        for i, strategy in enumerate(pipeline.strategies):
            prompt = getattr(strategy, "prompt", None)
            if isinstance(prompt, str | Path):
                try:
                    check_template(load_template(strategy.name, prompt))
                except InvalidInput as exc:
                    where = "options.prompt" if self.preset else f"strategies[{i}].options.prompt"
                    raise InvalidInput(exc.reason, field=f"pipeline.{where}") from None
        return pipeline

    @property
    def built_pipeline(self) -> Pipeline | None:
        """The pipeline the record describes, built when the record was checked; None only
        for a local view's (not stored)."""
        return self._built

    @property
    def recall_settings(self) -> RecallSettings | None:
        """What the view recalls (None: recall is off), the preset's default filled in.

        Only a named preset has a default: a pipeline stored as data recalls only
        when ``recall`` says so, the same in every process.
        """
        return self._recall

    def message_filter(self) -> MessageFilter | None:
        """The declarative filter, compiled when the record was checked."""
        return self._filter

    @property
    def pin_rules(self) -> tuple[PinRule, ...]:
        """The pin rules, presets expanded and filters compiled when the record was checked."""
        return self._pins

    def changed(self, changes: ViewChanges) -> ViewConfig:
        """This config with ``changes``; itself, nothing built, when they change nothing."""
        unknown = sorted(set(changes) - set(SETTINGS))
        if unknown:
            raise InvalidInput(f"unknown view setting {unknown[0]!r}", field=unknown[0])
        if all(_same(getattr(self, name), value) for name, value in changes.items()):
            return self
        return replace(self, **changes)

    def to_data(self) -> dict[str, Any]:
        return {name: _data(getattr(self, name)) for name in SETTINGS}

    @classmethod
    def from_data(cls, data: Any) -> ViewConfig:
        """A stored or posted record; settings it leaves out take their defaults."""
        if not isinstance(data, Mapping):
            raise InvalidInput("a view configuration is an object", field="config")
        unknown = sorted(set(data) - set(SETTINGS))
        if unknown:
            raise InvalidInput(f"unknown view setting {unknown[0]!r}", field=unknown[0])
        return cls(**{**data, "options": data.get("options") or {}})


def _data(value: Any) -> Any:
    """A setting as stored: plain dicts and lists."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, tuple):
        return [_data(v) for v in value]
    return value


def _same(stored: object, given: object) -> bool:
    """Equal and of one type: ``True`` is not the budget 1, it is refused as a budget."""
    return type(stored) is type(given) and stored == given
