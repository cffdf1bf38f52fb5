"""The SQLite store's statements, one module constant each.

Every statement is prepared once by the driver's statement cache (keyed by the
text) and reused on every call. Reads that select from ``sessions`` answer
"unknown session" (no row) in the same statement; the others check the session
only when they found nothing.
"""

_COLUMNS = "seq, message, tokens, key, created_at, parent"
SESSION_SQL = "SELECT id, encoding, meta, created_at FROM sessions WHERE id = ?"
EXISTS_SQL = "SELECT 1 FROM sessions WHERE id = ?"
# The highest seq handed out: the session's own record of it, or the log's if that is
# higher (a file from before the record). A deleted row never frees its seq.
_LAST = "MAX(s.last_seq, COALESCE((SELECT MAX(seq) FROM messages WHERE session_id = s.id), 0))"
LAST_SEQ_SQL = f"SELECT {_LAST} FROM sessions AS s WHERE s.id = ?"
LAST_SEQS_SQL = (
    f"SELECT s.id, {_LAST} FROM sessions AS s WHERE s.id IN (SELECT value FROM json_each(?))"
)
SET_LAST_SEQ_SQL = "UPDATE sessions SET last_seq = ? WHERE id = ?"
# A new session takes the next search number (contextfold.store.search.index_rowid).
CREATE_SESSION_SQL = (
    "INSERT OR IGNORE INTO sessions (id, encoding, meta, created_at, last_seq, search_number) "
    "VALUES (?, ?, ?, ?, 0, (SELECT COALESCE(MAX(search_number), 0) + 1 FROM sessions))"
)
FOLD_VERSION_SQL = (
    "SELECT (SELECT version FROM fold_versions WHERE session_id = s.id AND view = :view) "
    "FROM sessions AS s WHERE s.id = :session"
)
_LAST_AND_FOLDS = (
    f"SELECT {_LAST}, (SELECT version FROM fold_versions WHERE session_id = s.id AND view = :view)"
)
FOLD_HEAD_SQL = f"{_LAST_AND_FOLDS} FROM sessions AS s WHERE s.id = :session"
_NEWEST = "(SELECT MAX(seq) FROM messages WHERE session_id = s.id)"
# A branch a run at a time, newest run first: the run ending at :head, then the run
# ending at the parent of each run's first message (contextfold.store.tree).
_UP = (
    "WITH RECURSIVE up(first, last) AS ("
    "SELECT run_start, seq FROM messages WHERE session_id = :session AND seq = {seed} "
    "UNION ALL SELECT m.run_start, m.seq FROM up "
    "JOIN messages AS f ON f.session_id = :session AND f.seq = up.first "
    "JOIN messages AS m ON m.session_id = :session AND m.seq = f.parent) "
)
PATH_SQL = _UP.format(seed=":head") + "SELECT first, last FROM up"
# The head in one read: the versions, the branch's last message and its run, and the
# parent of the run's first message (0: the branch is that one run; else PATH_SQL).
HEAD_SQL = (
    f"{_LAST_AND_FOLDS}, (SELECT version FROM views WHERE session_id = s.id AND name = :view), "
    "h.seq, h.run_start, (SELECT parent FROM messages WHERE session_id = s.id "
    "AND seq = h.run_start) FROM sessions AS s LEFT JOIN messages AS h ON h.session_id = s.id "
    f"AND h.seq = COALESCE(:branch, {_NEWEST}) WHERE s.id = :session"
)
INSERT_MESSAGE_SQL = (
    "INSERT INTO messages (session_id, seq, role, message, tokens, key, created_at, parent, "
    "run_start) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
RUN_OF_SQL = "SELECT run_start FROM messages WHERE session_id = ? AND seq = ?"
LINKS_SQL = "SELECT seq, parent FROM messages WHERE session_id = ? ORDER BY seq"
# The tail of the branch ending at :head: its messages from the last one that is not a
# tool result, walked up the parent chain (the call unit a tool result must belong to).
CHAIN_RUN_SQL = (
    "WITH RECURSIVE run(seq, parent, role) AS ("
    "SELECT seq, parent, role FROM messages WHERE session_id = :session AND seq = :head "
    "UNION ALL SELECT m.seq, m.parent, m.role FROM run "
    "JOIN messages AS m ON m.session_id = :session AND m.seq = run.parent "
    "WHERE run.role = 'tool') "
    f"SELECT {_COLUMNS} FROM messages WHERE session_id = :session "
    "AND seq IN (SELECT seq FROM run) ORDER BY seq"
)
INSERT_CALL_SQL = "INSERT OR IGNORE INTO tool_calls VALUES (?, ?, ?)"
# Two range statements so that both bounds are index constraints.
MESSAGES_FROM_SQL = (
    f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND seq >= ? ORDER BY seq"
)
MESSAGES_BETWEEN_SQL = (
    f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND seq BETWEEN ? AND ? ORDER BY seq"
)
TOKEN_COUNTS_SQL = (
    "SELECT seq, tokens FROM messages WHERE session_id = ? AND seq BETWEEN ? AND ? ORDER BY seq"
)
MESSAGES_AT_SQL = (
    f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? "
    "AND seq IN (SELECT value FROM json_each(?)) ORDER BY seq"
)
MESSAGES_BEFORE_SQL = (
    f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?"
)
LAST_OF_ROLE_SQL = (
    f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND role = ? ORDER BY seq DESC LIMIT 1"
)
CALLED_IDS_SQL = (
    "SELECT DISTINCT call_id FROM tool_calls WHERE session_id = ? "
    "AND call_id IN (SELECT value FROM json_each(?))"
)
KEYED_SQL = (
    f"SELECT {_COLUMNS} FROM messages INDEXED BY messages_key WHERE session_id = ? "
    "AND key IN (SELECT value FROM json_each(?))"
)
# The body of a fold the reader names as known (a JSON array of ids) is not read again.
_FOLD_ROW = (
    "id, view, start_seq, end_seq, placement, "
    "CASE WHEN id IN (SELECT value FROM json_each(?)) THEN NULL ELSE fold END, superseded_by"
)
# By the index of active folds: a long past of superseded folds is never scanned.
ACTIVE_FOLDS_SQL = (
    f"SELECT {_FOLD_ROW} FROM folds INDEXED BY folds_active WHERE session_id = ? AND view = ? "
    "AND superseded_by IS NULL AND quarantined IS NULL ORDER BY start_seq, created_at, rowid"
)
ALL_FOLDS_SQL = (
    f"SELECT {_FOLD_ROW} FROM folds WHERE session_id = ? AND view = ? "
    "AND quarantined IS NULL ORDER BY start_seq, created_at, rowid"
)
# What a commit checks against, from the indexed columns alone and only near the new
# folds: the active facts, the in-place fold before the range, and those starting in it.
_SPAN = (
    "SELECT id, start_seq, end_seq, placement FROM folds WHERE session_id = :session "
    "AND view = :view AND superseded_by IS NULL AND quarantined IS NULL"
)
FACTS_SPANS_SQL = f"{_SPAN} AND placement = 'facts'"
SPAN_BEFORE_SQL = (
    f"{_SPAN} AND placement = 'in_place' AND start_seq < :lo ORDER BY start_seq DESC LIMIT 1"
)
# On a branch the nearest fold before may be another branch's: read on until one is ours.
SPANS_BEFORE_SQL = f"{_SPAN} AND placement = 'in_place' AND start_seq < :lo ORDER BY start_seq DESC"
SPANS_IN_SQL = f"{_SPAN} AND placement = 'in_place' AND start_seq BETWEEN :lo AND :hi"
QUARANTINE_SQL = (
    "UPDATE folds SET quarantined = ? WHERE session_id = ? AND view = ? AND id = ? "
    "AND quarantined IS NULL"
)
QUARANTINED_SQL = (
    "SELECT id, quarantined FROM folds WHERE session_id = ? AND view = ? "
    "AND quarantined IS NOT NULL ORDER BY rowid"
)
SUPERSEDE_SQL = "UPDATE folds SET superseded_by = ? WHERE id = ?"
FOLD_ID_SQL = "SELECT 1 FROM folds WHERE id = ?"
INSERT_FOLD_SQL = (
    "INSERT INTO folds (id, session_id, view, start_seq, end_seq, placement, kind, fold, "
    "superseded_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
SET_VERSION_SQL = (
    "INSERT INTO fold_versions VALUES (?, ?, ?) ON CONFLICT (session_id, view) "
    "DO UPDATE SET version = excluded.version"
)
VIEW_VERSION_SQL = (
    "SELECT (SELECT version FROM views WHERE session_id = s.id AND name = :name) "
    "FROM sessions AS s WHERE s.id = :session"
)
PUT_VIEW_SQL = (
    "INSERT INTO views VALUES (?, ?, ?, ?, ?) ON CONFLICT (session_id, name) "
    "DO UPDATE SET config = excluded.config, version = excluded.version, "
    "updated_at = excluded.updated_at"
)
GET_VIEW_SQL = (
    "SELECT v.name, v.config, v.version, v.updated_at FROM sessions AS s "
    "LEFT JOIN views AS v ON v.session_id = s.id AND v.name = :name WHERE s.id = :session"
)
LIST_VIEWS_SQL = (
    "SELECT name, config, version, updated_at FROM views WHERE session_id = ? ORDER BY name"
)
LEASE_SQL = (
    "SELECT l.owner, l.expires_at FROM sessions AS s "
    "LEFT JOIN leases AS l ON l.session_id = s.id AND l.view = :view WHERE s.id = :session"
)
TAKE_LEASE_SQL = (
    "INSERT INTO leases VALUES (?, ?, ?, ?) ON CONFLICT (session_id, view) "
    "DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at"
)
RELEASE_LEASE_SQL = "DELETE FROM leases WHERE session_id = ? AND view = ? AND owner = ?"

# Full-text search (contextfold.store.search): one FTS5 row a message, its words under
# its session's prefix, its rowid made of the session's search number and its seq.
# The number is a column of its own, never the session's rowid: VACUUM may renumber
# the rowids of a table without an INTEGER PRIMARY KEY.
SESSION_NUMBER_SQL = (
    "ALTER TABLE sessions ADD COLUMN search_number INTEGER",
    "UPDATE sessions SET search_number = rowid",
    "CREATE UNIQUE INDEX sessions_search_number ON sessions (search_number)",
)
# How many of a session's messages hold each word: a search ranks by its rarest words.
TERMS_TABLE_SQL = (
    "CREATE TABLE search_terms (session_id TEXT NOT NULL REFERENCES sessions(id), "
    "term TEXT NOT NULL, messages INTEGER NOT NULL, PRIMARY KEY (session_id, term)) WITHOUT ROWID"
)
COUNT_TERMS_SQL = (
    "INSERT INTO search_terms VALUES (?, ?, ?) ON CONFLICT (session_id, term) "
    "DO UPDATE SET messages = messages + excluded.messages"
)
# What an append reads first: the last seq, the session's search number, the newest message.
APPEND_HEAD_SQL = (
    f"SELECT {_LAST}, s.search_number, newest.seq, newest.run_start FROM sessions AS s "
    "LEFT JOIN (SELECT seq, run_start FROM messages WHERE session_id = ?1 "
    "ORDER BY seq DESC LIMIT 1) AS newest ON 1 WHERE s.id = ?1"
)
# Every message's parent (the one before it) and run (from the first of its stretch of
# consecutive seqs): a log written before branches is a line.
BRANCHES_SQL = (
    "ALTER TABLE messages ADD COLUMN parent INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE messages ADD COLUMN run_start INTEGER NOT NULL DEFAULT 0",
    "UPDATE messages SET parent = t.parent, run_start = t.run_start FROM ("
    "SELECT session_id, seq, parent, MIN(seq) OVER (PARTITION BY session_id, island) AS run_start "
    "FROM (SELECT session_id, seq, LAG(seq, 1, 0) OVER w AS parent, "
    "seq - ROW_NUMBER() OVER w AS island FROM messages "
    "WINDOW w AS (PARTITION BY session_id ORDER BY seq))) AS t "
    "WHERE messages.session_id = t.session_id AND messages.seq = t.seq",
)
# A search hit's message, for its role (``search.RoleJoin``): looked up by key, match by match.
SEARCH_ROLE_JOIN_SQL = (
    "CROSS JOIN messages AS r ON r.session_id = :session AND r.seq = t.rowid - :base"
)
# The session's search number and its counts of the query's words; no row: no session.
TERM_COUNTS_SQL = (
    "SELECT s.search_number, t.term, t.messages FROM sessions AS s "
    "LEFT JOIN search_terms AS t ON t.session_id = s.id "
    "AND t.term IN (SELECT value FROM json_each(:terms)) WHERE s.id = :session"
)

# Events announced to the other processes on the file (contextfold.store.wake), by id.
EVENTS_TABLE_SQL = (
    "CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, "
    "origin TEXT NOT NULL, data TEXT NOT NULL, at REAL NOT NULL)",
    "CREATE INDEX events_at ON events (at)",
)
PUT_EVENT_SQL = "INSERT INTO events (session_id, origin, data, at) VALUES (?, ?, ?, ?)"
PRUNE_EVENTS_SQL = "DELETE FROM events WHERE at < ?"
EVENTS_AFTER_SQL = "SELECT id, session_id, origin, data FROM events WHERE id > ? ORDER BY id"
LAST_EVENT_SQL = "SELECT COALESCE(MAX(id), 0) FROM events"
