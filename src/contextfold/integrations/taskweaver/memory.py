"""TaskWeaver's ``Memory`` with the seed's hooks, over a contextfold session.

``conversation.rounds`` holds the raw ``Round`` objects, which compaction never
touches; every round and post is also logged into ``session`` as it is created
(see ``rounds``), and compactors fold their own views of that log.
"""

from __future__ import annotations

import copy
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from contextfold.core.errors import InvalidInput
from contextfold.core.events import log
from contextfold.integrations.taskweaver.compactor import (
    CompactedMessage,
    CompactionProvider,
    ContextCompactor,
)
from contextfold.integrations.taskweaver.rounds import USER, Post, Round, RoundLog, involves
from contextfold.memory.session import Memory as LogMemory
from contextfold.memory.session import StoreSpec


@dataclass
class TaskWeaverConversation:
    """The rounds of a session, in order; append-only."""

    id: str
    rounds: list[Round] = field(default_factory=list)

    @classmethod
    def init(cls) -> TaskWeaverConversation:
        return cls(f"conv-{uuid.uuid4().hex[:12]}")

    def add_round(self, round: Round) -> None:
        self.rounds.append(round)


class Memory:
    """All the rounds of one session, and the hooks compactors attach to.

    ``store`` is a contextfold store, a path (SQLite) or None (RAM). The
    session must be new: TaskWeaver's memory starts empty, and rounds logged
    by an earlier process would shift every round number.
    """

    def __init__(self, session_id: str, *, store: StoreSpec = None) -> None:
        self.session_id = session_id
        self._owns_store = store is None or isinstance(store, str | os.PathLike)
        self._backing = LogMemory(store)
        self.session = self._backing.session(session_id)
        if self.session.last_seq() > 0:
            raise InvalidInput(
                f"session {session_id!r} already has messages; a TaskWeaver memory starts empty",
                field="session_id",
            )
        self.conversation = TaskWeaverConversation.init()
        self._log = RoundLog(self.session)
        self._lock = threading.RLock()
        self._compaction_providers: dict[str, CompactionProvider] = {}
        self._on_round_added_callbacks: list[Callable[[int], None]] = []

    def on_round_added(self, callback: Callable[[int], None]) -> None:
        """Call ``callback(total_rounds)`` after each ``create_round``."""
        self._on_round_added_callbacks.append(callback)

    def register_compaction_provider(self, role: str, provider: CompactionProvider) -> None:
        """Let ``provider`` compact for ``role`` and hear of new rounds.

        A ``ContextCompactor`` is bound to this memory: it folds a view of the
        memory's own log, named after its role (``role`` unless it was given one).
        """
        self._compaction_providers[role] = provider
        if isinstance(provider, ContextCompactor):
            provider.attach(self._log, role)
        if provider.notify_rounds_changed not in self._on_round_added_callbacks:
            self._on_round_added_callbacks.append(provider.notify_rounds_changed)

    def create_round(self, user_query: str) -> Round:
        """Start a round, log its query, then tell every callback the round count.

        The round exists whatever a callback does: a failing one is logged, not raised.
        """
        if not isinstance(user_query, str):
            raise InvalidInput("user_query must be a string", field="user_query")
        round = Round.create(user_query=user_query)
        with self._lock:
            self._log.open(round)
            round._on_post = self._log_post
            self.conversation.add_round(round)
            total = len(self.conversation.rounds)
        for callback in list(self._on_round_added_callbacks):
            try:
                callback(total)
            except Exception:
                log.exception("on_round_added callback failed")
        return round

    def _log_post(self, round: Round, post: Post) -> None:
        with self._lock:
            if not self.conversation.rounds or self.conversation.rounds[-1] is not round:
                raise InvalidInput(
                    "posts go to the round in progress: the log is append-only", field="round"
                )
            opening = post.message == round.user_query and not any(
                p.send_from == USER for p in round.post_list
            )
            if post.send_from == USER and not opening:
                raise InvalidInput(
                    "a round has one user post, its query; a new user message starts a new round",
                    field="send_from",
                )
            self._log.post(round, post)

    def get_role_rounds(
        self, role: str, include_failure_rounds: bool = False
    ) -> tuple[list[Round], CompactedMessage | None]:
        """Copies of the rounds, each with the posts sent from or to ``role``; and the
        compaction of ``role``'s provider, if one is registered.

        As TaskWeaver's ``get_role_rounds``: every round is kept (its query at
        least, so indices match in every role), failed ones only when asked.
        ``rounds[compaction.end_index:]`` are the rounds the compaction does not
        cover: for a bound ``ContextCompactor`` its ``end_index`` is counted over
        this list, which differs from its own count when failed rounds are included.
        """
        rounds = [
            Round.create(
                user_query=r.user_query,
                id=r.id,
                state=r.state,
                post_list=[copy.deepcopy(p) for p in r.post_list if involves(p, role)],
            )
            for r in list(self.conversation.rounds)
            if include_failure_rounds or r.state != "failed"
        ]
        provider = self._compaction_providers.get(role)
        if provider is None:
            return rounds, None
        if isinstance(provider, ContextCompactor) and provider.log is self._log:
            return rounds, provider.compaction_for(rounds)
        return rounds, provider.get_compaction()

    def close(self) -> None:
        """Close the store if this memory opened it (None or a path)."""
        if self._owns_store:
            self._backing.close()
