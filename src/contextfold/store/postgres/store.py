"""PostgreSQL store: many processes on many machines share one database.

``PostgresStore("postgresql://user@host:5432/db?schema=chat")`` keeps every
table in one schema (``public`` unless ``?schema=`` names another; it is made
on first open), migrated on open (``contextfold.store.postgres.migrations``).

Connections come from a ``psycopg_pool.ConnectionPool`` in autocommit mode:
a read, and an append without idempotency keys, is one statement; other writes
are one explicit transaction, rolled back on any error. Concurrent writers are
made safe by row locks, not by retries:

- an append locks its session's row, which holds the last seq handed out, by
  the ``UPDATE`` that moves it on (an append with keys takes the lock first and
  then looks its keys up), so appends to one session queue and seqs stay
  contiguous; a unique index on ``(session_id, key)`` backs the keys;
- a fold commit or quarantine locks the view's row in ``fold_versions``, so
  the version check and the bump are one step, and appends are not held up;
- a lease is taken by one ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` the
  current one is expired or the caller's, atomic on the lease's row. Expiry is
  the callers' wall clock (``time.time()``), as in every store.

Driver errors become ``StoreError`` in ``pool.translated``, the one boundary;
a foreign-key failure on a write means the session is unknown (``NotFound``).
Every append that logs something sends ``NOTIFY`` in its own statement, so
runners in other processes wake when it commits (``LISTEN``, in
``contextfold.store.postgres.wake``, whose wake ``wake()`` hands out).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from contextfold.core.extras import needs_extra

with needs_extra("the PostgreSQL store", "postgres"):  # here, where a missing one is told
    import psycopg  # noqa: F401
    import psycopg_pool  # noqa: F401

from contextfold.core.errors import FoldConflict, InvalidInput
from contextfold.core.folds import Fold, plan_commit
from contextfold.core.log import (
    LoggedMessage,
    NewMessage,
    SessionInfo,
    SessionRecord,
    ViewRecord,
)
from contextfold.store import rows
from contextfold.store.base import Abilities, Head, Quarantined, SearchHit
from contextfold.store.checks import (
    check_listing,
    system_prompt,
    view_config_json,
)
from contextfold.store.postgres import admin as admin
from contextfold.store.postgres import sql as q
from contextfold.store.postgres.folds import SPAN_SQL, insert_fold
from contextfold.store.postgres.keys import PostgresKeys
from contextfold.store.postgres.leases import PostgresLeases
from contextfold.store.postgres.log import Prepared, insert, insert_checked, read_path, unchecked
from contextfold.store.postgres.migrations import migrate
from contextfold.store.postgres.options import PostgresOptions, parse_url
from contextfold.store.postgres.pool import (
    NUL,
    Connections,
    Cursor,
    nul_free,
    one_row,
    require,
    session_must_exist,
)
from contextfold.store.postgres.search import ranked
from contextfold.store.postgres.views import write_view
from contextfold.store.postgres.wake import PostgresWake, channel_for
from contextfold.store.search import (
    search_scope,
)
from contextfold.store.tree import check_on_branch, check_seq, head_of, spans_near


class PostgresStore(PostgresKeys, PostgresLeases):
    """The log, folds, views and leases in one PostgreSQL schema, shared by processes."""

    abilities = Abilities(wake_across_processes=True, service=True)

    def __init__(self, url: str, *, pool_size: int | None = None) -> None:
        self.options: PostgresOptions = parse_url(url, pool_size=pool_size)
        self.schema = self.options.schema
        self.channel = channel_for(self.schema)
        self._where = self.options.display
        self._wake: PostgresWake | None = None
        self._wake_lock = threading.Lock()
        self._db = Connections(self.options)
        try:
            with self._db.connection() as conn:
                self.applied = migrate(conn, self.schema)
        except BaseException:
            self._db.close()
            raise

    # -- sessions ---------------------------------------------------------

    def create_session(
        self,
        session_id: str,
        *,
        encoding: str,
        meta: dict[str, Any] | None = None,
        system: NewMessage | None = None,
    ) -> SessionRecord:
        """Created (or found) with its system prompt in one transaction: a second
        process creating it at once waits on the new row, then finds the prompt."""
        if not session_id:
            raise InvalidInput("session id must not be empty", field="session_id")
        nul_free(session_id=session_id, encoding=encoding)
        meta_json = rows.dumps(dict(meta or {}), field="meta")
        prompt = [rows.prepare(0, new) for new in system_prompt(system)]
        with self._db.write() as cur:
            cur.execute(q.CREATE_SESSION_SQL, (session_id, encoding, meta_json, time.time()))
            row = one_row(cur, q.SESSION_SQL, (session_id,), session_id)
            if prompt:
                insert_checked(cur, session_id, prompt, self.channel)
        return rows.session(row)

    def get_session(self, session_id: str) -> SessionRecord:
        with self._db.read() as cur:
            return rows.session(one_row(cur, q.SESSION_SQL, (session_id,), session_id))

    def list_sessions(
        self,
        prefix: str = "",
        *,
        after: str | None = None,
        limit: int | None = None,
        search: str | None = None,
    ) -> list[str]:
        check_listing(prefix, after, limit, search)
        if NUL in prefix or NUL in (search or ""):
            return []  # no stored id holds one
        if after is not None:
            after = after.partition(NUL)[0]  # the same ids are greater than what precedes it
        with self._db.read() as cur:
            return admin.list_sessions(cur, prefix, after, limit, search)

    def session_info(self, session_id: str) -> SessionInfo:
        with self._db.read() as cur:
            return admin.session_info(cur, session_id)

    def delete_session(self, session_id: str) -> bool:
        with self._db.read() as cur:
            return admin.delete_session(cur, session_id)

    # -- the log ------------------------------------------------------------

    def append(
        self,
        session_id: str,
        batch: Sequence[NewMessage],
        *,
        parent: int | None = None,
        whole_keys: bool = False,
    ) -> list[LoggedMessage]:
        """One statement for a batch no rule reads the log for (``log.unchecked``: no
        keys, no tool results, no ``parent``); else one transaction checking it under
        the session's row lock.

        The statement also sends the wake's ``NOTIFY``; while this process
        listens, its echo is expected (``PostgresWake``), and given up if the
        append fails or stores nothing new.
        """
        after = check_seq(parent, "parent")
        prepared = [rows.prepare(i, new) for i, new in enumerate(batch)]
        for i, (new, _, _, call_ids) in enumerate(prepared):
            nul_free(i, key=new.key, tool_calls="".join(call_ids))
        wake = self._wake
        echo = wake is not None and wake.expect_echo(session_id)
        try:
            logged, notified = self._append(session_id, prepared, after, whole_keys)
        except BaseException:
            if wake is not None and echo:
                wake.echo_lost(session_id)
            raise
        if wake is not None and echo and not notified:
            wake.echo_lost(session_id)
        return logged

    def _append(
        self,
        session_id: str,
        prepared: Sequence[Prepared],
        parent: int | None,
        whole_keys: bool = False,
    ) -> tuple[list[LoggedMessage], bool]:
        if parent is None and not whole_keys and unchecked(prepared):
            with self._db.read() as cur:
                return insert(cur, session_id, prepared, {}, self.channel)
        with self._db.write() as cur:
            return insert_checked(cur, session_id, prepared, self.channel, parent, whole_keys)

    def links(self, session_id: str) -> list[tuple[int, int]]:
        with self._db.read() as cur:
            found = cur.execute(q.LINKS_SQL, (session_id,)).fetchall()
            if not found:
                require(cur, session_id)
        return [(int(seq), int(parent)) for seq, parent in found]

    def messages(
        self, session_id: str, start: int = 1, end: int | None = None
    ) -> list[LoggedMessage]:
        with self._db.read() as cur:
            if end is None:
                found = cur.execute(q.MESSAGES_FROM_SQL, (session_id, start)).fetchall()
            else:
                found = cur.execute(q.MESSAGES_BETWEEN_SQL, (session_id, start, end)).fetchall()
            if not found:
                require(cur, session_id)
        return [rows.logged(session_id, row) for row in found]

    def token_counts(self, session_id: str, start: int, end: int) -> list[tuple[int, int]]:
        with self._db.read() as cur:
            found = cur.execute(q.TOKEN_COUNTS_SQL, (session_id, start, end)).fetchall()
            if not found:
                require(cur, session_id)
        return [(int(seq), int(tokens)) for seq, tokens in found]

    def messages_at(self, session_id: str, seqs: Sequence[int]) -> list[LoggedMessage]:
        wanted = sorted({int(s) for s in seqs})
        with self._db.read() as cur:
            found = cur.execute(q.MESSAGES_AT_SQL, (session_id, wanted)).fetchall()
            if not found:
                require(cur, session_id)
        return [rows.logged(session_id, row) for row in found]

    def messages_before(self, session_id: str, before: int, limit: int) -> list[LoggedMessage]:
        with self._db.read() as cur:
            found = (
                cur.execute(q.MESSAGES_BEFORE_SQL, (session_id, before, limit)).fetchall()
                if limit > 0
                else []
            )
            if not found:
                require(cur, session_id)
        return [rows.logged(session_id, row) for row in found]

    def last_seq(self, session_id: str) -> int:
        with self._db.read() as cur:
            return int(one_row(cur, q.LAST_SEQ_SQL, (session_id,), session_id)[0])

    def last_of_role(self, session_id: str, role: str) -> LoggedMessage | None:
        with self._db.read() as cur:
            row = cur.execute(q.LAST_OF_ROLE_SQL, (session_id, role)).fetchone()
            if row is None:
                require(cur, session_id)
        return None if row is None else rows.logged(session_id, row)

    def search(
        self,
        session_id: str,
        query: str,
        *,
        limit: int = 20,
        before: int | None = None,
        after: int | None = None,
        roles: Collection[str] | None = None,
    ) -> list[SearchHit]:
        scope = search_scope(query, limit, before, after, roles)
        with self._db.read() as cur:
            return ranked(cur, session_id, scope, limit)

    def keyed(self, session_id: str, keys: Sequence[str]) -> dict[str, LoggedMessage]:
        wanted = sorted(set(keys))
        with self._db.read() as cur:
            found = cur.execute(q.KEYS_SQL, (session_id, wanted)).fetchall()
            if not found:
                require(cur, session_id)
        logged = [rows.logged(session_id, row) for row in found]
        return {str(m.key): m for m in logged}

    # -- folds ----------------------------------------------------------------

    def folds(
        self,
        session_id: str,
        view: str,
        *,
        include_superseded: bool = False,
        known: Mapping[str, Fold] | None = None,
    ) -> list[Fold]:
        sql = q.ALL_FOLDS_SQL if include_superseded else q.ACTIVE_FOLDS_SQL
        with self._db.read() as cur:
            found = cur.execute(sql, (list(known or ()), session_id, view)).fetchall()
            if not found:
                require(cur, session_id)
        return [rows.fold_known(session_id, row, known) for row in found]

    def _lock_version(self, cur: Cursor, session_id: str, view: str) -> tuple[int, int]:
        """The view's fold version and the log's last seq, the version row locked."""
        with session_must_exist(session_id):
            cur.execute(q.ENSURE_VERSION_SQL, (session_id, view))
        version, last = one_row(cur, q.LOCK_VERSION_SQL, (session_id, view), session_id)
        return int(version), int(last)

    def quarantine_fold(self, session_id: str, view: str, fold_id: str, reason: str) -> int:
        with self._db.write() as cur:
            version, _ = self._lock_version(cur, session_id, view)
            if not cur.execute(q.QUARANTINE_SQL, (reason, session_id, view, fold_id)).rowcount:
                return version
            cur.execute(q.SET_VERSION_SQL, (version + 1, session_id, view))
        return version + 1

    def quarantined(self, session_id: str, view: str) -> list[Quarantined]:
        with self._db.read() as cur:
            found = cur.execute(q.QUARANTINED_SQL, (session_id, view)).fetchall()
            if not found:
                require(cur, session_id)
        return [Quarantined(str(fold_id), str(reason)) for fold_id, reason in found]

    def head(self, session_id: str, view: str, *, branch: int | None = None) -> Head:
        at = check_seq(branch, "branch")
        params = {"session": session_id, "view": view, "branch": at}
        with self._db.read() as cur:
            found = cur.execute(q.HEAD_SQL, params).fetchone()
            return head_of(found, session_id, at, lambda seq: read_path(cur, session_id, seq, ""))

    def commit_folds(
        self,
        session_id: str,
        view: str,
        folds: Sequence[Fold],
        expected_version: int,
        *,
        branch: int | None = None,
    ) -> int:
        encoded = [rows.fold_json(i, fold) for i, fold in enumerate(folds)]
        at = check_seq(branch, "branch")
        with self._db.write() as cur:
            version, last = self._lock_version(cur, session_id, view)
            if version != expected_version:
                raise FoldConflict(view, expected_version, version)
            branch_path = None if at is None else read_path(cur, session_id, at, "branch")
            check_on_branch(folds, branch_path)
            spans = {"session": session_id, "view": view}
            active = spans_near(cur.execute, SPAN_SQL, spans, folds, branch_path)
            for (fold, gone), body_json in zip(
                plan_commit(active, view, folds, last), encoded, strict=True
            ):
                if gone:
                    cur.executemany(q.SUPERSEDE_SQL, [(fold.id, fold_id) for fold_id in gone])
                insert_fold(cur, session_id, fold, body_json)
            cur.execute(q.SET_VERSION_SQL, (version + 1, session_id, view))
        return version + 1

    # -- views ----------------------------------------------------------------

    def put_view(
        self,
        session_id: str,
        name: str,
        config: Mapping[str, Any],
        expected_version: int | None = None,
    ) -> ViewRecord:
        config_json = view_config_json(name, config)
        nul_free(view=name)
        now = time.time()
        with self._db.write() as cur:
            version = write_view(cur, session_id, name, config_json, expected_version, now)
        return ViewRecord(session_id, name, json.loads(config_json), version, now)

    def get_view(self, session_id: str, name: str) -> ViewRecord | None:
        params = {"session": session_id, "view": name}
        with self._db.read() as cur:
            row = one_row(cur, q.GET_VIEW_SQL, params, session_id)
        return None if row[0] is None else rows.view(session_id, row)

    def list_views(self, session_id: str) -> list[ViewRecord]:
        with self._db.read() as cur:
            found = cur.execute(q.LIST_VIEWS_SQL, (session_id,)).fetchall()
            if not found:
                require(cur, session_id)
        return [rows.view(session_id, row) for row in found]

    # -- wake-ups and lifetime --------------------------------------------------

    def wake(self) -> PostgresWake:
        """This store's wake-up port: appends ``NOTIFY``, a thread ``LISTEN``s."""
        with self._wake_lock:
            if self._wake is None:
                self._wake = PostgresWake(
                    self.options.conninfo, self.channel, where=self._where, send=self._notify
                )
            return self._wake

    def _notify(self, payload: str) -> None:
        """Send ``payload`` on the wake's channel now (an event for other processes)."""
        with self._db.read() as cur:
            cur.execute(q.NOTIFY_SQL, (self.channel, payload))

    def close(self) -> None:
        """Stop the wake's listener and close the pool; later calls raise ``StoreError``."""
        with self._wake_lock:
            wake, self._wake = self._wake, None
        if wake is not None:
            wake.close()
        self._db.close()
