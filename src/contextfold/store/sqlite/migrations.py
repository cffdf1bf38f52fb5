"""Schema of the SQLite store, as a numbered list of migrations.

Each migration is applied once, in order, and recorded by name in
``_migrations``; all pending ones run in one transaction when a file is opened,
so a file is never left half-migrated. The same transaction brings the stored
token counts to the current formula (``recount`` below, with ``contextfold.store.recount``). Append new
migrations at the end and never edit one that has shipped.

Statements run one at a time with ``execute``: ``executescript`` would commit
the open transaction first.
"""

from __future__ import annotations

import sqlite3
import time

from contextfold.core.errors import StoreError
from contextfold.core.tokens import COUNT_VERSION
from contextfold.store.recount import current, stale
from contextfold.store.schema import pending
from contextfold.store.search import (
    FTS5_INSERT_SQL,
    FTS5_TABLE_SQL,
    index_rowid,
    session_tag,
    stored_text,
    tagged,
    term_counts,
)
from contextfold.store.sqlite.sql import (
    BRANCHES_SQL,
    COUNT_TERMS_SQL,
    EVENTS_TABLE_SQL,
    SESSION_NUMBER_SQL,
    TERMS_TABLE_SQL,
)

MIGRATIONS: list[tuple[str, tuple[str, ...]]] = [
    (
        "001_initial",
        (
            """CREATE TABLE sessions (
                id TEXT PRIMARY KEY,
                encoding TEXT NOT NULL,
                meta TEXT NOT NULL,
                created_at REAL NOT NULL
            )""",
            """CREATE TABLE messages (
                session_id TEXT NOT NULL REFERENCES sessions(id),
                seq INTEGER NOT NULL CHECK (seq >= 1),
                role TEXT NOT NULL,
                message TEXT NOT NULL,
                tokens INTEGER NOT NULL,
                key TEXT,
                created_at REAL NOT NULL,
                PRIMARY KEY (session_id, seq)
            )""",
            "CREATE INDEX messages_role ON messages (session_id, role, seq)",
            """CREATE UNIQUE INDEX messages_key ON messages (session_id, key)
                WHERE key IS NOT NULL""",
            """CREATE TABLE tool_calls (
                session_id TEXT NOT NULL,
                call_id TEXT NOT NULL,
                seq INTEGER NOT NULL,
                PRIMARY KEY (session_id, call_id, seq),
                FOREIGN KEY (session_id, seq) REFERENCES messages (session_id, seq)
            )""",
            """CREATE TABLE folds (
                id TEXT PRIMARY KEY,
                session_id TEXT NOT NULL REFERENCES sessions(id),
                view TEXT NOT NULL,
                start_seq INTEGER NOT NULL,
                end_seq INTEGER NOT NULL,
                placement TEXT NOT NULL,
                kind TEXT NOT NULL,
                fold TEXT NOT NULL,
                superseded_by TEXT,
                created_at REAL NOT NULL
            )""",
            "CREATE INDEX folds_view ON folds (session_id, view, start_seq)",
            """CREATE TABLE fold_versions (
                session_id TEXT NOT NULL REFERENCES sessions(id),
                view TEXT NOT NULL,
                version INTEGER NOT NULL,
                PRIMARY KEY (session_id, view)
            )""",
        ),
    ),
    (
        "002_leases",
        (
            """CREATE TABLE leases (
                session_id TEXT NOT NULL REFERENCES sessions(id),
                view TEXT NOT NULL,
                owner TEXT NOT NULL,
                expires_at REAL NOT NULL,
                PRIMARY KEY (session_id, view)
            )""",
        ),
    ),
    (
        "003_views",
        (
            """CREATE TABLE views (
                session_id TEXT NOT NULL REFERENCES sessions(id),
                name TEXT NOT NULL,
                config TEXT NOT NULL,
                version INTEGER NOT NULL CHECK (version >= 1),
                updated_at REAL NOT NULL,
                PRIMARY KEY (session_id, name)
            )""",
        ),
    ),
    (
        "004_quarantine_and_last_seq",
        (
            # Why a fold is not rendered: NULL for a sound fold, else the fault found on read.
            "ALTER TABLE folds ADD COLUMN quarantined TEXT",
            # The highest seq ever handed out: a deleted row never frees its seq.
            "ALTER TABLE sessions ADD COLUMN last_seq INTEGER NOT NULL DEFAULT 0",
            """UPDATE sessions SET last_seq =
                COALESCE((SELECT MAX(seq) FROM messages WHERE session_id = sessions.id), 0)""",
            # The folds a render or a commit reads, without the superseded ones of a long past.
            """CREATE INDEX folds_active ON folds (session_id, view, placement, start_seq)
                WHERE superseded_by IS NULL AND quarantined IS NULL""",
        ),
    ),
    (
        "005_count_version",
        # The token count formula the stored counts follow (contextfold.store.recount).
        ("CREATE TABLE _count_version (version INTEGER NOT NULL)",),
    ),
    (
        "006_api_keys",
        (
            # The service's keys: the secret's hash only, and the tenant it speaks for.
            """CREATE TABLE api_keys (
                id TEXT PRIMARY KEY,
                tenant TEXT NOT NULL,
                secret_hash TEXT NOT NULL,
                label TEXT NOT NULL,
                created_at REAL NOT NULL,
                revoked_at REAL
            )""",
            "CREATE INDEX api_keys_tenant ON api_keys (tenant, created_at)",
        ),
    ),
    (
        "007_message_search",
        # The words of each message (contextfold.store.search), by the message's rowid;
        # made anew by 008, which indexes the rows logged before it.
        (
            "CREATE VIRTUAL TABLE message_text USING fts5(text, "
            "tokenize = 'unicode61 remove_diacritics 0')",
        ),
    ),
    (
        "008_session_search",
        # Each session's words under its own prefix, and how many messages hold each
        # word (contextfold.store.search): the index is made anew and filled by
        # ``migrate`` in the same transaction.
        (*SESSION_NUMBER_SQL, "DROP TABLE message_text", FTS5_TABLE_SQL, TERMS_TABLE_SQL),
    ),
    # The log is a tree (contextfold.core.branches): every message's parent, and the first
    # seq of its run; the messages logged before are one line, each after the one before.
    ("009_branches", BRANCHES_SQL),
    # Recent events of the processes sharing the file, read by each one's wake poll
    # (contextfold.store.wake); rows older than EVENTS_KEPT_S are deleted as others come.
    ("010_events", EVENTS_TABLE_SQL),
]


def check_ours(conn: sqlite3.Connection, path: str) -> None:
    """Refuse a database that another application made: it has tables, none of them ours.

    Run before anything is written to the file (even the journal mode), so a
    wrong path never changes someone else's database.
    """
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if tables and "_migrations" not in tables:
        raise StoreError(
            f"{path} is an SQLite database but not a contextfold one "
            f"(its tables: {', '.join(sorted(tables)[:5])}); nothing was changed"
        )


def index_logged(conn: sqlite3.Connection) -> None:
    """Index for search every message logged before the index existed, session by session."""
    sessions = conn.execute("SELECT id, search_number FROM sessions ORDER BY search_number")
    for session_id, number in sessions.fetchall():
        found = conn.execute(
            "SELECT seq, message FROM messages WHERE session_id = ?", (session_id,)
        ).fetchall()
        texts = [(seq, stored_text(body)) for seq, body in found]
        tag = session_tag(number)
        conn.executemany(
            FTS5_INSERT_SQL, ((index_rowid(number, seq), tagged(tag, t)) for seq, t in texts)
        )
        counts = term_counts(text for _, text in texts)
        conn.executemany(COUNT_TERMS_SQL, ((session_id, *c) for c in counts.items()))


def migrate(conn: sqlite3.Connection, path: str = "database") -> list[str]:
    """Apply the pending migrations atomically; return their names.

    Refuses a file that records migrations this code does not know: it was
    written by a newer contextfold, and this one would misread it.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        check_ours(conn, path)
        conn.execute(
            "CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
        )
        done = {row[0] for row in conn.execute("SELECT name FROM _migrations")}
        applied: list[str] = []
        for name, statements in pending(MIGRATIONS, done, path):
            for statement in statements:
                conn.execute(statement)
            conn.execute("INSERT INTO _migrations VALUES (?, ?)", (name, time.time()))
            applied.append(name)
        if "008_session_search" in applied:
            index_logged(conn)
        recount(conn, path)
        conn.execute("COMMIT")
    except BaseException:
        conn.rollback()
        raise
    return applied


_COUNT_VERSION_SQL = "SELECT MAX(version) FROM _count_version"
_SESSIONS_SQL = "SELECT id, encoding FROM sessions ORDER BY id"
_MESSAGES_SQL = "SELECT seq, message, tokens FROM messages WHERE session_id = ? ORDER BY seq"
_SET_TOKENS_SQL = "UPDATE messages SET tokens = ? WHERE session_id = ? AND seq = ?"


def recount(conn: sqlite3.Connection, path: str) -> int:
    """Bring the file's message counts to ``COUNT_VERSION``; return how many changed.

    Call inside a write transaction. Refuses a file whose counts follow a newer
    formula than this code knows: it would misjudge every budget.
    """
    if current(conn.execute(_COUNT_VERSION_SQL).fetchone()[0], path):
        return 0
    changed = 0
    for session_id, encoding in conn.execute(_SESSIONS_SQL).fetchall():
        found = conn.execute(_MESSAGES_SQL, (session_id,)).fetchall()
        updates = [(fresh, session_id, seq) for fresh, seq in stale(encoding, found)]
        conn.executemany(_SET_TOKENS_SQL, updates)
        changed += len(updates)
    conn.execute("DELETE FROM _count_version")
    conn.execute("INSERT INTO _count_version VALUES (?)", (COUNT_VERSION,))
    return changed
