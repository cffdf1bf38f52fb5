"""The statements of the PostgreSQL store, unqualified: each connection's search path
starts with the store's schema, so one text serves every schema and psycopg
prepares it once per connection.

Reads that select from ``sessions`` answer "unknown session" (no row) in the
same statement; the others check the session only when they found nothing.
"""

from __future__ import annotations

COLUMNS = "seq, message, tokens, key, created_at, parent"
SESSION_SQL = "SELECT id, encoding, meta, created_at FROM sessions WHERE id = %s"
EXISTS_SQL = "SELECT 1 FROM sessions WHERE id = %s"
CREATE_SESSION_SQL = (
    "INSERT INTO sessions (id, encoding, meta, created_at) VALUES (%s, %s, %s, %s) "
    "ON CONFLICT (id) DO NOTHING"
)
# An append takes the session's row lock (the UPDATE of its last seq, or first the
# SELECT when it has keys or tool results to check under it), so appends to one session queue and
# seqs stay contiguous. NO KEY UPDATE leaves the key shareable by other writes'
# foreign-key checks (a fold commit, a lease).
LOCK_SESSION_SQL = "SELECT last_seq FROM sessions WHERE id = %s FOR NO KEY UPDATE"
# The tail of the branch ending at %(head)s: its messages from the last one that is not
# a tool result, walked up the parent chain (the call unit a tool result must belong to).
CHAIN_RUN_SQL = (
    "WITH RECURSIVE run(seq, parent, role) AS ("
    "SELECT seq, parent, role FROM messages WHERE session_id = %(session)s AND seq = %(head)s "
    "UNION ALL SELECT m.seq, m.parent, m.role FROM run "
    "JOIN messages AS m ON m.session_id = %(session)s AND m.seq = run.parent "
    "WHERE run.role = 'tool') "
    f"SELECT {COLUMNS} FROM messages WHERE session_id = %(session)s "
    "AND seq IN (SELECT seq FROM run) ORDER BY seq"
)
# A branch a run at a time, newest run first: the run ending at the seed, then the run
# ending at the parent of each run's first message (contextfold.store.tree).
_UP = (
    "WITH RECURSIVE up(first, last) AS ("
    "SELECT run_start, seq FROM messages WHERE session_id = %(session)s AND seq = {seed} "
    "UNION ALL SELECT m.run_start, m.seq FROM up "
    "JOIN messages AS f ON f.session_id = %(session)s AND f.seq = up.first "
    "JOIN messages AS m ON m.session_id = %(session)s AND m.seq = f.parent) "
)
PATH_SQL = _UP.format(seed="%(head)s") + "SELECT first, last FROM up"
RUN_OF_SQL = "SELECT run_start FROM messages WHERE session_id = %s AND seq = %s"
LINKS_SQL = "SELECT seq, parent FROM messages WHERE session_id = %s ORDER BY seq"
LAST_SEQ_SQL = "SELECT last_seq FROM sessions WHERE id = %s"
KEYS_SQL = f"SELECT {COLUMNS} FROM messages WHERE session_id = %s AND key = ANY(%s)"
# The whole append in one statement: bump the last seq by the number of new messages
# (and the session's figures for listings),
# insert them numbered from the old one (the first after %(parent)s, or after the old
# last seq, each later one after the one before it, in the run %(run)s names or the
# newest message's, kept on the session's row as head_run), and their tool calls (``call_at``: the 1-based
# index of the new message making each call), and NOTIFY the schema's channel, which
# PostgreSQL delivers when the append commits. No row back means no such session.
APPEND_SQL = (
    "WITH base AS (UPDATE sessions SET last_seq = last_seq + %(n)s, "
    "messages = messages + %(n)s, tokens = tokens + %(total)s, "
    "last_at = GREATEST(last_at, %(now)s), "
    "head_run = COALESCE(%(run)s::bigint, CASE WHEN last_seq = 0 THEN 1 ELSE head_run END) "
    "WHERE id = %(session)s "
    "RETURNING last_seq - %(n)s AS seq0, search_number, head_run, "
    "COALESCE(%(parent)s::bigint, last_seq - %(n)s) AS parent0), "
    "added AS (INSERT INTO messages "
    "(session_id, seq, role, message, tokens, key, created_at, words, parent, run_start) "
    "SELECT %(session)s, base.seq0 + m.i, m.role, m.message, m.tokens, m.key, %(now)s, "
    "to_tsvector('simple', regexp_replace(m.words, '\\S+', "
    "'s' || base.search_number || 'x\\&', 'g')), "
    "CASE WHEN m.i = 1 THEN base.parent0 ELSE base.seq0 + m.i - 1 END, base.head_run "
    "FROM base, unnest(%(roles)s::text[], %(messages)s::text[], %(tokens)s::int[], "
    "%(keys)s::text[], %(words)s::text[]) WITH ORDINALITY AS m(role, message, tokens, key, words, i)), "
    "calls AS (INSERT INTO tool_calls (session_id, call_id, seq) "
    "SELECT %(session)s, c.call_id, base.seq0 + c.i "
    "FROM base, unnest(%(call_ids)s::text[], %(call_at)s::bigint[]) AS c(call_id, i) "
    "ON CONFLICT DO NOTHING), "
    "counted AS (INSERT INTO search_terms (session_id, term, messages) "
    "SELECT %(session)s, t.term, t.n "
    "FROM base, unnest(%(terms)s::text[], %(term_counts)s::int[]) AS t(term, n) "
    "ON CONFLICT (session_id, term) DO UPDATE SET messages = search_terms.messages + excluded.messages) "
    "SELECT seq0, parent0, pg_notify(%(channel)s, %(session)s) FROM base"
)
# The words are indexed by the 'simple' configuration (no stemming, no stopwords): they
# come cut and lowered by contextfold.store.search, as SQLite and RAM index them.
# The session's search number and its counts of the query's words (no row: no session);
# ``searched_terms`` picks. A message's words are under the session's prefix
# (search.session_tag), given to the append without it.
TERM_COUNTS_SQL = (
    "SELECT s.search_number, t.term, t.messages FROM sessions AS s "
    "LEFT JOIN search_terms AS t ON t.session_id = s.id AND t.term = ANY(%(terms)s) "
    "WHERE s.id = %(session)s"
)
# A search's role filter: none when no roles are asked for (a null array).
_ROLES = "AND (%(roles)s::text[] IS NULL OR role = ANY(%(roles)s::text[]))"
SEARCH_SQL = (
    "SELECT seq, ts_rank(words, query) AS score "
    "FROM messages, to_tsquery('simple', %(query)s) AS query "
    "WHERE session_id = %(session)s AND seq < %(before)s AND seq >= %(floor)s "
    f"AND seq > %(after)s {_ROLES} AND words @@ query ORDER BY score DESC, seq DESC "
    "LIMIT %(limit)s"
)
# The seq of the oldest of the newest ``search.CANDIDATES`` matches, when only those
# are ranked.
FLOOR_SQL = (
    "SELECT seq FROM messages, to_tsquery('simple', %(query)s) AS query "
    "WHERE session_id = %(session)s AND seq < %(before)s AND seq > %(after)s "
    f"{_ROLES} AND words @@ query ORDER BY seq DESC OFFSET %(skip)s LIMIT 1"
)
MESSAGES_FROM_SQL = (
    f"SELECT {COLUMNS} FROM messages WHERE session_id = %s AND seq >= %s ORDER BY seq"
)
MESSAGES_BETWEEN_SQL = (
    f"SELECT {COLUMNS} FROM messages WHERE session_id = %s AND seq BETWEEN %s AND %s ORDER BY seq"
)
TOKEN_COUNTS_SQL = (
    "SELECT seq, tokens FROM messages WHERE session_id = %s AND seq BETWEEN %s AND %s ORDER BY seq"
)
MESSAGES_AT_SQL = (
    f"SELECT {COLUMNS} FROM messages WHERE session_id = %s AND seq = ANY(%s) ORDER BY seq"
)
MESSAGES_BEFORE_SQL = (
    f"SELECT {COLUMNS} FROM messages WHERE session_id = %s AND seq < %s ORDER BY seq DESC LIMIT %s"
)
LAST_OF_ROLE_SQL = (
    f"SELECT {COLUMNS} FROM messages WHERE session_id = %s AND role = %s ORDER BY seq DESC LIMIT 1"
)
CALLED_IDS_SQL = (
    "SELECT DISTINCT call_id FROM tool_calls WHERE session_id = %s AND call_id = ANY(%s)"
)

# The body of a fold the reader names as known (an array of ids) is not read again.
FOLD_ROW = (
    "id, view, start_seq, end_seq, placement, "
    "CASE WHEN id = ANY(%s::text[]) THEN NULL ELSE fold END, superseded_by"
)
ACTIVE_FOLDS_SQL = (
    f"SELECT {FOLD_ROW} FROM folds WHERE session_id = %s AND view = %s "
    "AND superseded_by IS NULL AND quarantined IS NULL ORDER BY start_seq, created_at, ord"
)
ALL_FOLDS_SQL = (
    f"SELECT {FOLD_ROW} FROM folds WHERE session_id = %s AND view = %s "
    "AND quarantined IS NULL ORDER BY start_seq, created_at, ord"
)
# What a commit checks against, from the indexed columns alone and only near the new
# folds: the active facts, the in-place fold before the range, and those starting in it.
_SPAN = (
    "SELECT id, start_seq, end_seq, placement FROM folds WHERE session_id = %(session)s "
    "AND view = %(view)s AND superseded_by IS NULL AND quarantined IS NULL"
)
FACTS_SPANS_SQL = f"{_SPAN} AND placement = 'facts'"
SPAN_BEFORE_SQL = (
    f"{_SPAN} AND placement = 'in_place' AND start_seq < %(lo)s ORDER BY start_seq DESC LIMIT 1"
)
# On a branch the nearest fold before may be another branch's: read on until one is ours.
SPANS_BEFORE_SQL = (
    f"{_SPAN} AND placement = 'in_place' AND start_seq < %(lo)s ORDER BY start_seq DESC"
)
SPANS_IN_SQL = f"{_SPAN} AND placement = 'in_place' AND start_seq BETWEEN %(lo)s AND %(hi)s"
SUPERSEDE_SQL = "UPDATE folds SET superseded_by = %s WHERE id = %s"
FOLD_ID_SQL = "SELECT 1 FROM folds WHERE id = %s"
INSERT_FOLD_SQL = (
    "INSERT INTO folds (id, session_id, view, start_seq, end_seq, placement, kind, fold, "
    "superseded_by, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
QUARANTINE_SQL = (
    "UPDATE folds SET quarantined = %s WHERE session_id = %s AND view = %s AND id = %s "
    "AND quarantined IS NULL"
)
QUARANTINED_SQL = (
    "SELECT id, quarantined FROM folds WHERE session_id = %s AND view = %s "
    "AND quarantined IS NOT NULL ORDER BY ord"
)

# The view's fold version row, made if new and then locked: fold commits and
# quarantines of one view queue on it, appends do not. Inserting it checks the
# session exists (a foreign key), so an unknown one fails here.
ENSURE_VERSION_SQL = (
    "INSERT INTO fold_versions (session_id, view, version) VALUES (%s, %s, 0) "
    "ON CONFLICT DO NOTHING"
)
LOCK_VERSION_SQL = (
    "SELECT f.version, s.last_seq FROM fold_versions AS f JOIN sessions AS s "
    "ON s.id = f.session_id WHERE f.session_id = %s AND f.view = %s FOR UPDATE OF f"
)
SET_VERSION_SQL = "UPDATE fold_versions SET version = %s WHERE session_id = %s AND view = %s"
_FOLD_VERSION = "(SELECT version FROM fold_versions WHERE session_id = s.id AND view = %(view)s)"
_VIEW_VERSION = "(SELECT version FROM views WHERE session_id = s.id AND name = %(view)s)"
# The head in one read: the versions, the branch's last message and its run, and the
# parent of the run's first message (0: the branch is that one run; else PATH_SQL).
HEAD_SQL = (
    f"SELECT s.last_seq, {_FOLD_VERSION}, {_VIEW_VERSION}, h.seq, h.run_start, "
    "(SELECT parent FROM messages WHERE session_id = s.id AND seq = h.run_start) "
    "FROM sessions AS s LEFT JOIN messages AS h ON h.session_id = s.id AND h.seq = "
    "COALESCE(%(branch)s::bigint, (SELECT MAX(seq) FROM messages WHERE session_id = s.id)) "
    "WHERE s.id = %(session)s"
)

VIEW_VERSION_SQL = f"SELECT {_VIEW_VERSION} FROM sessions AS s WHERE s.id = %(session)s"
# Each returns the new version, or no row when the stored version is not the expected one.
UPSERT_VIEW_SQL = (
    "INSERT INTO views AS v (session_id, name, config, version, updated_at) "
    "VALUES (%s, %s, %s, 1, %s) ON CONFLICT (session_id, name) DO UPDATE "
    "SET config = excluded.config, version = v.version + 1, updated_at = excluded.updated_at "
    "RETURNING version"
)
CREATE_VIEW_SQL = (
    "INSERT INTO views (session_id, name, config, version, updated_at) "
    "VALUES (%s, %s, %s, 1, %s) ON CONFLICT (session_id, name) DO NOTHING RETURNING version"
)
UPDATE_VIEW_SQL = (
    "UPDATE views SET config = %s, version = version + 1, updated_at = %s "
    "WHERE session_id = %s AND name = %s AND version = %s RETURNING version"
)
GET_VIEW_SQL = (
    "SELECT v.name, v.config, v.version, v.updated_at FROM sessions AS s "
    "LEFT JOIN views AS v ON v.session_id = s.id AND v.name = %(view)s "
    "WHERE s.id = %(session)s"
)
LIST_VIEWS_SQL = (
    "SELECT name, config, version, updated_at FROM views WHERE session_id = %s ORDER BY name"
)

# Take the lease if it is free, expired or the caller's own, in one statement: the
# row's lock makes the check and the take atomic across every connection.
TAKE_LEASE_SQL = (
    "INSERT INTO leases AS l (session_id, view, owner, expires_at) "
    "VALUES (%(session)s, %(view)s, %(owner)s, %(expires)s) "
    "ON CONFLICT (session_id, view) DO UPDATE "
    "SET owner = excluded.owner, expires_at = excluded.expires_at "
    "WHERE l.owner = excluded.owner OR l.expires_at <= %(now)s RETURNING 1"
)
RELEASE_LEASE_SQL = (
    "DELETE FROM leases WHERE session_id = %s AND view = %s AND owner = %s RETURNING 1"
)

NOTIFY_SQL = "SELECT pg_notify(%s, %s)"
