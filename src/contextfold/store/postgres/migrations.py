"""Schema of the PostgreSQL store, as a numbered list of migrations.

Each migration is applied once, in order, and recorded by name in
``contextfold_migrations`` inside the store's schema. Opening a store runs
``migrate`` in one transaction that first takes a transaction-scoped advisory
lock named after the schema, so processes opening an empty database at once
queue behind each other: the first creates everything, the others find it done.
DDL is transactional in PostgreSQL, so a schema is never left half-migrated.
The same transaction brings stored token counts to the current formula, as the
SQLite store does (``contextfold.store.recount``). Append new migrations at the
end and never edit one that has shipped.

Session ids (and the ids that follow them) use the ``"C"`` collation, so they
sort by code point, as Python sorts strings, whatever the database's locale.
Every row of a session goes with it (``ON DELETE CASCADE``).
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
from psycopg import sql

from contextfold.core.errors import StoreError
from contextfold.core.tokens import COUNT_VERSION
from contextfold.store.recount import current, stale
from contextfold.store.schema import pending
from contextfold.store.search import session_tag, stored_text, tagged, term_counts

MIGRATIONS_TABLE = "contextfold_migrations"

MIGRATIONS: list[tuple[str, tuple[str, ...]]] = [
    (
        "001_initial",
        (
            """CREATE TABLE sessions (
                id text COLLATE "C" PRIMARY KEY,
                encoding text NOT NULL,
                meta text NOT NULL,
                created_at double precision NOT NULL,
                -- The highest seq ever handed out: a deleted row never frees its seq.
                last_seq bigint NOT NULL DEFAULT 0,
                -- What a listing shows, kept by each append so that reading it is one
                -- row, not a pass over the log: messages logged, their token counts
                -- summed, and when the newest was logged.
                messages bigint NOT NULL DEFAULT 0,
                tokens bigint NOT NULL DEFAULT 0,
                last_at double precision
            )""",
            """CREATE TABLE messages (
                session_id text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
                seq bigint NOT NULL CHECK (seq >= 1),
                role text NOT NULL,
                message text NOT NULL,
                tokens integer NOT NULL,
                key text,
                created_at double precision NOT NULL,
                PRIMARY KEY (session_id, seq)
            )""",
            "CREATE INDEX messages_role ON messages (session_id, role, seq)",
            """CREATE UNIQUE INDEX messages_key ON messages (session_id, key)
                WHERE key IS NOT NULL""",
            """CREATE TABLE tool_calls (
                session_id text COLLATE "C" NOT NULL,
                call_id text NOT NULL,
                seq bigint NOT NULL,
                PRIMARY KEY (session_id, call_id, seq),
                FOREIGN KEY (session_id, seq) REFERENCES messages (session_id, seq)
                    ON DELETE CASCADE
            )""",
            """CREATE TABLE folds (
                id text PRIMARY KEY,
                session_id text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
                view text NOT NULL,
                start_seq bigint NOT NULL,
                end_seq bigint NOT NULL,
                placement text NOT NULL,
                kind text NOT NULL,
                fold text NOT NULL,
                superseded_by text,
                -- Why a fold is not rendered: NULL for a sound fold, else the fault found.
                quarantined text,
                created_at double precision NOT NULL,
                -- Commit order, for ties and for listing quarantined folds oldest first.
                ord bigint GENERATED ALWAYS AS IDENTITY
            )""",
            "CREATE INDEX folds_view ON folds (session_id, view, start_seq)",
            # The folds a render or a commit reads, without the superseded ones of a long past.
            """CREATE INDEX folds_active ON folds (session_id, view, placement, start_seq)
                WHERE superseded_by IS NULL AND quarantined IS NULL""",
            """CREATE TABLE fold_versions (
                session_id text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
                view text NOT NULL,
                version bigint NOT NULL,
                PRIMARY KEY (session_id, view)
            )""",
            """CREATE TABLE views (
                session_id text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
                name text NOT NULL,
                config text NOT NULL,
                version bigint NOT NULL CHECK (version >= 1),
                updated_at double precision NOT NULL,
                PRIMARY KEY (session_id, name)
            )""",
            """CREATE TABLE leases (
                session_id text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
                view text NOT NULL,
                owner text NOT NULL,
                expires_at double precision NOT NULL,
                PRIMARY KEY (session_id, view)
            )""",
            """CREATE TABLE api_keys (
                id text COLLATE "C" PRIMARY KEY,
                tenant text NOT NULL,
                secret_hash text NOT NULL,
                label text NOT NULL,
                created_at double precision NOT NULL,
                revoked_at double precision
            )""",
            "CREATE INDEX api_keys_tenant ON api_keys (tenant, created_at)",
            # The token count formula the stored counts follow (contextfold.store.recount).
            "CREATE TABLE contextfold_count_version (version integer NOT NULL)",
        ),
    ),
    (
        "002_message_search",
        (
            # A message's words (contextfold.store.search) for full-text search, set by
            # each append; the rows logged before it are indexed by ``migrate`` with 004.
            "ALTER TABLE messages ADD COLUMN words tsvector",
            "CREATE INDEX messages_words ON messages USING gin (words)",
        ),
    ),
    (
        "003_search_terms",
        (
            # How many of a session's messages hold each word: a search ranks by its
            # rarest words (contextfold.store.search). Counted by each append; the rows
            # logged before it are counted by ``migrate``.
            """CREATE TABLE search_terms (
                session_id text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
                term text COLLATE "C" NOT NULL,
                messages integer NOT NULL,
                PRIMARY KEY (session_id, term)
            )""",
        ),
    ),
    (
        "004_session_search",
        (
            # Each session's words under a prefix of its own (search.session_tag), so
            # that the GIN index gives a search only its session's entries of a word;
            # ``migrate`` writes the rows logged before it anew.
            "CREATE SEQUENCE session_search_numbers",
            "ALTER TABLE sessions ADD COLUMN search_number bigint NOT NULL "
            "DEFAULT nextval('session_search_numbers')",
            "ALTER SEQUENCE session_search_numbers OWNED BY sessions.search_number",
        ),
    ),
    (
        "005_branches",
        (
            # The log is a tree (contextfold.core.branches): every message's parent and the
            # first seq of its run, and the newest message's run on the session's row for
            # the one-statement append; the messages logged before are one line.
            "ALTER TABLE messages ADD COLUMN parent bigint NOT NULL DEFAULT 0, "
            "ADD COLUMN run_start bigint NOT NULL DEFAULT 0",
            "ALTER TABLE sessions ADD COLUMN head_run bigint NOT NULL DEFAULT 0",
            "UPDATE messages AS m SET parent = t.parent, run_start = t.run_start FROM ("
            "SELECT session_id, seq, parent, "
            "MIN(seq) OVER (PARTITION BY session_id, island) AS run_start FROM ("
            "SELECT session_id, seq, LAG(seq, 1, 0::bigint) OVER w AS parent, "
            "seq - ROW_NUMBER() OVER w AS island FROM messages "
            "WINDOW w AS (PARTITION BY session_id ORDER BY seq)) AS i) AS t "
            "WHERE m.session_id = t.session_id AND m.seq = t.seq",
            "UPDATE sessions AS s SET head_run = COALESCE((SELECT run_start FROM messages "
            "WHERE session_id = s.id ORDER BY seq DESC LIMIT 1), 0)",
        ),
    ),
]

# Tables this code creates: finding one in a schema that records no migrations
# means another application owns it, and nothing may be written there.
OUR_TABLES = frozenset(
    {
        "sessions",
        "messages",
        "tool_calls",
        "folds",
        "fold_versions",
        "views",
        "leases",
        "api_keys",
        "contextfold_count_version",
        "search_terms",
    }
)

_TABLES_SQL = "SELECT table_name FROM information_schema.tables WHERE table_schema = %s"
_SCHEMA_SQL = "SELECT 1 FROM pg_namespace WHERE nspname = %s"


def migrate(conn: psycopg.Connection[Any], schema: str) -> list[str]:
    """Apply the pending migrations atomically under the schema's advisory lock; their names.

    ``conn`` is in autocommit mode with ``schema`` first on its search path.
    Refuses a schema holding tables of ours that no migration recorded (another
    application's), and one recording migrations this code does not know (a
    newer contextfold wrote it, and this one would misread it).
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"contextfold:{schema}",))
        tables = {row[0] for row in conn.execute(_TABLES_SQL, (schema,))}
        if MIGRATIONS_TABLE not in tables and tables & OUR_TABLES:
            raise StoreError(
                f"schema {schema!r} holds tables that contextfold did not create "
                f"({', '.join(sorted(tables & OUR_TABLES))}); nothing was changed: "
                "name another schema with ?schema=..."
            )
        if conn.execute(_SCHEMA_SQL, (schema,)).fetchone() is None:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} "
            "(name text PRIMARY KEY, applied_at double precision NOT NULL)"
        )
        done = {row[0] for row in conn.execute(f"SELECT name FROM {MIGRATIONS_TABLE}")}
        applied: list[str] = []
        for name, statements in pending(MIGRATIONS, done, f"schema {schema!r}"):
            for statement in statements:
                conn.execute(statement)
            conn.execute(f"INSERT INTO {MIGRATIONS_TABLE} VALUES (%s, %s)", (name, time.time()))
            applied.append(name)
        if "004_session_search" in applied:
            index_logged(conn)
        if "003_search_terms" in applied:
            count_terms(conn)
        recount(conn, schema)
    return applied


def index_logged(conn: psycopg.Connection[Any]) -> None:
    """Index for search every message logged before the index existed, session by session."""
    sessions = conn.execute("SELECT id, search_number FROM sessions ORDER BY id").fetchall()
    for session_id, number in sessions:
        found = conn.execute(
            "SELECT seq, message FROM messages WHERE session_id = %s", (session_id,)
        ).fetchall()
        tag = session_tag(number)
        with conn.cursor() as cur:
            cur.executemany(
                "UPDATE messages SET words = to_tsvector('simple', %s) "
                "WHERE session_id = %s AND seq = %s",
                [(tagged(tag, stored_text(body)), session_id, seq) for seq, body in found],
            )


def count_terms(conn: psycopg.Connection[Any]) -> None:
    """Count the words of every message logged before the counts existed, session by session."""
    for (session_id,) in conn.execute("SELECT id FROM sessions ORDER BY id").fetchall():
        found = conn.execute(
            "SELECT message FROM messages WHERE session_id = %s", (session_id,)
        ).fetchall()
        counts = term_counts(stored_text(body) for (body,) in found)
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO search_terms VALUES (%s, %s, %s)",
                [(session_id, *c) for c in counts.items()],
            )


def recount(conn: psycopg.Connection[Any], schema: str) -> int:
    """Bring the schema's message counts to ``COUNT_VERSION``; return how many changed.

    Call inside the migrating transaction. Refuses counts by a newer formula
    than this code knows: it would misjudge every budget.
    """
    row = conn.execute("SELECT MAX(version) FROM contextfold_count_version").fetchone()
    if current(None if row is None else row[0], f"schema {schema!r}"):
        return 0
    changed = 0
    for session_id, encoding in conn.execute("SELECT id, encoding FROM sessions").fetchall():
        found = conn.execute(
            "SELECT seq, message, tokens FROM messages WHERE session_id = %s", (session_id,)
        ).fetchall()
        updates = [(fresh, session_id, seq) for fresh, seq in stale(encoding, found)]
        if updates:
            with conn.cursor() as cur:
                cur.executemany(
                    "UPDATE messages SET tokens = %s WHERE session_id = %s AND seq = %s", updates
                )
        changed += len(updates)
    if changed:
        conn.execute(
            "UPDATE sessions SET tokens = COALESCE("
            "(SELECT SUM(tokens) FROM messages WHERE session_id = sessions.id), 0)"
        )
    conn.execute("DELETE FROM contextfold_count_version")
    conn.execute("INSERT INTO contextfold_count_version VALUES (%s)", (COUNT_VERSION,))
    return changed
