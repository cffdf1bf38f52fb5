"""Strategies and pipelines as data, so a view's configuration can be stored.

A strategy is stored as its registered type and the options that differ from
its defaults::

    {"type": "masking", "options": {"keep_last": 3, "trigger": {"$trigger": "over-budget"}}}

Values that are not JSON (triggers, concepts, paths, tuples) are written as
tagged data and read back into objects; a type becomes storable with
``register_type``. Python code (a ``Predicate`` trigger, a callable option) has
no data form: encoding it raises ``InvalidInput`` naming the field, because a
view re-opened in another process could not run it.

Built-in strategies register themselves with ``register_strategy``, exactly as
a third party's would.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePath
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.strategies.base import Strategy
from contextfold.strategies.pipeline import Pipeline

_STRATEGIES: dict[str, type[Any]] = {}
_TYPES: dict[str, type[Any]] = {}


def register_strategy(type_name: str, cls: type[Any]) -> None:
    """Make the dataclass ``cls`` storable as ``{"type": type_name, ...}``."""
    if not dataclasses.is_dataclass(cls):
        raise InvalidInput(f"{cls.__name__} must be a dataclass to be stored", field="cls")
    _STRATEGIES[type_name] = cls


def register_type(tag: str, cls: type[Any]) -> None:
    """Store instances of the dataclass ``cls`` as ``{"$<tag>": {fields}}``."""
    if not dataclasses.is_dataclass(cls):
        raise InvalidInput(f"{cls.__name__} must be a dataclass to be stored", field="cls")
    _TYPES[tag] = cls


def strategy_types() -> list[str]:
    return sorted(_STRATEGIES)


def registered_strategies() -> dict[str, type[Any]]:
    """Each registered strategy type and its class (a copy)."""
    return dict(_STRATEGIES)


def to_data(value: Any, field: str) -> Any:
    """``value`` as JSON data; ``field`` names where it sits, for the error."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): to_data(v, f"{field}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_data(v, f"{field}[{i}]") for i, v in enumerate(value)]
    for tag, cls in _TYPES.items():
        if type(value) is cls:
            return {f"${tag}": _fields_data(value, field, only_changed=False)}
    kind = "Python code" if callable(value) else f"a {type(value).__name__}"
    raise InvalidInput(
        f"{kind} cannot be stored with a view: use registered strategies, triggers and plain "
        "data, or pass local=True to keep the pipeline in this process only",
        field=field,
    )


def from_data(value: Any, field: str = "options") -> Any:
    """The inverse of ``to_data``: tagged data becomes objects again."""
    if isinstance(value, list):
        return [from_data(v, f"{field}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, Mapping):
        return value
    if len(value) == 1:
        (key,) = value
        if isinstance(key, str) and key.startswith("$"):
            cls = _TYPES.get(key[1:])
            if cls is None:
                raise InvalidInput(f"unknown stored type {key!r}", field=field)
            fields = value[key]
            if not isinstance(fields, Mapping):
                raise InvalidInput(f"{key} needs an object of fields", field=field)
            # Registered types are records (triggers, concepts): their sequences are tuples.
            built = {k: _tupled(from_data(v, f"{field}.{k}")) for k, v in fields.items()}
            return _build(cls, built, field)
    return {k: from_data(v, f"{field}.{k}") for k, v in value.items()}


def strategy_to_data(strategy: Strategy, field: str = "strategy") -> dict[str, Any]:
    for type_name, cls in _STRATEGIES.items():
        if type(strategy) is cls:
            return {"type": type_name, "options": _fields_data(strategy, f"{field}.options")}
    raise InvalidInput(
        f"strategy {type(strategy).__name__} is not registered: call register_strategy, "
        "or pass local=True to keep the pipeline in this process only",
        field=field,
    )


def strategy_from_data(data: Any, field: str = "strategy") -> Strategy:
    if not isinstance(data, Mapping) or not isinstance(data.get("type"), str):
        raise InvalidInput("a stored strategy is an object with a 'type'", field=field)
    cls = _STRATEGIES.get(data["type"])
    if cls is None:
        raise InvalidInput(
            f"unknown strategy type {data['type']!r} (known: {', '.join(strategy_types())})",
            field=f"{field}.type",
        )
    options = data.get("options") or {}
    if not isinstance(options, Mapping):
        raise InvalidInput("strategy options are an object", field=f"{field}.options")
    built: Strategy = _build(cls, from_data(options, f"{field}.options"), field)
    return built


def pipeline_to_data(pipeline: Pipeline) -> dict[str, Any]:
    return {
        "name": pipeline.name,
        "strategies": [
            strategy_to_data(s, f"pipeline.strategies[{i}]")
            for i, s in enumerate(pipeline.strategies)
        ],
    }


def pipeline_from_data(data: Any) -> Pipeline:
    if not isinstance(data, Mapping) or not isinstance(data.get("strategies"), list):
        raise InvalidInput("a stored pipeline has a 'strategies' list", field="pipeline")
    strategies: Sequence[Strategy] = [
        strategy_from_data(s, f"pipeline.strategies[{i}]") for i, s in enumerate(data["strategies"])
    ]
    return Pipeline(strategies, name=str(data.get("name") or "custom"))


def _fields_data(obj: Any, field: str, *, only_changed: bool = True) -> dict[str, Any]:
    """A dataclass's fields as data; with ``only_changed``, those that differ from the default."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if only_changed and _is_default(f, value):
            continue
        out[f.name] = to_data(value, f"{field}.{f.name}")
    return out


def _is_default(f: dataclasses.Field[Any], value: Any) -> bool:
    if f.default is not dataclasses.MISSING:
        return bool(value == f.default)
    factory: Callable[[], Any] | Any = f.default_factory
    if factory is not dataclasses.MISSING:
        return bool(value == factory())
    return False


def _tupled(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _build(cls: type[Any], options: Mapping[str, Any], field: str) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(options) - names)
    if unknown:
        raise InvalidInput(
            f"{cls.__name__} has no option {unknown[0]!r}", field=f"{field}.{unknown[0]}"
        )
    try:
        return cls(**options)
    except TypeError as exc:
        raise InvalidInput(f"{cls.__name__}: {exc}", field=field) from exc
