"""Full-text search over a session's log: what every store shares.

Every backend indexes the same words, so a query ranks alike everywhere: a
message's text as a reader sees it (``text_of``: content text, then tool-call
names and arguments), cut here into runs of letters and digits and lowered.
The engines (SQLite FTS5, PostgreSQL ``tsvector``) are given those words
joined by spaces and never the user's query syntax: a query is cut the same
way, its stopwords dropped, and its words quoted into an OR of terms, so
quotes, operators and punctuation are only separators.

A search's time must not grow with the log (recall runs one on every render).
What costs is ranking: the engines score every message matching a query, and
an OR of a sentence's words matches most of a long log. So a store counts, per
session, how many messages hold each word, and a search ranks by the query's
rarest words only (``searched_terms``): rarest first while the messages
holding them add up to at most ``CANDIDATES`` (or only the newest
``CANDIDATES`` messages holding the rarest, if it alone is in more). The
common words of a query would rank nearly every message alike, so little is
lost; and rare words are what recall is after. In the index each session's
words are stored under a prefix of its own (``session_tag``), so a search never
reads another session's matches either.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from contextfold.core.checks import check_limit
from contextfold.core.errors import InvalidInput, StoreError
from contextfold.core.messages import ROLES, text_of
from contextfold.store.base import SearchHit

# Letters and digits of any script; underscores and marks of punctuation separate words.
_WORD = re.compile(r"[^\W_]+")

# Words too common to rank anything by: a query of them alone finds nothing.
_STOPWORDS = (
    "a an and are as at be but by for from has have he her his i if in into is it its me my "
    "no not of on or our she so that the their them then there these they this to was we "
    "were what when where which who will with you your"
)
STOPWORDS = frozenset(_STOPWORDS.split())


def words(text: str) -> list[str]:
    """The text's words as indexed: runs of letters and digits, lowered."""
    return _WORD.findall(text.lower())


# How much of a message's text is indexed: PostgreSQL refuses a tsvector past 1 MB,
# which a long enough tool output would reach; every store cuts at the same place.
INDEXED_CHARS = 100_000


def index_text(message: Mapping[str, Any]) -> str:
    """What a store indexes for a message: the words of its first ``INDEXED_CHARS``
    characters, joined by spaces."""
    return " ".join(words(text_of(message)[:INDEXED_CHARS]))


def stored_text(body: Any) -> str:
    """What to index for a stored message row (its JSON); nothing for a row that
    does not read as a message, left for the read to report."""
    try:
        message = json.loads(body)
        return index_text(message) if isinstance(message, dict) else ""
    except (TypeError, ValueError, KeyError, AttributeError):
        return ""


def query_terms(query: str) -> list[str]:
    """The query's distinct words without stopwords, in order; none means no hits."""
    return list(dict.fromkeys(w for w in words(query) if w not in STOPWORDS))


# How many messages one search ranks at most (unless the rarest word alone is in more):
# bench/search.py shows a search at a 100k log under 1 ms p50 with it.
CANDIDATES = 300


def term_counts(texts: Iterable[str]) -> dict[str, int]:
    """How many of ``texts`` (``index_text``) hold each word, by word in order: what an
    append adds to its session's counts."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(set(text.split()))
    return dict(sorted(counts.items()))


class Searched(NamedTuple):
    """What a search ranks: messages holding any of ``terms``, only the newest
    ``CANDIDATES`` of them when ``newest_only``."""

    terms: list[str]
    newest_only: bool


def searched_terms(terms: Sequence[str], counts: Mapping[str, int]) -> Searched:
    """What a search ranks, given how many of the session's messages hold each query term.

    Terms no message holds find nothing and are left out. The others are taken
    rarest first (ties by the word itself, so every store takes the same) while
    the messages holding them add up to at most ``CANDIDATES``. The rarest is
    always taken, so a query of common words still finds their messages; if
    even it is in more than ``CANDIDATES``, only the newest of them are ranked
    (recall wants the recent ones of many alike), and a search's time stays
    bounded.
    """
    held = sorted((counts[t], t) for t in terms if counts.get(t, 0) > 0)
    taken: list[str] = []
    total = 0
    for count, term in held:
        if taken and total + count > CANDIDATES:
            break
        taken.append(term)
        total += count
    return Searched(taken, total > CANDIDATES)


def session_tag(number: int) -> str:
    """The prefix of a session's words in an index shared by sessions (FTS5 or GIN), from
    the session's number (no two live sessions share one): letters and digits, so prefix
    and word stay one token, ended by ``x`` so that no two sessions' prefixed words are
    alike.

    In FTS5 a session's rows are also one range of rowids (``index_rowid``), but FTS5
    would still read every session's entries of a word to reach that range: the prefix
    gives each session words of its own.
    """
    return f"s{number}x"


def tagged(tag: str, text: str) -> str:
    """``text`` (``index_text``) with each word under the session's prefix."""
    return " ".join(tag + word for word in text.split())


def fts5_query(tag: str, terms: Iterable[str]) -> str:
    """An FTS5 match of any term in the session of ``tag``; each is a quoted string, so
    none is read as syntax."""
    return " OR ".join(f'"{tag}{t}"' for t in terms)


# A message's FTS5 rowid holds its session's number above its seq, so that a session's
# messages are one range of rowids and a hit's seq is read from its rowid, with no
# lookup of the message: half of a search's time at a 100k log went to that lookup.
SEQ_BITS = 32


def index_rowid(number: int, seq: int) -> int:
    """The FTS5 rowid of message ``seq`` of the session numbered ``number``; an append
    past what the rowid can number is refused whole."""
    if not 0 < seq < 1 << SEQ_BITS or not 0 < number < 1 << (63 - SEQ_BITS):
        raise StoreError(
            f"message {seq} of session number {number} is past what the search index numbers "
            f"(seq below 2**{SEQ_BITS}, sessions below 2**{63 - SEQ_BITS})"
        )
    return (number << SEQ_BITS) + seq


def rowid_range(number: int, before: int | None, after: int | None = None) -> tuple[int, int]:
    """The rowids (both bounds excluded) of the session's messages with ``after < seq <
    before``."""
    base = number << SEQ_BITS
    top = 1 << SEQ_BITS
    low = base if after is None else base + max(0, min(after, top))
    return low, base + (top if before is None else max(0, min(before, top)))


def tsquery(terms: Iterable[str]) -> str:
    """A ``to_tsquery`` text matching any term, each a quoted lexeme (words hold no quote)."""
    return " | ".join(f"'{t}'" for t in terms)


class Scope(NamedTuple):
    """What a search looks for: the query's terms (``query_terms``) in the messages with
    ``after < seq < before`` (None: no bound) whose role is one of ``roles`` (None: any)."""

    terms: list[str]
    before: int | None = None
    after: int | None = None
    roles: list[str] | None = None


def search_scope(
    query: str,
    limit: int,
    before: int | None,
    after: int | None = None,
    roles: Collection[str] | None = None,
) -> Scope:
    """What a search looks for, once its arguments are checked: every store refuses what
    no backend could honour the same way."""
    if not isinstance(query, str):
        raise InvalidInput(f"query must be a string, not {type(query).__name__}", field="query")
    check_limit(limit)
    for name, bound in (("before", before), ("after", after)):
        if bound is not None and type(bound) is not int:
            raise InvalidInput(f"{name} must be an integer seq, not {bound!r}", field=name)
    return Scope(query_terms(query), before, after, None if roles is None else role_list(roles))


def role_list(roles: Collection[str]) -> list[str]:
    """``roles`` checked (a collection of message roles, not one string), sorted."""
    if isinstance(roles, str | bytes) or not isinstance(roles, Collection) or not roles:
        raise InvalidInput(
            f"roles must be a non-empty list of message roles, not {roles!r}", field="roles"
        )
    unknown = sorted(repr(r) for r in roles if not isinstance(r, str) or r not in ROLES)
    if unknown:
        raise InvalidInput(
            f"unknown role {unknown[0]} (expected some of {', '.join(sorted(ROLES))})",
            field="roles",
        )
    return sorted(set(roles))


_INT64 = 2**63 - 1


def seq_bound(before: int | None) -> int:
    """``before`` as a bound a 64-bit column compares with; none bounds nothing."""
    return _INT64 if before is None else max(-_INT64, min(before, _INT64))


TOKENIZER = "tokenize = 'unicode61 remove_diacritics 0'"

# The index of the SQLite and RAM stores: a message's prefixed words under its rowid.
# bm25() is lower for a better match; the score handed out is its negation.
FTS5_TABLE_SQL = f"CREATE VIRTUAL TABLE message_text USING fts5(text, {TOKENIZER})"
FTS5_INSERT_SQL = "INSERT INTO message_text (rowid, text) VALUES (?, ?)"
_FTS5_MATCH = "WHERE message_text MATCH :match AND t.rowid > :low AND t.rowid < :high"
# With a role filter, each match is joined to its role (``RoleJoin``) before it is ranked
# or counted: the newest ``CANDIDATES`` are those of the roles asked for.
_FTS5_ROLE = "AND r.role IN (SELECT value FROM json_each(:roles))"


def fts5_statements(role_join: str | None) -> tuple[str, str]:
    """The ranking statement, and the one reading the rowid of the oldest of the newest
    ``CANDIDATES`` matches (in rowid order, so without ranking any); joined to the
    matches' roles by ``role_join`` when given."""
    source = f"FROM message_text AS t {_FTS5_MATCH}"
    if role_join is not None:
        source = f"FROM message_text AS t {role_join} {_FTS5_MATCH} {_FTS5_ROLE}"
    return (
        f"SELECT t.rowid, -bm25(message_text) {source} "
        "ORDER BY bm25(message_text), t.rowid DESC LIMIT :limit",
        f"SELECT t.rowid {source} ORDER BY t.rowid DESC LIMIT 1 OFFSET :skip",
    )


_ANY_ROLE = fts5_statements(None)


def fts5_search(
    conn: sqlite3.Connection,
    number: int,
    searched: Searched,
    limit: int,
    scope: Scope,
    role_join: RoleJoin,
) -> list[SearchHit]:
    """The session's best matches of what ``searched_terms`` picked, in an FTS5 index."""
    base = rowid_range(number, None)[0]
    low, high = rowid_range(number, scope.before, scope.after)
    search_sql, floor_sql = _ANY_ROLE if scope.roles is None else fts5_statements(role_join.sql)
    params: dict[str, Any] = {
        "match": fts5_query(session_tag(number), searched.terms),
        "low": low,
        "high": high,
        "limit": limit,
        "skip": CANDIDATES - 1,
        "roles": json.dumps(scope.roles),
        "base": base,
        **role_join.params,
    }
    if searched.newest_only:
        row = conn.execute(floor_sql, params).fetchone()
        params["low"] = low if row is None else max(low, int(row[0]) - 1)
    found = conn.execute(search_sql, params)
    return [SearchHit(int(rowid) - base, float(score)) for rowid, score in found]


class RoleJoin(NamedTuple):
    """How an FTS5 index's matches (``t``) meet their messages' roles (``r.role``): a
    ``CROSS JOIN`` (so the index is read first, and each match looks its role up by
    key), and its parameters beside ``:base``, the session's first rowid."""

    sql: str
    params: Mapping[str, Any]


# The RAM index's roles, by the rowid of each message's words.
_ROLES_TABLE_SQL = "CREATE TABLE message_role (rowid INTEGER PRIMARY KEY, role TEXT NOT NULL)"
_MEMORY_ROLES = RoleJoin("CROSS JOIN message_role AS r ON r.rowid = t.rowid", {})


class MemoryIndex:
    """An FTS5 table in an in-memory SQLite database and each session's word counts: the
    RAM store's search index, the SQLite store's in shape.

    Not thread-safe by itself: the RAM store calls it under its own lock.
    """

    def __init__(self) -> None:
        self._conn = sqlite3.connect(":memory:", check_same_thread=False)
        self._conn.execute(FTS5_TABLE_SQL)
        self._conn.execute(_ROLES_TABLE_SQL)
        self._numbers: dict[str, int] = {}
        self._counts: dict[str, Counter[str]] = {}
        self._sessions = 0

    def add(self, session_id: str, entries: Iterable[tuple[int, Mapping[str, Any]]]) -> None:
        number = self._numbers.get(session_id)
        if number is None:
            self._sessions += 1
            number = self._numbers[session_id] = self._sessions
        logged = list(entries)
        texts = [(seq, index_text(message)) for seq, message in logged]
        tag = session_tag(number)
        self._conn.executemany(
            FTS5_INSERT_SQL,
            [(index_rowid(number, seq), tagged(tag, text)) for seq, text in texts],
        )
        self._conn.executemany(
            "INSERT INTO message_role VALUES (?, ?)",
            [(index_rowid(number, seq), message.get("role")) for seq, message in logged],
        )
        self._counts.setdefault(session_id, Counter()).update(
            term_counts(text for _, text in texts)
        )

    def drop(self, session_id: str) -> None:
        number = self._numbers.pop(session_id, None)
        self._counts.pop(session_id, None)
        if number is not None:
            low, high = rowid_range(number, None)
            for table in ("message_text", "message_role"):
                sql = f"DELETE FROM {table} WHERE rowid > ? AND rowid < ?"
                self._conn.execute(sql, (low, high))

    def search(self, session_id: str, scope: Scope, limit: int) -> list[SearchHit]:
        number = self._numbers.get(session_id)
        searched = searched_terms(scope.terms, self._counts.get(session_id, {}))
        if number is None or not searched.terms:
            return []
        return fts5_search(self._conn, number, searched, limit, scope, _MEMORY_ROLES)
