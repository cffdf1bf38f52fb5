"""Pin rules: which messages a view brings back verbatim after its folds, as data.

A view's ``pins`` setting is a list; each item is a preset's name or a rule::

    ["todo", "rules"]
    [{"filter": {"tool": "todo_write"}, "mode": "latest"},
     {"filter": {"content": "DECISION:"}, "mode": "all"},
     {"filter": {"tool": ["Read", "read_file"]}, "key": "path"}]

A rule selects messages with the view filter language
(``contextfold.memory.filters``) and says how they come back: ``"latest"`` (the
default) brings back only the newest message it selects, one per ``key`` when
it has one (``"tool"``: the tool called; ``"path"``: the file the call names; a
message without that key is not pinned by the rule),
and ``"all"`` every one. A selected message comes back with its tool unit (the
call and all its results), since neither is valid in a prompt without the other.

The presets (``PRESETS``) cover what agent CLIs keep updating:

- ``todo``: the latest to-do list written by a tool (Claude Code's
  ``TodoWrite``, ``todo_write``, Codex's ``update_plan``);
- ``rules``: the rule files (``CLAUDE.md``, ``AGENTS.md``), as the latest
  message that hands them to the agent (Claude Code's ``<system-reminder>``,
  Codex's "AGENTS.md instructions"), and the latest read of each by a tool;
- ``plan``: the latest plan (Claude Code's ``ExitPlanMode`` call, or a message
  whose ``meta`` has ``"kind": "plan"``; the wire formats mark no plan of their own).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message
from contextfold.memory.filters import MessageFilter, compile_filter, tool_names

DEFAULT_SHARE = 0.25
"""The most of the budget pinned messages take by default (``ViewConfig.pins_share``)."""
MODES = ("latest", "all")
KEYS = ("tool", "path")
RULE_FIELDS = ("filter", "mode", "key")
PATH_ARGUMENTS = ("file_path", "path", "filename", "notebook_path")
"""Tool-call arguments that name the file a call is about, in the order tried."""

_RULE_FILES = ["CLAUDE.md", "AGENTS.md"]
PRESETS: dict[str, tuple[dict[str, Any], ...]] = {
    "todo": ({"filter": {"tool": ["TodoWrite", "todo_write", "update_plan"]}},),
    "rules": (
        {
            "filter": {
                "all": [
                    {"role": "user"},
                    {"content": ["<system-reminder>", "AGENTS.md instructions"]},
                    {"content": _RULE_FILES},
                ]
            }
        },
        {
            "filter": {"all": [{"role": "assistant"}, {"content": _RULE_FILES}]},
            "key": "path",
        },
    ),
    "plan": ({"filter": {"any": [{"tool": "ExitPlanMode"}, {"meta": {"kind": "plan"}}]}},),
}
"""Pin presets by name: the rules each stands for."""
AGENT_PINS = ("todo", "rules")
"""What the proxy pins in the views it creates: an agent CLI's to-do list and rule files."""


@dataclass(frozen=True)
class PinRule:
    """One checked rule: what it selects, and how what it selects comes back."""

    where: str
    """Where the rule was given (``pins[0]``), named in what it leaves out."""
    selects: MessageFilter
    mode: Literal["latest", "all"] = "latest"
    key: Literal["tool", "path"] | None = None


def pin_rules(pins: Any) -> tuple[PinRule, ...]:
    """The checked rules of a ``pins`` setting, presets expanded; ``InvalidInput`` naming
    ``pins[i]`` (and the rule's field) for a bad one."""
    if isinstance(pins, str | Mapping) or not isinstance(pins, Sequence):
        raise InvalidInput("pins is a list of pin presets or rules", field="pins")
    rules: list[PinRule] = []
    for i, given in enumerate(pins):
        where = f"pins[{i}]"
        if isinstance(given, str):
            preset = PRESETS.get(given)
            if preset is None:
                known = ", ".join(sorted(PRESETS))
                raise InvalidInput(f"unknown pin preset {given!r} (one of {known})", field=where)
            rules.extend(_rule(rule, where) for rule in preset)
        else:
            rules.append(_rule(given, where))
    return tuple(rules)


def _rule(given: Any, where: str) -> PinRule:
    if not isinstance(given, Mapping):
        raise InvalidInput("a pin is a preset's name or a rule object", field=where)
    unknown = sorted(str(k) for k in set(given) - set(RULE_FIELDS))
    if unknown:
        raise InvalidInput(f"unknown pin field {unknown[0]!r}", field=f"{where}.{unknown[0]}")
    if "filter" not in given:
        raise InvalidInput("a pin rule needs a filter", field=f"{where}.filter")
    selects = compile_filter(given["filter"], f"{where}.filter")
    mode = given.get("mode", "latest")
    if mode not in MODES:
        raise InvalidInput("mode is 'latest' or 'all'", field=f"{where}.mode")
    key = given.get("key")
    if key is not None and key not in KEYS:
        raise InvalidInput("key is 'tool', 'path' or null", field=f"{where}.key")
    if key is not None and mode == "all":
        raise InvalidInput("a key groups 'latest' pins; 'all' takes none", field=f"{where}.key")
    return PinRule(where, selects, mode, key)


def check_share(share: Any) -> None:
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share < 1:
        raise InvalidInput("pins_share is a share of the budget in (0, 1)", field="pins_share")


def call_key(message: Message, key: Literal["tool", "path"]) -> str | None:
    """What a call groups its ``latest`` pins by: the first tool it calls, or the file
    that call's arguments name (None: the message has none)."""
    calls = message.get("tool_calls") or ()
    if key == "tool":
        names = tool_names(message)
        return names[0] if names else None
    for call in calls:
        try:
            arguments = json.loads(call["function"]["arguments"] or "{}")
        except ValueError:
            continue
        if isinstance(arguments, dict):
            for name in PATH_ARGUMENTS:
                if isinstance(arguments.get(name), str) and arguments[name]:
                    return str(arguments[name])
    return None
