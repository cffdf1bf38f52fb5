"""A view: one consumer's lens on a session's log, with its own folds.

A ``View`` is a thin handle on ``(session, name)``. Its configuration is a
record in the store (``ViewConfig``), so a handle opened anywhere, in any
process, with no arguments, folds and renders the same way. What cannot be
stored (a Python filter, a model object, event callbacks, caches) lives in the
``Binding`` that the ``Memory`` keeps for the view in this process, shared by
every handle that Memory gives out.

``state`` is what strategies plan over, ``render`` the prompt for the next
model call, ``compact`` the one compaction cycle (``contextfold.memory.cycle``)
run inline.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from contextfold.core.checks import check_budget
from contextfold.core.entries import Entry, entries_of
from contextfold.core.errors import InvalidInput
from contextfold.core.events import EventCallback
from contextfold.core.folds import Fold, active_facts, active_in_place
from contextfold.core.log import LoggedMessage
from contextfold.core.messages import Message, text_of
from contextfold.core.recall import with_block
from contextfold.core.render import Rendered, floor, render
from contextfold.core.units import answer_missing, whole_units
from contextfold.llm.base import LLM
from contextfold.llm.budget import DEFAULT_LIMITS, JobLimits
from contextfold.llm.registry import get_model
from contextfold.memory.cache import PromptCache, StateCache
from contextfold.memory.config import ViewConfig
from contextfold.memory.cycle import CompactionReport, SessionSide, run_cycle
from contextfold.memory.figures import log_tokens
from contextfold.memory.filters import MessageFilter
from contextfold.memory.heal import Checked, sound_folds
from contextfold.memory.leases import held_lease
from contextfold.memory.recall import recall_block, still_fits
from contextfold.store.base import Head, Store
from contextfold.store.wake import LocalWake
from contextfold.strategies.base import ViewState
from contextfold.strategies.pipeline import Pipeline


class SessionHandle(SessionSide, Protocol):
    """What a view needs of its session, beside what the cycle does: the wake-up port."""

    @property
    def wake(self) -> LocalWake: ...


_PAGE = 256
_SYSTEM_PAGE = 8


@dataclass(eq=False)
class Binding:
    """What this process keeps for one view beside its stored record; never stored.

    ``pipeline`` is the object a caller configured the view with, used while
    the stored configuration is still the version it was stored as; other
    processes (and this one, after another update) build theirs from the record.
    """

    filter: MessageFilter | None = None
    llm: LLM | None = None
    pipeline: tuple[int, Pipeline] | None = None
    on_event: list[EventCallback] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    built: tuple[int, ViewConfig, Pipeline | None, MessageFilter | None] | None = None
    prompts: PromptCache = field(default_factory=PromptCache)
    states: StateCache = field(default_factory=StateCache)
    checked: Checked = field(default_factory=Checked)


class View:
    """One consumer's lens: a filter, a pipeline, a budget and its own folds.

    The filter sees tool units whole: a unit is shown only if the filter keeps
    its call and every result, so a view never shows an orphan result or a call
    without the results the log holds.
    """

    def __init__(self, session: SessionHandle, name: str, binding: Binding) -> None:
        if not name or not isinstance(name, str):
            raise InvalidInput("view name must be a non-empty string", field="view")
        self.session = session
        self.name = name
        self.binding = binding

    # -- configuration ----------------------------------------------------

    @property
    def _store(self) -> Store:
        return self.session.store

    def _built(self, version: int) -> tuple[ViewConfig, Pipeline | None, MessageFilter | None]:
        """The config at ``version`` with its pipeline and filter, built once per version."""
        built = self.binding.built
        if built is not None and built[0] == version:
            return built[1], built[2], built[3]
        record = self._store.get_view(self.session.id, self.name)
        config = ViewConfig() if record is None else ViewConfig.from_data(record.config)
        at = 0 if record is None else record.version
        given = self.binding.pipeline
        pipeline = given[1] if given is not None and given[0] == at else config.build_pipeline()
        local = self.binding.filter
        found = (at, config, pipeline, local or config.message_filter())
        self.binding.built = found
        return found[1], found[2], found[3]

    def _head(self) -> Head:
        return self._store.head(self.session.id, self.name)

    @property
    def config(self) -> ViewConfig:
        return self._built(self._head().view_version)[0]

    @property
    def version(self) -> int:
        """The stored configuration's version (0: never stored)."""
        return self._head().view_version

    @property
    def pipeline(self) -> Pipeline | None:
        return self._built(self._head().view_version)[1]

    def require_pipeline(self) -> Pipeline:
        """The pipeline, or an error that says why there is none here.

        Every stored view has one (the default preset when none was given); only a
        local view's lives in the process that configured it.
        """
        pipeline = self.pipeline
        if pipeline is None:
            raise InvalidInput(
                f"view {self.name!r} folds with a process-local pipeline (local=True) that "
                "lives in the process that configured it; configure it here with pipeline=",
                field="pipeline",
            )
        return pipeline

    @property
    def budget(self) -> int | None:
        return self.config.budget

    @property
    def filter(self) -> MessageFilter | None:
        return self._built(self._head().view_version)[2]

    @property
    def on_event(self) -> list[EventCallback]:
        """Callbacks for this view's events in this process (any handle's compaction)."""
        return self.binding.on_event

    def model(self) -> LLM | None:
        """The model this view's strategies call: a bound object, else the stored spec."""
        if self.binding.llm is not None:
            return self.binding.llm
        spec = self.config.model
        return None if spec is None else get_model(spec)

    def update(self, *, expected_version: int | None = None, **changes: Any) -> ViewConfig:
        """Change stored settings explicitly; the record's version goes up by one.

        ``expected_version`` makes the update conditional (``ViewConflict`` when
        another update came first).
        """
        if expected_version is not None and (
            isinstance(expected_version, bool) or not isinstance(expected_version, int)
        ):
            raise InvalidInput("expected_version must be an integer", field="expected_version")
        at = self._head().view_version
        current = self._built(at)[0]
        config = current.changed(**changes)
        if config != current or at == 0:
            self._store.put_view(
                self.session.id, self.name, config.to_data(), expected_version=expected_version
            )
        return config

    # -- reading ----------------------------------------------------------

    def folds(self, *, include_superseded: bool = False) -> list[Fold]:
        return self._sound_folds(len(self._system()), include_superseded=include_superseded)[1]

    def log_tokens(self, folds: Sequence[Fold]) -> dict[str, int]:
        """Tokens of the logged messages in each fold's range, by fold id: what a fold
        saved is measured against these (``contextfold.memory.figures``)."""
        return log_tokens(self._store, self.session.id, folds)

    def floor(self) -> int:
        """The smallest budget ``render`` takes now (below it, ``BudgetError``): the reply
        priming, the system prompt and the latest user message the view shows, which
        no fold may hold (``contextfold.core.fold_checks``)."""
        head = self._head()
        latest = self._latest_user(head, self._built(head.view_version)[2])
        return floor(sum(m.tokens for m in self._system()), latest)

    def _sound_folds(
        self, system: int, *, include_superseded: bool = False
    ) -> tuple[Head, list[Fold]]:
        """The head and the folds fit to render; unfit ones are quarantined (``memory.heal``)."""
        return sound_folds(
            self._store,
            self.session.id,
            self.name,
            system=system,
            counter=self.session.counter,
            checked=self.binding.checked,
            callbacks=self.binding.on_event,
            include_superseded=include_superseded,
        )

    def _system(self) -> list[LoggedMessage]:
        """The leading system messages of the log: never folded, always rendered."""
        out: list[LoggedMessage] = []
        while True:
            page = self._store.messages(self.session.id, len(out) + 1, len(out) + _SYSTEM_PAGE)
            for logged in page:
                if logged.role not in ("system", "developer"):
                    return out
                out.append(logged)
            if len(page) < _SYSTEM_PAGE:
                return out

    def state(self, budget: int | None = None, *, folding: bool = False) -> ViewState:
        """The view as strategies see it (live messages, not the folded past).

        After appends alone, the last state is extended with the new messages
        instead of read again, so planning on every append stays cheap.
        ``folding`` says a cycle already committed a fold: budget-driven
        strategies go on down to the low-water mark.
        """
        check_budget(budget)
        head = self._head()
        config, _, keep = self._built(head.view_version)
        cached = self.binding.states.extend(
            head, keep, lambda after: self._store.messages(self.session.id, after + 1)
        )
        if cached is None:
            cached = self._read_state(head, keep)
            self.binding.states.put(head, cached)
        wanted = budget if budget is not None else config.budget
        return ViewState(
            session_id=cached.session_id,
            view=self.name,
            version=cached.version,
            system=cached.system,
            entries=cached.entries,
            facts=cached.facts,
            counter=self.session.counter,
            budget=wanted,
            high_water=config.high_water,
            low_water=config.low_water,
            folding=folding,
        )

    def _read_state(self, head: Head, keep: MessageFilter | None) -> ViewState:
        sid = self.session.id
        system = self._system()
        head, folds = self._sound_folds(len(system))
        in_place = active_in_place(folds)
        first = len(system) + 1
        for fold in in_place:
            if fold.start <= first:
                first = max(first, fold.end + 1)
        live = self._store.messages(sid, first, head.last_seq)
        if keep is not None:
            live = list(whole_units(reversed(live), lambda m: m.message, keep))[::-1]
        # Leading folds are not re-read from the log, but they are part of the view.
        entries = entries_of(live, [f for f in in_place if f.end > len(system)])
        return ViewState(
            session_id=sid,
            view=self.name,
            version=head.fold_version,
            system=tuple(system),
            entries=tuple(entries),
            facts=active_facts(folds),
            counter=self.session.counter,
        )

    def render(self, budget: int | None = None, *, query: str | None = None) -> list[Message]:
        """The prompt for the next model call (``query``: see ``render_report``)."""
        return self.render_report(budget, query=query).messages

    def render_report(self, budget: int | None = None, *, query: str | None = None) -> Rendered:
        """Render, with what was omitted, clipped and recalled on the way.

        With recall on (``ViewConfig.recall``), logged messages the prompt lacks
        are recalled by the latest user message, or by ``query`` when given
        (``contextfold.memory.recall``).

        A prompt whose view only grew by appends since the last render is that
        prompt plus the new messages, when they fit: no fold moved, so nothing
        before them can differ. Anything else renders afresh. The recall block
        is made on top of that prompt: once per user message (a new query), and
        kept while the turn goes on and it still fits; a query given here always
        searches, and its prompt is not cached.
        """
        check_budget(budget)
        if query is not None and not isinstance(query, str):
            raise InvalidInput("query is a string", field="query")
        head = self._head()
        config, _, keep = self._built(head.view_version)
        if query is not None and config.recall_settings is None:
            raise InvalidInput(
                f"recall is off for view {self.name!r}: turn it on with recall=", field="query"
            )
        wanted = budget if budget is not None else config.budget
        settings = config.recall_settings
        if query is not None:
            head, base, _ = self._render(wanted, keep)
            asked: LoggedMessage | None = None
        else:
            prompts = self.binding.prompts
            read_after = lambda after: self._store.messages(self.session.id, after + 1)  # noqa: E731
            fast = prompts.extend(head, wanted, keep, read_after)
            if fast is None:
                head, base, asked = self._render(wanted, keep)
                prompts.put(head, wanted, base)
            else:
                base = fast
                asked = None if settings is None else self._latest_user(head, keep)
            if settings is None:
                return base
            if asked is None or not text_of(asked.message):
                return base
            found, block = prompts.recalled(head, wanted, asked.seq)
            if found and (block is None or still_fits(base, block)):
                return base if block is None else with_block(base, block)
            query = text_of(asked.message)
        assert settings is not None
        block = recall_block(
            base,
            store=self._store,
            session_id=self.session.id,
            query=query,
            settings=settings,
            keep=keep,
            counter=self.session.counter,
        )
        if asked is not None:
            self.binding.prompts.keep_block(head, wanted, asked.seq, block)
        return base if block is None else with_block(base, block)

    def _latest_user(self, head: Head, keep: MessageFilter | None) -> LoggedMessage | None:
        """The latest user message at ``head`` that the view's filter keeps."""
        latest = self._store.last_of_role(self.session.id, "user")
        if latest is None or latest.seq > head.last_seq:
            return None
        return latest if keep is None or keep(latest.message) else None

    def _render(
        self, budget: int | None, keep: MessageFilter | None
    ) -> tuple[Head, Rendered, LoggedMessage | None]:
        """The prompt read afresh from the store, without recall, and the latest user
        message it was rendered for (``_latest_user``)."""
        system = self._system()
        head, folds = self._sound_folds(len(system))
        latest = self._latest_user(head, keep)
        in_place = active_in_place(folds)
        latest_user = None
        if latest is not None and not any(f.start <= latest.seq <= f.end for f in in_place):
            latest_user = Entry.of_message(latest)
        entries = self._log_newest_first(in_place, after=len(system), last=head.last_seq)
        if keep is not None:
            entries = whole_units(entries, lambda e: e.message, keep)
        rendered = render(
            system=[m.message for m in system],
            newest_first=answer_missing(entries, self.session.counter),
            counter=self.session.counter,
            budget=budget,
            facts=active_facts(folds),
            latest_user=latest_user,
            first_seq=len(system) + 1,
            system_tokens=sum(m.tokens for m in system),
        )
        return head, rendered, latest

    def _log_newest_first(self, in_place: list[Fold], *, after: int, last: int) -> Iterator[Entry]:
        """Folds and raw messages newest first, reading the log backwards a page at a time."""
        sid = self.session.id
        folds = sorted(in_place, key=lambda f: f.end, reverse=True)
        fi = 0
        before = last + 1
        while before > after + 1:
            while fi < len(folds) and folds[fi].end >= before:
                fi += 1
            if fi < len(folds) and folds[fi].end == before - 1:
                yield Entry.of_fold(folds[fi])
                before = folds[fi].start
                fi += 1
                continue
            floor = folds[fi].end if fi < len(folds) else after
            page = self._store.messages_before(sid, before, min(_PAGE, before - 1 - floor))
            if not page:
                return
            for logged in page:
                yield Entry.of_message(logged)
            before = page[-1].seq

    # -- folding ----------------------------------------------------------

    def compact(
        self, budget: int | None = None, *, limits: JobLimits = DEFAULT_LIMITS
    ) -> CompactionReport:
        """Run the compaction cycle inline until no strategy plans a job.

        Each job makes at most ``limits.max_calls`` model calls within
        ``limits.deadline_s`` seconds. Once a job is planned the view's lease
        is taken (waiting for it), so two compactions of one view never run
        their jobs at once, in one process or across processes.
        """
        store, sid, name = self._store, self.session.id, self.name
        return run_cycle(
            self,
            budget=check_budget(budget),
            limits=limits,
            exclusive=lambda: held_lease(store, sid, name),
        )
