"""Declarative view filters: which messages a view sees, as data a store can keep.

A filter is a JSON object. A leaf names what a message must match, every key
at once::

    {"role": "user"}                        {"role": ["user", "assistant"]}
    {"name": "Planner"}                     {"meta": {"send_to": "Planner"}}
    {"tool": "todo_write"}                  {"content": ["CLAUDE.md", "AGENTS.md"]}

``tool`` matches an assistant message calling a tool of that name (and a tool
result that names its tool); ``content`` matches a message whose text, tool
calls included (``text_of``), contains one of the strings. ``{"any": [...]}``, ``{"all": [...]}``, ``{"not": {...}}`` combine them. A
planner's view over a multi-agent log, for example::

    {"any": [{"role": "user"}, {"name": "Planner"}, {"meta": {"send_to": "Planner"}}]}

A Python callable can filter too, but it cannot be stored: it stays with the
``Memory`` object that was given it (see ``Session.view``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message, text_of

MessageFilter = Callable[[Message], bool]
_LEAF_KEYS = ("role", "name", "tool", "content", "meta")


def check_filter(spec: Any, field: str = "filter") -> None:
    """Refuse a filter that is not one of the shapes above, naming where it goes wrong."""
    if not isinstance(spec, Mapping) or not spec:
        raise InvalidInput("a filter is a non-empty object", field=field)
    for key, value in spec.items():
        where = f"{field}.{key}"
        if key in ("any", "all"):
            if not isinstance(value, list) or not value:
                raise InvalidInput(f"'{key}' takes a non-empty list of filters", field=where)
            for i, part in enumerate(value):
                check_filter(part, f"{where}[{i}]")
        elif key == "not":
            check_filter(value, where)
        elif key in ("role", "name", "tool", "content"):
            values = value if isinstance(value, list) else [value]
            if not values or not all(isinstance(v, str) and v for v in values):
                raise InvalidInput(f"'{key}' is a non-empty string or a list of them", field=where)
        elif key == "meta":
            if not isinstance(value, Mapping) or not value:
                raise InvalidInput("'meta' is an object of keys to match", field=where)
        else:
            raise InvalidInput(
                f"unknown filter key {key!r} (expected any, all, not, {', '.join(_LEAF_KEYS)})",
                field=where,
            )


def compile_filter(spec: Mapping[str, Any], field: str = "filter") -> MessageFilter:
    """A predicate over messages for a filter spec, checked (``field``: where it was given)."""
    check_filter(spec, field)
    tests = [_compile_key(key, value) for key, value in spec.items()]
    return lambda message: all(test(message) for test in tests)


def _compile_key(key: str, value: Any) -> MessageFilter:
    if key == "any":
        parts = [compile_filter(p) for p in value]
        return lambda m: any(p(m) for p in parts)
    if key == "all":
        parts = [compile_filter(p) for p in value]
        return lambda m: all(p(m) for p in parts)
    if key == "not":
        inner = compile_filter(value)
        return lambda m: not inner(m)
    if key == "meta":
        wanted = {k: v if isinstance(v, list) else [v] for k, v in value.items()}
        return lambda m: all((m.get("meta") or {}).get(k) in vs for k, vs in wanted.items())
    allowed = frozenset(value if isinstance(value, list) else [value])
    if key == "tool":
        return lambda m: bool(allowed & set(tool_names(m)))
    if key == "content":
        return lambda m: any(part in text_of(m) for part in allowed)
    return lambda m: m.get(key) in allowed


def tool_names(message: Message) -> list[str]:
    """The tools a message is about: those an assistant message calls, or the one a tool
    result names."""
    if message.get("role") == "tool":
        name = message.get("name")
        return [name] if isinstance(name, str) else []
    return [str(c["function"]["name"]) for c in message.get("tool_calls") or ()]
