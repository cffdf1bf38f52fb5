"""The damages of ``damage``'s cases, one function each, and the list of cases (``CASES``).

Each edits a copy of the compacted session (``damage.template``) the way a
careless hand or a foreign tool would: fold rows in the SQLite file, message
rows, the RAM store's internals, files that are not ours.
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from contextfold.core.tokens import get_counter
from contextfold.testing.damage import (
    SESSION,
    VIEW,
    Case,
    CaseOutcome,
    Damage,
    Target,
    run,
    template,
)


def _write(target: Target, data: bytes) -> None:
    Path(target.path).write_bytes(data)


def _foreign(target: Target) -> None:
    os.remove(target.path)
    conn = sqlite3.connect(target.path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('ann')")
    conn.commit()
    conn.close()


def _truncated(target: Target) -> None:
    data = Path(target.path).read_bytes()
    _write(target, data[: len(data) // 3])


def _second_facts(t: Target) -> None:
    facts = t.fold("facts")
    body = {
        k: v
        for k, v in replace(facts, id="copy-of-facts", created_at=facts.created_at + 1)
        .to_dict()
        .items()
        if k != "superseded_by"
    }
    t.sql(
        "INSERT INTO folds (id, session_id, view, start_seq, end_seq, placement, kind, fold, "
        "created_at) VALUES (?, ?, ?, ?, ?, 'facts', 'facts', ?, ?)",
        "copy-of-facts",
        SESSION,
        VIEW,
        facts.start,
        facts.end,
        json.dumps(body),
        facts.created_at + 1,
    )


def _duplicate(t: Target) -> None:
    fold = t.fold("last")
    body = {
        k: v
        for k, v in replace(fold, id="twin", created_at=fold.created_at + 1).to_dict().items()
        if k != "superseded_by"
    }
    t.sql(
        "INSERT INTO folds (id, session_id, view, start_seq, end_seq, placement, kind, fold, "
        "created_at) VALUES ('twin', ?, ?, ?, ?, 'in_place', ?, ?, ?)",
        SESSION,
        VIEW,
        fold.start,
        fold.end,
        fold.kind,
        json.dumps(body),
        fold.created_at + 1,
    )


def _unsupersede(t: Target) -> None:
    t.sql("UPDATE folds SET superseded_by = NULL WHERE superseded_by IS NOT NULL")


def _overlap(t: Target) -> None:
    first = t.fold("first")
    placed = [f for f in t.folds if f.placement == "in_place"]
    nxt = placed[1]
    t.edit("first", columns=True, end=nxt.start + max((nxt.end - nxt.start) // 2, 0))
    del first


def _split_start(t: Target) -> None:
    fold = t.fold("summary")
    t.edit("summary", columns=True, start=t.seq_of("tool", fold.start))


def _split_end(t: Target) -> None:
    fold = t.fold("summary")
    t.edit("summary", columns=True, end=t.seq_of("call", fold.start))


def _orphan_tool(t: Target) -> None:
    message = {"role": "tool", "tool_call_id": "zz", "content": "stray"}
    t.edit("summary", messages=[message], tokens_after=get_counter().message(message))


def _unanswered(t: Target) -> None:
    call = {"id": "q1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    t.edit("summary", messages=[message], tokens_after=get_counter().message(message))


def _cover_latest_user(t: Target) -> None:
    last = len(t.log)
    user = max(seq for seq, m in enumerate(t.log, 1) if m["role"] == "user")
    fold = t.fold("last")
    message = {"role": "user", "content": "[summary of everything]"}
    t.edit(
        "last",
        columns=True,
        start=fold.start,
        end=last,
        messages=[message],
        tokens_after=get_counter().message(message),
    )
    t.sql(
        "DELETE FROM folds WHERE start_seq > ? AND id != ? AND placement = 'in_place'",
        fold.start,
        fold.id,
    )
    del user


def _huge_text(t: Target) -> None:
    t.edit("summary", messages=[{"role": "user", "content": "word " * 20_000}])


def _delete_last_message(t: Target) -> None:
    t.sql("DELETE FROM messages WHERE session_id = ? AND seq = ?", SESSION, len(t.log))
    t.log.pop()


def _delete_folds_row(t: Target) -> None:
    t.sql("DELETE FROM folds WHERE id = ?", t.fold("summary").id)


def _message_json(text: str) -> Damage:
    def damage(t: Target) -> None:
        t.sql(
            "UPDATE messages SET message = ? WHERE session_id = ? AND seq = ?",
            text,
            SESSION,
            len(t.log) - 3,
        )

    return damage


def _ram_delete_last(t: Target) -> None:
    assert t.ram is not None
    t.ram._log[SESSION].pop()
    t.log.pop()


def _ram_replace(which: str, value: Any) -> Damage:
    def damage(t: Target) -> None:
        assert t.ram is not None
        fold = t.fold(which)
        kept = t.ram._folds[(SESSION, VIEW)]
        kept[:] = [value if getattr(f, "id", None) == fold.id else f for f in kept]

    return damage


def _ram_unsupersede(t: Target) -> None:
    assert t.ram is not None
    for item in t.ram._folds[(SESSION, VIEW)]:
        object.__setattr__(item, "superseded_by", None)


def _ram_overlap(t: Target) -> None:
    placed = [f for f in t.folds if f.placement == "in_place"]
    t.ram_set("first", end=placed[1].start)


def _edit(which: str, columns: bool = False, **changes: Any) -> Damage:
    return lambda t: t.edit(which, columns, **changes)


def _sql(statement: str) -> Damage:
    return lambda t: t.sql(statement)


def _ram(which: str, **changes: Any) -> Damage:
    return lambda t: t.ram_set(which, **changes)


CASES: list[Case] = [
    # Fold rows in the SQLite file: their JSON.
    Case(
        "fold-json-truncated",
        "sqlite",
        _sql(
            "UPDATE folds SET fold = substr(fold, 1, 40) WHERE superseded_by IS NULL AND placement = 'in_place' AND rowid % 2 = 0"
        ),
    ),
    Case(
        "fold-json-null",
        "sqlite",
        lambda t: t.sql("UPDATE folds SET fold = 'null' WHERE id = ?", t.fold("summary").id),
    ),
    Case(
        "fold-json-list",
        "sqlite",
        lambda t: t.sql("UPDATE folds SET fold = '[]' WHERE id = ?", t.fold("last").id),
    ),
    Case(
        "fold-json-string",
        "sqlite",
        lambda t: t.sql("UPDATE folds SET fold = '\"text\"' WHERE id = ?", t.fold("first").id),
    ),
    Case(
        "fold-json-empty",
        "sqlite",
        lambda t: t.sql("UPDATE folds SET fold = '' WHERE id = ?", t.fold("middle").id),
    ),
    Case("fold-missing-messages", "sqlite", lambda t: _drop_key(t, "summary", "messages")),
    Case("fold-messages-empty", "sqlite", _edit("summary", messages=[])),
    Case("fold-messages-string", "sqlite", _edit("summary", messages="hello")),
    Case("fold-messages-not-objects", "sqlite", _edit("last", messages=[1, 2])),
    Case(
        "fold-role-unknown",
        "sqlite",
        _edit("summary", messages=[{"role": "robot", "content": "x"}]),
    ),
    Case("fold-role-missing", "sqlite", _edit("last", messages=[{"content": "x"}])),
    Case(
        "fold-content-number", "sqlite", _edit("summary", messages=[{"role": "user", "content": 5}])
    ),
    Case("fold-orphan-tool", "sqlite", _orphan_tool),
    Case("fold-unanswered-call", "sqlite", _unanswered),
    # Token counts.
    Case("fold-tokens-under", "sqlite", _edit("biggest", tokens_after=1)),
    Case("fold-tokens-over", "sqlite", _edit("biggest", tokens_after=10**9)),
    Case("fold-tokens-negative", "sqlite", _edit("summary", tokens_after=-5)),
    Case("fold-tokens-string", "sqlite", _edit("summary", tokens_after="12")),
    Case("fold-text-huge", "sqlite", _huge_text),
    Case("facts-tokens-under", "sqlite", _edit("facts", tokens_after=1)),
    # Ranges.
    Case(
        "fold-start-after-end",
        "sqlite",
        lambda t: t.edit("summary", True, start=t.fold("summary").end + 5),
    ),
    Case("fold-start-zero", "sqlite", _edit("first", True, start=0)),
    Case("fold-past-log", "sqlite", lambda t: t.edit("last", True, end=len(t.log) + 50)),
    Case("fold-past-log-json-only", "sqlite", lambda t: t.edit("last", end=len(t.log) + 50)),
    Case(
        "fold-start-column-only",
        "sqlite",
        _sql(
            "UPDATE folds SET start_seq = start_seq + 1 WHERE superseded_by IS NULL AND placement = 'in_place'"
        ),
    ),
    Case("fold-covers-system", "sqlite", _edit("first", True, start=1)),
    Case("fold-splits-unit-start", "sqlite", _split_start),
    Case("fold-splits-unit-end", "sqlite", _split_end),
    Case("fold-partial-overlap", "sqlite", _overlap),
    Case("fold-duplicated", "sqlite", _duplicate),
    Case("fold-unsuperseded", "sqlite", _unsupersede),
    Case("fold-covers-latest-user", "sqlite", _cover_latest_user),
    Case("facts-twice", "sqlite", _second_facts),
    # Other fields and columns.
    Case("fold-placement-unknown", "sqlite", _edit("summary", True, placement="sideways")),
    Case("fold-placement-json-only", "sqlite", _edit("summary", placement="facts")),
    Case("fold-view-other", "sqlite", _edit("summary", view="planner")),
    Case("fold-id-other", "sqlite", _edit("summary", id="someone-else")),
    Case("fold-data-string", "sqlite", _edit("summary", data="nope")),
    Case("fold-created-at-text", "sqlite", _edit("summary", created_at="yesterday")),
    Case("fold-usage-list", "sqlite", _edit("summary", usage=[1])),
    Case("fold-text-null", "sqlite", _edit("summary", text=None)),
    Case(
        "fold-superseded-by-nowhere",
        "sqlite",
        lambda t: t.sql(
            "UPDATE folds SET superseded_by = 'gone' WHERE id = ?", t.fold("summary").id
        ),
    ),
    Case("fold-row-deleted", "sqlite", _delete_folds_row),
    Case("folds-all-deleted", "sqlite", _sql("DELETE FROM folds")),
    Case("fold-version-deleted", "sqlite", _sql("DELETE FROM fold_versions")),
    Case("fold-version-negative", "sqlite", _sql("UPDATE fold_versions SET version = -3")),
    Case("fold-all-json-garbage", "sqlite", _sql("UPDATE folds SET fold = 'garbage'")),
    # The log: a deleted row heals (its seq is never handed out again); a damaged one is an error.
    Case("message-last-deleted", "sqlite", _delete_last_message),
    Case("message-json-bad", "sqlite", _message_json("{bad"), "error"),
    Case("message-json-list", "sqlite", _message_json("[]"), "error"),
    Case(
        "message-role-unknown",
        "sqlite",
        _message_json('{"role": "robot", "content": "x"}'),
        "error",
    ),
    Case(
        "message-tokens-text",
        "sqlite",
        lambda t: t.sql("UPDATE messages SET tokens = 'many' WHERE seq = ?", len(t.log) - 3),
        "error",
    ),
    # A count render would trust to fit its budget: one its message's length rules out.
    Case(
        "message-tokens-zero",
        "sqlite",
        lambda t: t.sql("UPDATE messages SET tokens = 0 WHERE seq = ?", len(t.log) - 3),
        "error",
    ),
    # Files that are not a contextfold database of this version.
    Case("file-random-bytes", "file", lambda t: _write(t, os.urandom(8192)), "error"),
    Case("file-other-app", "file", _foreign, "error"),
    Case("file-newer-schema", "file", lambda t: _newer(t), "error"),
    Case("file-truncated", "file", _truncated, "error"),
    Case("file-empty", "file", lambda t: _write(t, b"")),
    # The RAM store's internals.
    Case("ram-fold-replaced-by-dict", "ram", _ram_replace("summary", {"id": "x", "start": 1})),
    Case("ram-fold-replaced-by-none", "ram", _ram_replace("last", None)),
    Case("ram-tokens-under", "ram", _ram("biggest", tokens_after=1)),
    Case("ram-past-log", "ram", lambda t: t.ram_set("last", end=len(t.log) + 9)),
    Case("ram-messages-empty", "ram", _ram("summary", messages=())),
    Case("ram-role-unknown", "ram", _ram("summary", messages=({"role": "robot", "content": "x"},))),
    Case("ram-start-text", "ram", _ram("first", start="x")),
    Case("ram-data-none", "ram", _ram("summary", data=None)),
    Case("ram-unsuperseded", "ram", _ram_unsupersede),
    Case("ram-overlap", "ram", _ram_overlap),
    Case(
        "ram-folds-cleared",
        "ram",
        lambda t: t.ram._folds[(SESSION, VIEW)].clear() if t.ram else None,
    ),
    Case("ram-message-last-deleted", "ram", _ram_delete_last),
]


def _drop_key(t: Target, which: str, key: str) -> None:
    fold = t.fold(which)
    assert t.conn is not None
    body = json.loads(
        t.conn.execute("SELECT fold FROM folds WHERE id = ?", (fold.id,)).fetchone()[0]
    )
    body.pop(key)
    t.sql("UPDATE folds SET fold = ? WHERE id = ?", json.dumps(body), fold.id)


def _newer(t: Target) -> None:
    conn = sqlite3.connect(t.path)
    conn.execute("INSERT INTO _migrations VALUES ('999_from_the_future', 0)")
    conn.commit()
    conn.close()


def run_all(n: int, cases: list[Case] | None = None) -> list[CaseOutcome]:
    with tempfile.TemporaryDirectory() as workdir:
        made = template(n, workdir)
        return [run(case, n, made, workdir) for case in (CASES if cases is None else cases)]
