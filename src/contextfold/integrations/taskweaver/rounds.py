"""TaskWeaver's rounds and posts, and how they are written into a contextfold log.

One TaskWeaver ``Round`` is one contextfold round. Its ``user_query`` is logged
as a user message; each post as an assistant message named after its sender::

    {"role": "assistant", "name": "CodeInterpreter", "content": "<post.message>",
     "meta": {"round_id": "round-...", "round": 3, "post": 2,
              "send_to": "Planner", "state": "created"}}

``round`` counts rounds from 1, ``post`` is the post's index in ``post_list``
and ``state`` the round's state when the post was logged. Posts from ``User``
are not logged again: TaskWeaver's only one is the round's opening post
(User -> Planner), whose text is the user query, and a second user message
would start a second contextfold round, shifting every round number after it.

Round states change after their posts are logged, so the log cannot carry
them: filters ask the live ``Round`` objects instead (``RoundLog.round_of``).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message
from contextfold.memory.session import Session

RoundState = Literal["created", "finished", "failed"]
STATES: tuple[RoundState, ...] = ("created", "finished", "failed")
USER = "User"


class PostLike(Protocol):
    """What a compactor reads of a post: TaskWeaver's own ``Post`` fits."""

    @property
    def send_from(self) -> str: ...
    @property
    def send_to(self) -> str: ...
    @property
    def message(self) -> str: ...


class RoundLike(Protocol):
    """What a compactor reads of a round: TaskWeaver's own ``Round`` fits."""

    @property
    def id(self) -> str: ...
    @property
    def user_query(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def post_list(self) -> Sequence[PostLike]: ...


@dataclass
class Post:
    """One message between two roles of a round."""

    id: str
    send_from: str
    send_to: str
    message: str

    @classmethod
    def create(cls, message: str, send_from: str, send_to: str = "Unknown") -> Post:
        return cls(f"post-{uuid.uuid4().hex[:12]}", send_from, send_to, message)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "send_from": self.send_from,
            "send_to": self.send_to,
            "message": self.message,
        }


@dataclass(eq=False)
class Round:
    """A user query and the posts it set off; ``Memory`` logs each post as it is added."""

    id: str
    user_query: str
    state: RoundState = "created"
    post_list: list[Post] = field(default_factory=list)
    _on_post: Callable[[Round, Post], None] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @classmethod
    def create(
        cls,
        user_query: str,
        id: str | None = None,
        state: RoundState = "created",
        post_list: list[Post] | None = None,
    ) -> Round:
        check_state(state)
        return cls(id or f"round-{uuid.uuid4().hex[:12]}", user_query, state, list(post_list or []))

    def add_post(self, post: Post) -> None:
        # Logged first: a post the log refuses is not added either.
        if self._on_post is not None:
            self._on_post(self, post)
        self.post_list.append(post)

    def change_round_state(self, state: RoundState) -> None:
        check_state(state)
        self.state = state

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "user_query": self.user_query,
            "state": self.state,
            "post_list": [p.to_dict() for p in self.post_list],
        }


def check_state(state: str) -> None:
    if state not in STATES:
        raise InvalidInput(
            f"round state must be one of {', '.join(STATES)}, not {state!r}", field="state"
        )


class RoundLog:
    """Rounds written into a session in order, and found again from their messages.

    ``Memory`` writes each round and post as it is created; a standalone
    compactor calls ``mirror`` with the rounds it is given. Either way a post
    is logged once, and only after every round before its own.
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        self._lock = threading.RLock()
        self._rounds: dict[str, RoundLike] = {}
        self._opening: dict[str, int] = {}  # round id -> seq of its user message
        self._number: dict[str, int] = {}  # round id -> round number, from 1
        self._read: dict[str, int] = {}  # round id -> posts read so far
        self._last: RoundLike | None = None

    def open(self, round: RoundLike) -> None:
        """Log the round's user query; it opens a contextfold round."""
        with self._lock:
            if round.id in self._rounds:
                raise InvalidInput(f"round {round.id!r} is already logged", field="id")
            number = len(self._number) + 1
            meta = {"round_id": round.id, "round": number, "state": round.state}
            logged = self.session.append(
                {"role": "user", "content": round.user_query, "meta": meta}
            )
            self._rounds[round.id] = round
            self._opening[round.id] = logged.seq
            self._number[round.id] = number
            self._read[round.id] = 0
            self._last = round

    def post(self, round: RoundLike, post: PostLike) -> None:
        """Log the round's next post (User posts excepted: the user message stands for them)."""
        with self._lock:
            index = self._read[round.id]
            if post.send_from != USER:
                meta = {
                    "round_id": round.id,
                    "round": self._number[round.id],
                    "post": index,
                    "send_to": post.send_to,
                    "state": round.state,
                }
                self.session.append(
                    {
                        "role": "assistant",
                        "name": post.send_from,
                        "content": post.message,
                        "meta": meta,
                    }
                )
            self._read[round.id] = index + 1

    def mirror(self, rounds: Sequence[RoundLike]) -> None:
        """Log what is new in ``rounds`` (an append-only list, as TaskWeaver keeps it).

        Only the newest logged round can still gain posts: a post added to an
        older round after a later one began would land in the wrong round, so
        it is not read.
        """
        with self._lock:
            last = self._last
            if last is not None:
                for post in list(last.post_list)[self._read[last.id] :]:
                    self.post(last, post)
            for round in list(rounds)[len(self._number) :]:
                self.open(round)
                for post in list(round.post_list):
                    self.post(round, post)

    def round_of(self, message: Message) -> RoundLike | None:
        """The round a logged message belongs to; None for messages not written here."""
        meta = message.get("meta")
        if not isinstance(meta, dict):
            return None
        return self._rounds.get(str(meta.get("round_id")))

    def seq_of(self, round_id: str) -> int | None:
        """Seq of the round's user message, None when the round is not logged."""
        return self._opening.get(round_id)


def involves(post: PostLike, role: str) -> bool:
    """TaskWeaver's rule for the posts a role sees: sent from it or to it."""
    return post.send_from == role or post.send_to == role


def role_filter(log: RoundLog, role: str | None) -> Callable[[Message], bool]:
    """What a role's view shows: rounds that did not fail, with the posts that involve it.

    Every other round stays (its user message at least), as in TaskWeaver's
    ``get_role_rounds``, so round numbers are the same in every view. Without
    a role, every post is shown (the seed's compactor reads them all).
    Messages not written by ``log`` are always shown.
    """

    def keep(message: Message) -> bool:
        round = log.round_of(message)
        if round is None:
            return True
        if round.state == "failed":
            return False
        if role is None or message["role"] == "user":
            return True
        meta = message["meta"]
        return message.get("name") == role or meta.get("send_to") == role

    return keep
