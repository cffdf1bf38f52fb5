"""The PostgreSQL store's compaction leases: each take or release one statement, whose
row lock makes the check and the take atomic across every connection.

``PostgresStore`` inherits them; they share its connections.
"""

from __future__ import annotations

import time

from contextfold.store.checks import check_lease
from contextfold.store.postgres import sql as q
from contextfold.store.postgres.pool import Connections, nul_free, require, session_must_exist


class PostgresLeases:
    """Leases by (session, view) in the ``leases`` table."""

    _db: Connections

    def acquire_lease(self, session_id: str, view: str, owner: str, ttl_s: float = 60.0) -> bool:
        check_lease(owner, ttl_s)
        nul_free(owner=owner)
        now = time.time()
        params = {
            "session": session_id,
            "view": view,
            "owner": owner,
            "expires": now + ttl_s,
            "now": now,
        }
        with self._db.read() as cur, session_must_exist(session_id):
            return cur.execute(q.TAKE_LEASE_SQL, params).fetchone() is not None

    def release_lease(self, session_id: str, view: str, owner: str) -> bool:
        with self._db.read() as cur:
            gone = cur.execute(q.RELEASE_LEASE_SQL, (session_id, view, owner)).fetchone()
            if gone is None:
                require(cur, session_id)
        return gone is not None
