"""The facade a user holds: ``Memory`` opens sessions, a ``Session`` owns a log
and hands out its views (``contextfold.memory.view``).

::

    memory = Memory("chat.db")                   # SQLite; Memory() keeps it in RAM
    session = memory.session("s1", system="You are a helpful agent.")
    session.append({"role": "user", "content": "hi"})
    view = session.view("default", preset="offline", budget=8000)
    view.compact()
    prompt = view.render()                       # list of OpenAI-format messages
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.events import log
from contextfold.core.log import LoggedMessage, NewMessage
from contextfold.core.messages import Message, validate_messages
from contextfold.core.tokens import TokenCounter, get_counter
from contextfold.memory.view import MessageFilter, View
from contextfold.store.base import Store
from contextfold.store.registry import open_store
from contextfold.strategies.pipeline import Pipeline

AppendListener = Callable[["Session", list[LoggedMessage]], None]


class Memory:
    """Where sessions live: a store and a token counter.

    ``store`` is a store object, or what ``open_store`` opens: None (RAM), a
    path or a URL such as ``"sqlite://chat.db?durability=full"``.
    """

    def __init__(
        self,
        store: Store | str | os.PathLike[str] | None = None,
        *,
        encoding: str = "o200k_base",
    ) -> None:
        if store is None or isinstance(store, str | os.PathLike):
            self.store: Store = open_store(store)
        else:
            self.store = store
        self.encoding = encoding

    def session(
        self,
        session_id: str,
        *,
        system: str | None = None,
        encoding: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Session:
        """Open a session, creating it (with ``system`` as its first message) if new."""
        record = self.store.create_session(
            session_id, encoding=encoding or self.encoding, meta=meta
        )
        session = Session(self.store, record.id, get_counter(record.encoding))
        if system is not None and self.store.last_seq(record.id) == 0:
            session.append({"role": "system", "content": system})
        return session

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Session:
    """One conversation: an append-only log and the views over it."""

    def __init__(self, store: Store, session_id: str, counter: TokenCounter) -> None:
        self.store = store
        self.id = session_id
        self.counter = counter
        self._views: dict[str, View] = {}
        self.on_append: list[AppendListener] = []

    def append(self, message: Mapping[str, Any], *, key: str | None = None) -> LoggedMessage:
        """Validate, count and log one message; ``key`` makes a retried append a no-op."""
        return self.extend([message], keys=[key])[0]

    def extend(
        self, messages: Sequence[Mapping[str, Any]], *, keys: Sequence[str | None] | None = None
    ) -> list[LoggedMessage]:
        """Append a batch atomically: all are stored or, on any error, none."""
        if keys is not None and len(keys) != len(messages):
            raise InvalidInput("keys must match messages one to one", field="keys")
        answered = {
            str(m.get("tool_call_id"))
            for m in messages
            if isinstance(m, Mapping) and m.get("role") == "tool" and m.get("tool_call_id")
        }
        offset = self.store.last_seq(self.id)
        open_calls = self.store.called_ids(self.id, answered) if answered else set()
        valid = validate_messages(messages, open_calls=open_calls, offset=offset)
        batch = [
            NewMessage(m, self.counter.message(m), keys[i] if keys else None)
            for i, m in enumerate(valid)
        ]
        logged = self.store.append(self.id, batch)
        for listener in list(self.on_append):
            # The messages are logged whatever a listener does: an error here
            # must not look like a failed append, so it is logged, not raised.
            try:
                listener(self, logged)
            except Exception:
                log.exception("append listener failed")
        return logged

    def history(self) -> list[Message]:
        """The whole log, never folded."""
        return [m.message for m in self.store.messages(self.id)]

    def view(
        self,
        name: str = "default",
        *,
        pipeline: Pipeline | None = None,
        preset: str | None = None,
        budget: int | None = None,
        filter: MessageFilter | None = None,
        llm: Any = None,
        **preset_options: Any,
    ) -> View:
        """Get or configure a view; a view's folds are its own.

        Calling again with some settings changes only those on the existing view.
        """
        if pipeline is None and preset is not None:
            from contextfold.strategies.presets import get_preset

            pipeline = get_preset(preset, **preset_options)
        existing = self._views.get(name)
        if existing is not None:
            if pipeline is not None:
                existing.pipeline = pipeline
            if budget is not None:
                existing.budget = budget
            if filter is not None:
                existing.filter = filter
            if llm is not None:
                existing.llm = llm
            return existing
        view = View(self, name, pipeline=pipeline, budget=budget, filter=filter, llm=llm)
        self._views[name] = view
        return view
