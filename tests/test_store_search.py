"""Search in stores opened over files and schemas from before the search index."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pg
import pytest
from old_files import old_file

from contextfold.core.errors import StoreError
from contextfold.core.log import NewMessage
from contextfold.store import SQLiteStore
from contextfold.store.postgres import migrations as pg_schema
from contextfold.store.search import SEQ_BITS, index_rowid, stored_text, term_counts
from contextfold.store.sqlite.migrations import MIGRATIONS

_OLD_LOG = [
    {"role": "user", "content": "where is the lighthouse"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "map", "arguments": '"cove"'}}
        ],
    },
    {"role": "user", "content": [{"type": "text", "text": "the lighthouse by the cove"}]},
]


def _before_search(name: str) -> int:
    return [n for n, _ in MIGRATIONS].index(name)


def test_an_old_sqlite_file_gains_the_index_for_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old_file(path, _before_search("007_message_search"), _OLD_LOG)
    store = SQLiteStore(path)
    assert {h.seq for h in store.search("s", "lighthouse")} == {1, 3}
    assert store.search("s", "map cove")[0].seq == 2
    store.append("s", [NewMessage({"role": "user", "content": "lighthouse again"}, 1)])
    assert {h.seq for h in store.search("s", "lighthouse")} == {1, 3, 4}
    assert store.delete_session("s")
    store.close()
    reopened = SQLiteStore(path)
    reopened.create_session("s", encoding="o200k_base")
    assert reopened.search("s", "lighthouse") == []
    reopened.close()


def test_an_old_sqlite_file_with_a_damaged_row_still_opens(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old_file(path, _before_search("007_message_search"), _OLD_LOG)
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE messages SET message = '{\"role\": ' WHERE seq = 2")
    store = SQLiteStore(path)
    assert {h.seq for h in store.search("s", "lighthouse cove map")} == {1, 3}
    store.close()


@pytest.mark.parametrize("first_missing", ["002_message_search", "004_session_search"])
def test_an_old_postgres_schema_gains_the_index_for_its_rows(
    monkeypatch: pytest.MonkeyPatch, first_missing: str
) -> None:
    pytest.importorskip("psycopg")
    from contextfold.store.postgres import PostgresStore

    pg.require_postgres()
    names = [n for n, _ in pg_schema.MIGRATIONS]
    old = pg_schema.MIGRATIONS[: names.index(first_missing)]
    with pg.fresh_schema() as schema:
        with monkeypatch.context() as patch:
            patch.setattr(pg_schema, "MIGRATIONS", old)
            first = PostgresStore(pg.url(schema))
            first.create_session("s", encoding="o200k_base")
            with pg.raw(schema) as conn:
                conn.cursor().executemany(
                    "INSERT INTO messages (session_id, seq, role, message, tokens, key, "
                    "created_at) VALUES ('s', %s, %s, %s, 1, NULL, 0)",
                    [(i, m["role"], json.dumps(m)) for i, m in enumerate(_OLD_LOG, 1)],
                )
                conn.execute("UPDATE sessions SET last_seq = 3 WHERE id = 's'")
                texts = [stored_text(json.dumps(m)) for m in _OLD_LOG]
                if "002_message_search" in names[: len(old)]:
                    conn.cursor().executemany(
                        "UPDATE messages SET words = to_tsvector('simple', %s) WHERE seq = %s",
                        [(text, i) for i, text in enumerate(texts, 1)],
                    )
                if "003_search_terms" in names[: len(old)]:
                    conn.cursor().executemany(
                        "INSERT INTO search_terms VALUES ('s', %s, %s)",
                        list(term_counts(texts).items()),
                    )
            first.close()
        store = PostgresStore(pg.url(schema))
        assert store.applied == names[names.index(first_missing) :]
        assert {h.seq for h in store.search("s", "lighthouse")} == {1, 3}
        assert store.search("s", "map cove")[0].seq == 2
        store.close()


def test_a_sqlite_file_indexed_without_sessions_is_indexed_anew(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old_file(path, _before_search("008_session_search"), _OLD_LOG)
    with sqlite3.connect(path) as raw:
        raw.execute(
            "INSERT INTO sessions (id, encoding, meta, created_at) "
            "VALUES ('t', 'o200k_base', '{}', 0)"
        )
        raw.execute(
            "INSERT INTO messages VALUES ('t', 1, 'user', ?, 1, NULL, 0)",
            (json.dumps({"role": "user", "content": "a lighthouse elsewhere"}),),
        )
        found = raw.execute("SELECT rowid, message FROM messages").fetchall()
        raw.executemany(
            "INSERT INTO message_text (rowid, text) VALUES (?, ?)",
            [(rowid, stored_text(body)) for rowid, body in found],
        )
    store = SQLiteStore(path)
    assert {h.seq for h in store.search("s", "lighthouse")} == {1, 3}
    assert [h.seq for h in store.search("t", "lighthouse cove")] == [1]
    store.append("t", [NewMessage({"role": "user", "content": "cove " * 3}, 1)])
    assert [h.seq for h in store.search("t", "cove")] == [2]
    store.close()


def test_sqlite_search_rows_go_with_their_session_and_outlive_vacuum(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    for sid, texts in (("s", ["puffin one", "puffin two"]), ("t", ["puffin three"])):
        store.create_session(sid, encoding="o200k_base")
        store.append(sid, [NewMessage({"role": "user", "content": t}, 1) for t in texts])
    assert store.delete_session("s")
    with sqlite3.connect(tmp_path / "s.db") as raw:
        assert raw.execute("SELECT count(*) FROM message_text").fetchone() == (1,)
        assert raw.execute("SELECT count(*) FROM search_terms").fetchone() == (2,)
        raw.execute("VACUUM")
    store.create_session("u", encoding="o200k_base")
    store.append("u", [NewMessage({"role": "user", "content": "puffin four"}, 1)])
    assert [h.seq for h in store.search("t", "puffin")] == [1]
    assert [h.seq for h in store.search("u", "puffin")] == [1]
    store.close()


def test_a_seq_past_the_index_rowid_is_refused_not_wrapped() -> None:
    assert index_rowid(2, 5) == (2 << SEQ_BITS) + 5
    for number, seq in ((1, 1 << SEQ_BITS), (1, 0), (1 << (63 - SEQ_BITS), 1)):
        with pytest.raises(StoreError, match="past what the search index numbers"):
            index_rowid(number, seq)
