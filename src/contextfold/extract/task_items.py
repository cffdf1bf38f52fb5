"""What an agent's task state is made of, read from a transcript without a model.

The task-state strategy asks a model for the sections of a task state; the
offline stand-in (``llm.offline``) answers the same request from this module,
so a run without a model still carries the work forward: the user's latest
request and rules, the files, URLs and commands touched (with the tool that
touched each), the error lines, the assistant's reasons and open items, and its
last statement as the next step.

A transcript is ``strategies.transcript``'s: blocks opening with ``[role ...]: ``
at the start of a line, a tool call as ``-> name({...})``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from contextfold.extract.artifacts import extract_artifacts, is_constraint, sentences

_BLOCK = re.compile(r"^\[(?P<label>[^\]\n]{1,80})\]: ", re.MULTILINE)
_CALL = re.compile(r"^-> (?P<name>[\w.:-]+)\((?P<args>.*)\)$", re.MULTILINE)
_DECISION = re.compile(
    r"\b(?:because|since|instead|rather than|so that|decided|decide|chose|choose|opted)\b",
    re.IGNORECASE,
)
_OPEN = re.compile(
    r"\b(?:todo|fixme|still|remaining|left to|pending|not yet|later)\b", re.IGNORECASE
)
_COMMAND_KEYS = ("command", "cmd", "script")
STATEMENT_SENTENCES = 2
"""Sentences of the assistant's last statement kept as the next step."""


def blocks(transcript: str) -> list[tuple[str, str]]:
    """``(role, text)`` for each block of ``transcript``, in order."""
    found = list(_BLOCK.finditer(transcript))
    out = []
    for match, following in zip(found, [*found[1:], None], strict=True):
        end = following.start() if following is not None else len(transcript)
        role = match["label"].split()[0]
        out.append((role, transcript[match.end() : end].strip()))
    return out


def latest_request(transcript: str) -> list[str]:
    """The user's rules (constraint sentences), then their latest message, verbatim."""
    users = [text for role, text in blocks(transcript) if role == "user"]
    rules = [s for text in users for _, s in sentences(text) if is_constraint(s)]
    latest = users[-1:] if users else []
    return _unique([*(r for r in rules if not any(r in u for u in latest)), *latest])


def last_statement(transcript: str) -> list[str]:
    """The last sentences the assistant said (its tool calls aside): where it was going."""
    for role, text in reversed(blocks(transcript)):
        prose = _CALL.sub("", text).strip() if role == "assistant" else ""
        if prose:
            said = [s for _, s in sentences(prose)]
            return [" ".join(said[-STATEMENT_SENTENCES:])]
    return []


def error_lines(transcript: str) -> list[str]:
    """Each error line once, in order (tracebacks, ``Error:``, failed tests, exit codes)."""
    return _unique(extract_artifacts(transcript, ("error",)))


def touched(transcript: str) -> list[str]:
    """Paths, URLs and commands, each with the tools that touched it (``src/a.py (edit_file)``)."""
    tools: dict[str, list[str]] = {}
    for role, text in blocks(transcript):
        if role != "assistant":
            continue
        for call in _CALL.finditer(text):
            for command in _commands(call["args"]):
                tools.setdefault(command, []).append(call["name"])
            for item in extract_artifacts(call["args"], ("url", "path")):
                tools.setdefault(item, []).append(call["name"])
    items = [*tools, *extract_artifacts(transcript, ("url", "path"))]
    shown = []
    for item in _unique(items):
        names = _unique(tools.get(item, []))
        shown.append(f"{item} ({', '.join(names)})" if names else item)
    return shown


def reasons(transcript: str) -> list[str]:
    """The assistant's sentences that give a choice or its reason."""
    return _assistant_sentences(transcript, _DECISION.search)


def open_items(transcript: str) -> list[str]:
    """The assistant's sentences about what is still to do."""
    return _assistant_sentences(transcript, _OPEN.search)


EXTRACTORS: dict[str, Callable[[str], list[str]]] = {
    "requests": latest_request,
    "statement": last_statement,
    "errors": error_lines,
    "touched": touched,
    "reasons": reasons,
    "open": open_items,
    "none": lambda transcript: [],
}
"""The extractions a schema may name (``llm.offline``'s ``x-extract``), by name."""


def _assistant_sentences(transcript: str, wanted: Callable[[str], object]) -> list[str]:
    found: list[str] = []
    for role, text in blocks(transcript):
        if role == "assistant":
            prose = _CALL.sub("", text)
            found.extend(s for _, s in sentences(prose) if wanted(s))
    return _unique(found)


def _commands(arguments: str) -> list[str]:
    """The shell commands in a tool call's JSON arguments (``{"command": "pytest -q"}``)."""
    try:
        data = json.loads(arguments)
    except ValueError:
        return []
    if not isinstance(data, dict):
        return []
    return [data[k].strip() for k in _COMMAND_KEYS if isinstance(data.get(k), str) and data[k]]


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(i for i in items if i))
