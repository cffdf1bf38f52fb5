"""The recall tools' calls as a model makes them: their names, their OpenAI function-tool
schemas, and their arguments read into checked values.

A model's mistake in a call (arguments that are not JSON, an unknown or wrong
field) is a ``ToolError`` naming the field, which ``RecallTools.answer`` turns
into an error result for the model instead of an exception.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

SEARCH = "contextfold_search"
EXPAND = "contextfold_expand"
FOLDS = "contextfold_folds"

ROLES = ("system", "developer", "user", "assistant", "tool")
DEFAULT_HITS = 10
MAX_HITS = 50


class ToolError(Exception):
    """A model's mistake in a call: answered as an error result naming ``field``."""

    def __init__(self, reason: str, field: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.field = field


def call_arguments(arguments: str | Mapping[str, Any], fields: frozenset[str]) -> dict[str, Any]:
    """The call's arguments as a dict of known fields; ``ToolError`` otherwise."""
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except ValueError as exc:
            raise ToolError(f"arguments are not JSON: {exc}", "arguments") from None
    else:
        parsed = arguments
    if not isinstance(parsed, Mapping):
        raise ToolError("arguments must be a JSON object", "arguments")
    unknown = sorted(str(k) for k in parsed if k not in fields)
    if unknown:
        raise ToolError(
            f"unknown argument {unknown[0]!r}; known: {', '.join(sorted(fields))}", unknown[0]
        )
    return {str(k): v for k, v in parsed.items() if v is not None}


def int_argument(args: Mapping[str, Any], name: str, *, least: int = 1) -> int | None:
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if type(value) is not int or value < least:
        raise ToolError(f"{name} must be an integer of at least {least}, not {value!r}", name)
    return value


def time_argument(args: Mapping[str, Any], name: str) -> float | None:
    """A time given as ISO 8601 (UTC unless it says) or unix seconds."""
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        if math.isfinite(value):
            return float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            return float(text)
        except ValueError:
            pass
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            pass
        else:
            return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    raise ToolError(
        f"{name} must be a time as ISO 8601 (2026-11-27T12:00:00Z) or unix seconds, not {value!r}",
        name,
    )


def roles_argument(args: Mapping[str, Any]) -> frozenset[str] | None:
    value = args.get("role")
    if value is None:
        return None
    given = [value] if isinstance(value, str) else value
    if not isinstance(given, list) or not given or not all(r in ROLES for r in given):
        raise ToolError(f"role must be one of {', '.join(ROLES)}, or a list of them", "role")
    return frozenset(given)


def cursor_argument(args: Mapping[str, Any]) -> tuple[int, int] | None:
    """A cursor as handed out: ``page:seq``, the next page's number and first seq."""
    value = args.get("cursor")
    if value is None:
        return None
    page, _, seq = str(value).partition(":")
    if not (page.isdigit() and seq.isdigit() and int(page) >= 1 and int(seq) >= 1):
        raise ToolError(f"cursor must be a next_cursor handed out, not {value!r}", "cursor")
    return int(page), int(seq)


def iso_time(when: float) -> str:
    """Unix seconds as ISO 8601 in UTC, to the second."""
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def result_text(value: Any) -> str:
    """A result as the JSON text a model is sent: compact, non-ASCII kept as it is."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# -- the schemas --------------------------------------------------------------

_TIME = {
    "type": ["string", "number"],
    "description": "ISO 8601 (2026-11-27T12:00:00Z; UTC unless it says) or unix seconds",
}
_CURSOR = {"type": "string", "description": "next_cursor of the previous page"}

DEFINITIONS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": SEARCH,
            "description": (
                "Search the whole conversation so far, including what was folded out of "
                "your context (shown as [folded: seq A-B]), by words. Returns the best "
                "matching messages: seq, role, time, a snippet, and the fold hiding each."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "words to look for"},
                    "role": {
                        "description": "only messages of this role (or these roles)",
                        "anyOf": [
                            {"type": "string", "enum": list(ROLES)},
                            {"type": "array", "items": {"type": "string", "enum": list(ROLES)}},
                        ],
                    },
                    "after": {
                        **_TIME,
                        "description": "only messages from this time on: "
                        + str(_TIME["description"]),
                    },
                    "before": {
                        **_TIME,
                        "description": "only messages before this time: "
                        + str(_TIME["description"]),
                    },
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_HITS,
                        "default": DEFAULT_HITS,
                    },
                },
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": EXPAND,
            "description": (
                "Read the original messages a fold replaced: give the fold's id, or a seq "
                "range start and end (as in [folded: seq 12-40]). Long ranges come in pages: "
                "pass next_cursor back to read on."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": "a fold id from contextfold_folds"},
                    "start": {"type": "integer", "minimum": 1, "description": "first seq"},
                    "end": {"type": "integer", "minimum": 1, "description": "last seq"},
                    "page": {"type": "integer", "minimum": 1, "description": "page number, from 1"},
                    "cursor": _CURSOR,
                },
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": FOLDS,
            "description": (
                "List the folds of this conversation: the parts replaced by summaries in "
                "your context, each with its id, seq range, kind, tokens and a one-line summary."
            ),
            "parameters": {
                "type": "object",
                "properties": {"cursor": _CURSOR},
                "additionalProperties": False,
            },
        },
    },
]

FIELDS: dict[str, frozenset[str]] = {
    tool["function"]["name"]: frozenset(tool["function"]["parameters"]["properties"])
    for tool in DEFINITIONS
}


def tool_definitions() -> list[dict[str, Any]]:
    """The recall tools' schemas without a session: what a caller lists before opening one."""
    return json.loads(json.dumps(DEFINITIONS))  # type: ignore[no-any-return]
