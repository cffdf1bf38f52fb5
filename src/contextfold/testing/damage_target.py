"""What a damage case works on: the compacted session's copy (``Target``), with the
ways to reach past the store into its file or its RAM, and the case record.

Shared by ``contextfold.testing.damage_cases`` (the cases) and
``contextfold.testing.damage`` (the runner).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from contextfold.core.folds import Fold
from contextfold.core.messages import Message
from contextfold.store.ram import RAMStore

SESSION = "damaged"
VIEW = "default"
BUDGET = 2_000
SYSTEM = "You are a coding agent. Fix the failing tests, one module at a time."


@dataclass
class Target:
    """What a case damages: the SQLite file (``conn``) or the RAM store, and what was there."""

    log: list[Message]
    folds: list[Fold]
    conn: sqlite3.Connection | None = None
    ram: RAMStore | None = None
    path: str = ""

    def __post_init__(self) -> None:
        self.last_seq = len(self.log)

    def fold(self, which: str) -> Fold:
        """A fold to damage: ``first``, ``last``, ``middle``, ``biggest`` or ``facts``."""
        placed = [f for f in self.folds if f.placement == "in_place"]
        if which == "facts":
            return next(f for f in self.folds if f.placement == "facts")
        if which == "biggest":
            return max(placed, key=lambda f: f.tokens_after)
        if which == "summary":
            return next(f for f in placed if f.kind != "masked") if placed else placed[0]
        return {"first": placed[0], "last": placed[-1], "middle": placed[len(placed) // 2]}[which]

    def sql(self, statement: str, *params: Any) -> None:
        assert self.conn is not None
        self.conn.execute(statement, params)

    def edit(self, which: str, columns: bool = False, **changes: Any) -> None:
        """Change keys of a fold's stored JSON (and, with ``columns``, its indexed columns)."""
        fold = self.fold(which)
        assert self.conn is not None
        body = json.loads(
            self.conn.execute("SELECT fold FROM folds WHERE id = ?", (fold.id,)).fetchone()[0]
        )
        body.update(changes)
        self.sql("UPDATE folds SET fold = ? WHERE id = ?", json.dumps(body), fold.id)
        if columns:
            for key, column in (
                ("start", "start_seq"),
                ("end", "end_seq"),
                ("placement", "placement"),
            ):
                if key in changes:
                    self.sql(f"UPDATE folds SET {column} = ? WHERE id = ?", changes[key], fold.id)

    def seq_of(self, role: str, after: int) -> int:
        """The first seq after ``after`` whose message has ``role`` (a tool call for ``call``)."""
        for seq, message in enumerate(self.log, 1):
            if seq <= after:
                continue
            if role == "call" and message.get("tool_calls"):
                return seq
            if message["role"] == role and role != "call":
                return seq
        raise LookupError(role)

    def ram_set(self, which: str, **changes: Any) -> None:
        """Change a fold object inside the RAM store, bypassing every check."""
        assert self.ram is not None
        fold = self.fold(which)
        kept = self.ram._folds[(SESSION, VIEW)]
        for i, item in enumerate(kept):
            if getattr(item, "id", None) == fold.id:
                for key, value in changes.items():
                    object.__setattr__(item, key, value)
                kept[i] = item


Damage = Callable[[Target], None]


@dataclass(frozen=True)
class Case:
    name: str
    backend: Literal["sqlite", "ram", "file"]
    damage: Damage
    expect: Literal["heal", "error"] = "heal"
