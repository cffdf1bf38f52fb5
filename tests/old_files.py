"""SQLite files as an older contextfold wrote them: its migrations only, rows written raw.

Running today's store code over a partial schema is not how an old file came
to be, so old files are written here with the statements of the migrations
they had and the rows those versions stored.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contextfold.core.folds import Fold
from contextfold.store.sqlite.migrations import MIGRATIONS


def old_file(
    path: Path,
    migrations: int,
    messages: list[dict[str, Any]],
    folds: tuple[Fold, ...] = (),
    tokens: Sequence[int] | None = None,
) -> None:
    """A file of session ``s`` with ``messages`` (counted ``tokens``, else 1 each),
    and ``folds`` in its view, at ``migrations``."""
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    for name, statements in MIGRATIONS[:migrations]:
        for statement in statements:
            raw.execute(statement)
        raw.execute("INSERT INTO _migrations VALUES (?, 0)", (name,))
    raw.execute(
        "INSERT INTO sessions (id, encoding, meta, created_at) VALUES ('s', 'o200k_base', '{}', 0)"
    )
    raw.executemany(
        "INSERT INTO messages VALUES ('s', ?, ?, ?, ?, NULL, 0)",
        [
            (i, m["role"], json.dumps(m), 1 if tokens is None else tokens[i - 1])
            for i, m in enumerate(messages, 1)
        ],
    )
    for fold in folds:
        body = {k: v for k, v in fold.to_dict().items() if k != "superseded_by"}
        raw.execute(
            "INSERT INTO folds (id, session_id, view, start_seq, end_seq, placement, kind, fold, "
            "superseded_by, created_at) VALUES (?, 's', ?, ?, ?, ?, ?, ?, NULL, 0)",
            (fold.id, fold.view, fold.start, fold.end, fold.placement, fold.kind, json.dumps(body)),
        )
    if folds:
        raw.execute("INSERT INTO fold_versions VALUES ('s', ?, 1)", (folds[0].view,))
    raw.close()
