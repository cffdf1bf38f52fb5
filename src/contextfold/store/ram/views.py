"""The in-memory store's view records and compaction leases, beside its log and folds.

``RAMStore`` inherits them; they share its lock and its sessions.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from contextfold.core.errors import ViewConflict
from contextfold.core.log import SessionRecord, ViewRecord, json_copy
from contextfold.store.checks import check_lease, view_config_json


class ViewShelf:
    """View configurations by session and name, and leases by (session, view)."""

    _lock: threading.Lock
    _views: dict[str, dict[str, ViewRecord]]
    _leases: dict[tuple[str, str], tuple[str, float]]
    get_session: Callable[[str], SessionRecord]

    def put_view(
        self,
        session_id: str,
        name: str,
        config: Mapping[str, Any],
        expected_version: int | None = None,
    ) -> ViewRecord:
        # Kept as the JSON data a database would give back, and out of the caller's reach.
        stored = json.loads(view_config_json(name, config))
        self.get_session(session_id)
        with self._lock:
            views = self._views[session_id]
            old = views.get(name)
            version = 0 if old is None else old.version
            if expected_version is not None and expected_version != version:
                raise ViewConflict(name, expected_version, version)
            record = ViewRecord(session_id, name, stored, version + 1, time.time())
            views[name] = record
            return _copied(record)

    def get_view(self, session_id: str, name: str) -> ViewRecord | None:
        self.get_session(session_id)
        with self._lock:
            record = self._views[session_id].get(name)
            return None if record is None else _copied(record)

    def list_views(self, session_id: str) -> list[ViewRecord]:
        self.get_session(session_id)
        with self._lock:
            views = self._views[session_id]
            return [_copied(views[name]) for name in sorted(views)]

    def acquire_lease(self, session_id: str, view: str, owner: str, ttl_s: float = 60.0) -> bool:
        check_lease(owner, ttl_s)
        self.get_session(session_id)
        with self._lock:
            now = time.time()
            held = self._leases.get((session_id, view))
            if held is not None and held[0] != owner and held[1] > now:
                return False
            self._leases[(session_id, view)] = (owner, now + ttl_s)
            return True

    def release_lease(self, session_id: str, view: str, owner: str) -> bool:
        self.get_session(session_id)
        with self._lock:
            held = self._leases.get((session_id, view))
            if held is None or held[0] != owner:
                return False
            del self._leases[(session_id, view)]
            return True


def _copied(record: ViewRecord) -> ViewRecord:
    """A record whose configuration the caller may change without changing the store."""
    return replace(record, config=json_copy(record.config))
