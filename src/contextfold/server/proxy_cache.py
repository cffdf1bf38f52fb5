"""Anthropic prompt-cache breakpoints on a compacted Messages request.

Anthropic caches a prompt's beginning only up to a block marked
``cache_control``, at most four a request, and bills a cached read at a tenth
of the input price. A client that marks none pays full price for every turn,
though a compacted prompt's beginning changes only when a fold lands. So the
proxy marks, when the client marked nothing itself, where the prompt is stable:

- the end of the system prompt (never folded; with it, the tools before it);
- the end of the turns the proxy wrote (folds, markers): they change only when
  a fold lands;
- the end of the previous request (the turn before the newest exchange): what
  the last call wrote, read back now;
- the end of the prompt, written for the next request, which extends it.

Thinking blocks cannot carry ``cache_control``, and a compaction block goes back
exactly as Anthropic made it: a turn's last other block is marked.
A client's own marks, anywhere (the request, its tools, system or turns), leave
the request as the client made it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

MOST = 4
"""Anthropic's limit of breakpoints in one request."""
EPHEMERAL = {"type": "ephemeral"}
_UNMARKABLE = frozenset({"thinking", "redacted_thinking", "compaction"})
"""Blocks left as they are: thinking cannot carry a mark, and a compaction block is
sent back exactly as Anthropic made it."""


def client_marked(body: Mapping[str, Any]) -> bool:
    """Whether the client set a ``cache_control`` anywhere in its request."""
    return _marked(body)


def _marked(value: Any) -> bool:
    if isinstance(value, Mapping):
        return "cache_control" in value or any(_marked(v) for v in value.values())
    if isinstance(value, list):
        return any(_marked(v) for v in value)
    return False


def with_breakpoints(body: dict[str, Any], own: int) -> dict[str, Any]:
    """``body`` (an upstream Messages request) with breakpoints where its prompt is stable;
    ``own`` is how many of its leading turns the proxy wrote. The turns marked are copies."""
    turns: list[dict[str, Any]] = list(body.get("messages") or [])
    wanted = [own - 1, len(turns) - 3, len(turns) - 1]
    at = sorted({i for i in wanted if 0 <= i < len(turns)})
    out = {**body, "messages": turns}
    system = _marked_system(body.get("system"))
    room = MOST - (system is not None)
    if system is not None:
        out["system"] = system
    for i in at[-room:]:
        marked = _marked_turn(turns[i])
        if marked is not None:
            turns[i] = marked
    return out


def _marked_system(system: Any) -> list[dict[str, Any]] | None:
    """The system prompt as blocks with its last text block marked (None: none to mark)."""
    if isinstance(system, str) and system.strip():
        return [{"type": "text", "text": system, "cache_control": EPHEMERAL}]
    if isinstance(system, list) and system and isinstance(system[-1], Mapping):
        return [*system[:-1], {**system[-1], "cache_control": EPHEMERAL}]
    return None


def _marked_turn(turn: Mapping[str, Any]) -> dict[str, Any] | None:
    """The turn with its last markable block marked (None: it has none)."""
    content = turn.get("content")
    if isinstance(content, str):
        if not content.strip():
            return None
        return {**turn, "content": [{"type": "text", "text": content, "cache_control": EPHEMERAL}]}
    if not isinstance(content, Sequence):
        return None
    blocks = list(content)
    for i in range(len(blocks) - 1, -1, -1):
        block = blocks[i]
        if isinstance(block, Mapping) and block.get("type") not in _UNMARKABLE:
            blocks[i] = {**block, "cache_control": EPHEMERAL}
            return {**turn, "content": blocks}
    return None
