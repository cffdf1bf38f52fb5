"""The facade a user holds: ``Memory`` opens sessions, a ``Session`` owns a log
and hands out its views (``contextfold.memory.view``).

::

    memory = Memory("chat.db")                   # SQLite; Memory() keeps it in RAM
    session = memory.session("s1", system="You are a helpful agent.")
    session.append({"role": "user", "content": "hi"})
    view = session.view("default", preset="offline", budget=8000)   # stored with the session
    view.compact()
    prompt = view.render()                       # list of OpenAI-format messages

    Memory("chat.db").session("s1").view("default")   # anywhere later: the same view
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from contextfold.core.checks import batch_of, check_key, check_limit, check_name
from contextfold.core.errors import InvalidInput, NotFound
from contextfold.core.log import LoggedMessage, NewMessage, SessionInfo, ViewRecord
from contextfold.core.messages import check_json, validate_message
from contextfold.core.tokens import TokenCounter, get_counter
from contextfold.llm.base import LLM
from contextfold.memory.api_keys import ApiKeys
from contextfold.memory.branches import SessionBranches
from contextfold.memory.config import folding_changes, given_changes
from contextfold.memory.filters import MessageFilter
from contextfold.memory.matching import LogDigests, Recorded, record
from contextfold.memory.view import Binding, View
from contextfold.store.base import Store, service_port
from contextfold.store.registry import open_store
from contextfold.store.tree import check_seq
from contextfold.store.wake import LocalWake, PollingWake, wake_for
from contextfold.strategies.pipeline import Pipeline

StoreSpec = Store | str | os.PathLike[str] | None
"""What ``Memory`` opens: a store, a store URL, a SQLite path, or None for a fresh RAM store."""


class Memory:
    """Where sessions live: a store (by object or URL), a token encoding, and what this
    process keeps for each view beside its stored record."""

    def __init__(self, store: StoreSpec = None, *, encoding: str = "o200k_base") -> None:
        get_counter(check_name(encoding, "encoding"))
        if store is None or isinstance(store, str | os.PathLike):
            store = open_store(store)
        elif not isinstance(store, Store):  # every member of the port, ``abilities`` included
            raise InvalidInput(
                f"store must be a Store, a URL or a path, not {type(store).__name__}",
                field="store",
            )
        self.store: Store = store
        self.encoding = encoding
        self.wake: LocalWake = wake_for(self.store)
        self._lock = threading.Lock()
        self._bindings: dict[tuple[str, str], Binding] = {}
        self.digests = LogDigests()
        """Each session's log as digests, for ``Session.record`` in this process."""

    def session(
        self,
        session_id: str,
        *,
        system: str | None = None,
        encoding: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Session:
        """Open a session, creating it (with ``system`` as its first message) if new.

        Every argument is checked before anything is created. The session and
        its system prompt are created in one store call, which finds a session
        with that prompt as it is, so threads and processes opening one new
        session at once log it once; a session with another prompt (or with
        messages and none) is ``InvalidInput`` naming ``system``. An existing
        session keeps the encoding it was created with: its stored counts are in it.
        """
        check_name(session_id, "session_id")
        if system is not None and not isinstance(system, str):
            raise InvalidInput("system must be a string", field="system")
        if system is not None:
            check_json(system, "system")
        if meta is not None and not isinstance(meta, Mapping):
            raise InvalidInput("meta must be an object", field="meta")
        meta = None if meta is None else check_json(meta, "meta")
        wanted = get_counter(check_name(encoding or self.encoding, "encoding"))
        prompt = None
        if system is not None:
            message = validate_message({"role": "system", "content": system})
            prompt = NewMessage(message, self._counter_for(session_id, wanted).message(message))
        record = self.store.create_session(
            session_id, encoding=wanted.name, meta=meta, system=prompt
        )
        if encoding is not None and record.encoding != encoding:
            raise InvalidInput(
                f"session {session_id!r} counts tokens with {record.encoding!r}, "
                f"not {encoding!r}: its stored counts are in that encoding",
                field="encoding",
            )
        counter = wanted if record.encoding == wanted.name else get_counter(record.encoding)
        return Session(self, record.id, counter, created_at=record.created_at)

    def existing_session(self, session_id: str) -> Session:
        """Open a session that exists, creating nothing: ``NotFound`` when there is none.

        For an interface that must not create a session a client merely names.
        """
        check_name(session_id, "session_id")
        record = self.store.get_session(session_id)
        return Session(self, record.id, get_counter(record.encoding), created_at=record.created_at)

    def sessions(
        self,
        prefix: str = "",
        *,
        after: str | None = None,
        limit: int | None = None,
        search: str | None = None,
    ) -> list[str]:
        """Ids of sessions starting with ``prefix``, by id: those after ``after``, at most
        ``limit``, and with ``search`` only those whose id after the prefix contains it
        (ASCII letters compared without case). Pages never repeat or skip a session."""
        return service_port(self.store).list_sessions(
            prefix, after=after, limit=limit, search=search
        )

    def session_info(self, session_id: str) -> SessionInfo:
        """The session with its size and last activity, or ``NotFound``."""
        return service_port(self.store).session_info(session_id)

    @property
    def api_keys(self) -> ApiKeys:
        """The service's API keys kept in this memory's store."""
        return ApiKeys(self.store)

    @property
    def in_process(self) -> bool:
        """Whether the store answers from this process (SQLite, RAM), never waiting on a
        network: a service runs such reads on its event loop instead of a thread."""
        return self.store.abilities.in_process

    def poll_appends_every(self, interval_s: float) -> None:
        """How often this process reads the log for appends other processes made, where
        the store cannot announce them (a SQLite file); a store that announces them
        (PostgreSQL) or lives in this process has nothing to poll."""
        if isinstance(self.wake, PollingWake):
            self.wake.interval_s = interval_s

    def _counter_for(self, session_id: str, wanted: TokenCounter) -> TokenCounter:
        """The counter a session's system prompt is counted with: its own, once it exists."""
        try:
            record = self.store.get_session(session_id)
        except NotFound:
            return wanted
        return wanted if record.encoding == wanted.name else get_counter(record.encoding)

    def binding(self, session_id: str, view: str) -> Binding:
        """This process's side of a view: shared by every handle this Memory gives out."""
        with self._lock:
            return self._bindings.setdefault((session_id, view), Binding())

    def forget(self, session_id: str, view: str) -> None:
        """Drop this process's side of a view (its caches, bound objects, callbacks).

        For a process that serves many views in turn (a worker): the next
        handle reads the view from the store again. Nothing stored changes.
        """
        with self._lock:
            self._bindings.pop((session_id, view), None)

    def delete_session(self, session_id: str) -> bool:
        """Remove a session whole, log included; False if there was none.

        The one way anything logged goes away. This process's side of the
        session's views (caches, callbacks) goes with it, so a session later
        created under the same id starts clean here.
        """
        check_name(session_id, "session_id")
        gone = self.store.delete_session(session_id)
        with self._lock:
            for key in [k for k in self._bindings if k[0] == session_id]:
                del self._bindings[key]
        return gone

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Session(SessionBranches):
    """One conversation: an append-only log and the views over it."""

    def __init__(
        self, memory: Memory, session_id: str, counter: TokenCounter, *, created_at: float
    ) -> None:
        self.memory = memory
        self.store = memory.store
        self.id = session_id
        self.counter = counter
        self.created_at = created_at
        """When the session was created: one deleted and created again under its id is
        another log, with another time."""

    @property
    def wake(self) -> LocalWake:
        """Where appends to this session are announced (``contextfold.store.wake``)."""
        return self.memory.wake

    def append(
        self, message: Mapping[str, Any], *, key: str | None = None, parent: int | None = None
    ) -> LoggedMessage:
        """Validate, count and log one message; ``key`` makes a retried append a no-op;
        ``parent``: see ``extend``."""
        return self.extend([message], keys=[check_key(key)], parent=parent)[0]

    def extend(
        self,
        messages: Iterable[Mapping[str, Any]],
        *,
        keys: Iterable[str | None] | None = None,
        parent: int | None = None,
        whole_keys: bool = False,
    ) -> list[LoggedMessage]:
        """Append a batch atomically: all are stored or, on any error, none.

        ``whole_keys``: the keys are one request's, taken all or none, decided
        by the store inside its write (``Store.append``): a retry gets the
        records back, keys used before with fewer messages are ``InvalidInput``
        naming ``key``.

        The batch continues the newest message's branch, or follows ``parent``
        (a logged seq; 0 for a new first message): appending to an earlier
        point starts a branch (``contextfold.core.branches``), and nothing
        logged changes.

        Each message is checked here; what may follow what (a tool result after
        its call, a key naming one message) is checked by the store inside its
        write (``contextfold.core.order``), where no concurrent append can slip in.

        ``messages`` is any iterable of messages (a list, a generator); a single
        message, a string or None is refused. Then every runner compacting one
        of this session's views, in this process or (through the store)
        another, is woken.
        """
        batch = batch_of(messages, "messages")
        after = check_seq(parent, "parent")
        key_list = None
        if keys is not None:
            key_list = [check_key(k, f"keys[{i}]") for i, k in enumerate(batch_of(keys, "keys"))]
            if len(key_list) != len(batch):
                raise InvalidInput("keys must match messages one to one", field="keys")
        try:
            valid = [validate_message(m, index=i) for i, m in enumerate(batch)]
        except InvalidInput as exc:
            # Counted on the branch, as every input error names a message; read only now.
            offset = (
                self.store.last_seq(self.id)
                if after is None
                else self.store.head(self.id, "", branch=after).path.length
            )
            raise InvalidInput(
                exc.reason, index=offset + (exc.index or 0), field=exc.field
            ) from None
        new = [
            NewMessage(m, self.counter.message(m), key_list[i] if key_list else None)
            for i, m in enumerate(valid)
        ]
        logged = self.store.append(self.id, new, parent=after, whole_keys=whole_keys)
        self.wake.notify(self.id)
        return logged

    def record(
        self,
        messages: Iterable[Mapping[str, Any]],
        *,
        after: int | None = None,
        most: int | None = None,
    ) -> Recorded:
        """Log a client's whole conversation once, however often it is sent again.

        Frameworks and API clients resend their whole history on every call; this
        matches it against every branch of the log (longest common prefix of what a
        model sees, the newest branch on a tie, ``contextfold.memory.matching``) and
        appends only what follows the deepest match. A conversation that diverges
        (an edit, a regenerate, a dropped turn) starts a branch; nothing logged
        changes. A conversation not starting with a system message is matched after
        the log's own leading system messages. ``after``: match from that logged seq
        (the rest of its branch); ``most``: the most new messages accepted. Render the
        result with ``view.render(branch=recorded.at)``.
        """
        batch = batch_of(messages, "messages")
        after = check_seq(after, "after")
        if after is not None and after > self.last_seq():
            raise InvalidInput(
                f"after names seq {after}, not logged in this session", field="after"
            )
        return record(self, self.memory.digests, batch, after=after, most=most)

    def system_end(self) -> int:
        """The seq of the log's last leading system (or developer) message, 0 when it has
        none: the system prompt every branch shares (read from ``Memory.digests``)."""
        return self.memory.digests.current(self).system

    def messages(
        self, *, after: int = 0, limit: int | None = None, branch: int | None = None
    ) -> list[LoggedMessage]:
        """A page of the log as logged (seq, parent, tokens, time): the messages after
        seq ``after``, oldest first, at most ``limit`` of them, every branch's; with
        ``branch``, that branch's alone (``SessionBranches.branch_page``)."""
        if type(after) is not int or after < 0:
            raise InvalidInput(f"after must be a seq (0 or more), not {after!r}", field="after")
        if limit is not None:
            check_limit(limit)
        if branch is not None:
            return self.branch_page(check_seq(branch, "branch"), after, limit)
        return self.store.messages(self.id, after + 1, None if limit is None else after + limit)

    def last_seq(self) -> int:
        """The seq of the newest message, 0 while the log is empty."""
        return self.store.last_seq(self.id)

    def info(self) -> SessionInfo:
        """The session with its size and last activity (``Memory.session_info``)."""
        return self.memory.session_info(self.id)

    def keyed(self, keys: Iterable[str]) -> dict[str, LoggedMessage]:
        """The logged messages stored under any of these idempotency keys, by key: which
        keys are taken, and by what, before appending under them."""
        checked = [check_name(k, f"keys[{i}]") for i, k in enumerate(batch_of(keys, "keys"))]
        return service_port(self.store).keyed(self.id, checked)

    def views(self) -> list[str]:
        """Names of the views stored with this session."""
        return [record.name for record in self.view_records()]

    def view_records(self) -> list[ViewRecord]:
        """The views stored with this session, by name: settings, version, last update."""
        return self.store.list_views(self.id)

    def view_record(self, name: str) -> ViewRecord | None:
        """The view's stored record, or None while it was never stored."""
        return self.store.get_view(self.id, check_name(name, "view"))

    def view(
        self,
        name: str = "default",
        *,
        preset: str | None = None,
        pipeline: Pipeline | None = None,
        budget: int | None = None,
        filter: MessageFilter | Mapping[str, Any] | None = None,
        model: str | None = None,
        llm: LLM | str | None = None,
        high_water: float | None = None,
        low_water: float | None = None,
        local: bool = False,
        recall: Mapping[str, Any] | bool | None = None,
        pins: Sequence[str | Mapping[str, Any]] | None = None,
        pins_share: float | None = None,
        **preset_options: Any,
    ) -> View:
        """Open a view; with settings, store them (only those given change).

        Stored with the session, so any process reopens the same view by name:
        ``preset`` and its options or a ``pipeline`` (registered strategies;
        with neither, the view folds with ``DEFAULT_PRESET``, ``offline``),
        ``budget``, a declarative ``filter`` (``contextfold.memory.filters``),
        ``model`` as a ``get_model`` string, the water marks, ``recall``
        (``contextfold.memory.recall``; None keeps what is stored), and ``pins``
        with ``pins_share`` (``contextfold.memory.pin_rules``: what comes back
        verbatim after the folds). What cannot
        be stored stays with this ``Memory``, for this process only: a Python
        callable as ``filter``, a model object as ``llm``, and, with
        ``local=True``, a pipeline holding Python code (a ``Predicate``
        trigger, an unregistered strategy); without ``local`` such a pipeline
        is refused, naming the field.
        """
        check_name(name, "view")
        if pipeline is not None and not isinstance(pipeline, Pipeline):
            raise InvalidInput("pipeline must be a Pipeline", field="pipeline")
        if not (llm is None or isinstance(llm, str | LLM)):
            raise InvalidInput(
                f"llm must be a model (an LLM) or a get_model string, not {type(llm).__name__}",
                field="llm",
            )
        if not isinstance(local, bool):
            raise InvalidInput("local must be True or False", field="local")
        if preset_options and preset is None and pipeline is None:
            raise InvalidInput(
                f"options {sorted(preset_options)} need a preset= to go with", field="preset"
            )
        if isinstance(llm, str):
            model, llm = llm, None
        given_filter, stored_filter = (filter, None) if callable(filter) else (None, filter)
        changes = given_changes(
            budget=budget,
            filter=stored_filter,
            model=model,
            high_water=high_water,
            low_water=low_water,
            recall=recall,
            pins=pins,
            pins_share=pins_share,
        )
        if preset is not None or pipeline is not None:
            changes.update(
                folding_changes(
                    preset=preset, pipeline=pipeline, options=preset_options, local=local
                )
            )
        handle = View(self, name, self.memory.binding(self.id, name))
        if changes:
            handle.update(**changes)
        handle.binding.configuration.give(pipeline=pipeline, filter=given_filter, llm=llm)
        return handle
