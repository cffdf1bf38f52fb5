"""Stored token counts follow the current counting formula.

Every message is stored with its token count, and render adds those counts up
to keep a prompt within its budget; a count by an older formula (lower, say,
because a field was not counted yet) could let a prompt overflow. A file
therefore records which formula its counts follow (``COUNT_VERSION`` of
``contextfold.core.tokens``). Each backend's migrations recount inside the
write transaction that migrates a database on open (SQLite's ``recount`` in
``contextfold.store.sqlite.migrations``), with the pieces here: a file recorded with an older
version, or with none (written before versions were recorded), has every
message's count redone with its session's encoding, and the new version is
recorded in the same transaction. A second process opening the file at once
waits for that transaction's write lock and then finds the version current.

Only the ``tokens`` column changes: the message JSON is the log, kept byte for
byte. Folds are left to the view's checks, which quarantine a fold whose stored
count differs from a fresh count of its messages (``contextfold.core.fold_checks``)
so the next compaction makes it again; that is rare, since folds are mostly
summaries and a plain text message counts the same by every version.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from contextfold.core.errors import InvalidInput, StoreError
from contextfold.core.tokens import COUNT_VERSION, TokenCounter, get_counter


def current(recorded: int | None, where: str) -> bool:
    """Whether counts recorded at version ``recorded`` are this code's; every store asks.

    Refuses counts by a newer formula than this code knows: it would misjudge
    every budget.
    """
    if recorded is not None and recorded > COUNT_VERSION:
        raise StoreError(
            f"{where} was written by a newer contextfold (token count version {recorded}, "
            f"this one counts by version {COUNT_VERSION}); upgrade contextfold to open it"
        )
    return recorded == COUNT_VERSION


def stale(encoding: Any, rows: Iterable[tuple[Any, Any, Any]]) -> list[tuple[int, int]]:
    """``(fresh count, seq)`` of a session's ``(seq, message JSON, tokens)`` rows counted
    otherwise now; none for an encoding no session can be opened with."""
    counter = _counter(encoding)
    if counter is None:
        return []
    return [
        (fresh, seq)
        for seq, text, tokens in rows
        if (fresh := _count(counter, text)) is not None and fresh != tokens
    ]


def _counter(encoding: Any) -> TokenCounter | None:
    """The session's counter; None for an encoding no session can be opened with."""
    try:
        return get_counter(encoding) if isinstance(encoding, str) else None
    except InvalidInput:
        return None


def _count(counter: TokenCounter, text: Any) -> int | None:
    """A message's fresh count; None for a damaged row, left for a read to report."""
    try:
        message = json.loads(text)
        return counter.message(message) if isinstance(message, dict) else None
    except (TypeError, ValueError, KeyError, AttributeError):
        return None
