"""A view: one consumer's lens on a session's log, with its own folds.

A ``View`` is a thin handle on ``(session, name)``, a facade over four parts,
each in its own module:

- configuration (``memory.configuration``): the stored record (``ViewConfig``),
  so a handle opened anywhere, in any process, with no arguments, folds and
  renders the same way, beside the objects given this process;
- reading (``memory.reading``): ``state``, what strategies plan over, and the folds;
- rendering (``memory.rendering``, with recall from ``memory.recall``): ``render``,
  the prompt for the next model call;
- compaction (``memory.cycle``): ``compact``, the one compaction cycle run inline.

What cannot be stored (a Python filter, a model object, event callbacks,
caches) lives in the ``Binding`` that the ``Memory`` keeps for the view in
this process, shared by every handle that Memory gives out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, Unpack

from contextfold.core.checks import check_budget
from contextfold.core.errors import InvalidInput
from contextfold.core.events import EventCallback
from contextfold.core.folds import Fold
from contextfold.core.messages import Message
from contextfold.core.provider_items import COMPACTION_PROVIDERS, refused_fold
from contextfold.core.render import Rendered, floor
from contextfold.llm.base import LLM
from contextfold.llm.budget import DEFAULT_LIMITS, JobLimits
from contextfold.llm.registry import get_model
from contextfold.memory.branch_log import BranchLog
from contextfold.memory.bridge import Bridge
from contextfold.memory.cache import PromptCache
from contextfold.memory.config import ViewChanges, ViewConfig
from contextfold.memory.configuration import Configuration, Configured
from contextfold.memory.cycle import CompactionReport, SessionSide, run_cycle
from contextfold.memory.figures import log_tokens
from contextfold.memory.filters import MessageFilter
from contextfold.memory.leases import held_lease
from contextfold.memory.reading import ReadCaches, ViewReader, fold_copy, system_end
from contextfold.memory.rendering import view_prompt
from contextfold.store.tree import check_seq
from contextfold.store.wake import LocalWake
from contextfold.strategies.base import ViewState
from contextfold.strategies.pipeline import Pipeline


class SessionHandle(SessionSide, Protocol):
    """What a view needs of its session, beside what the cycle does: the wake-up port."""

    @property
    def wake(self) -> LocalWake: ...


@dataclass(eq=False)
class Binding:
    """What this process keeps for one view beside its stored record; never stored,
    grouped by the part that uses it."""

    configuration: Configuration = field(default_factory=Configuration)
    """Configuration's: the objects given here, and the record last read."""
    reading: ReadCaches = field(default_factory=ReadCaches)
    """Reading's: the last live state, and the folds found sound."""
    prompts: PromptCache = field(default_factory=PromptCache)
    """Rendering's: the last prompt and recall block."""
    provider_prompts: dict[str, PromptCache] = field(default_factory=dict)
    """Rendering's, for prompts rendered for a provider (``for_provider``), by provider."""
    bridge: Bridge = field(default_factory=Bridge)
    """Rendering's: the provisional folds made for the view."""
    on_event: list[EventCallback] = field(default_factory=list)
    """Compaction's (and healing's): callbacks for this view's events."""


class View:
    """One consumer's lens: a filter, a pipeline, a budget and its own folds.

    The filter sees tool units whole: a unit is shown only if the filter keeps
    its call and every result, so a view never shows an orphan result or a call
    without the results the log holds.
    """

    def __init__(
        self, session: SessionHandle, name: str, binding: Binding, branch: int | None = None
    ) -> None:
        if not name or not isinstance(name, str):
            raise InvalidInput("view name must be a non-empty string", field="view")
        self.session = session
        self.name = name
        self.binding = binding
        self.branch = check_seq(branch, "branch")
        """The branch this handle reads (its head seq); None: the newest message's."""
        self._reader = ViewReader(
            BranchLog(session.store, session.id, self.branch),
            session.id,
            name,
            session.counter,
            binding.reading,
            binding.on_event,
        )

    def on(self, branch: int | None) -> View:
        """This view over the branch ending at seq ``branch`` (None: the newest message's):
        its folds are that branch's, its prompt that branch's conversation."""
        return View(self.session, self.name, self.binding, branch)

    # -- configuration ----------------------------------------------------

    def _configured(self, version: int | None = None) -> Configured:
        at = self._reader.head().view_version if version is None else version
        return self.binding.configuration.at(self.session.store, self.session.id, self.name, at)

    @property
    def config(self) -> ViewConfig:
        return self._configured().config

    @property
    def version(self) -> int:
        """The stored configuration's version (0: never stored)."""
        return self._reader.head().view_version

    @property
    def pipeline(self) -> Pipeline | None:
        return self._configured().pipeline

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
        return self._configured().filter

    @property
    def on_event(self) -> list[EventCallback]:
        """Callbacks for this view's events in this process (any handle's compaction)."""
        return self.binding.on_event

    def model(self) -> LLM | None:
        """The model this view's strategies call: a bound object, else the stored spec."""
        bound = self.binding.configuration.llm
        if bound is not None:
            return bound
        spec = self.config.model
        return None if spec is None else get_model(spec)

    def update(
        self, *, expected_version: int | None = None, **changes: Unpack[ViewChanges]
    ) -> ViewConfig:
        """Change stored settings explicitly; the record's version goes up by one.

        ``expected_version`` makes the update conditional (``ViewConflict`` when
        another update came first).
        """
        return self.binding.configuration.update(
            self.session.store,
            self.session.id,
            self.name,
            self.version,
            changes,
            expected_version,
        )

    # -- reading ----------------------------------------------------------

    def folds(self, *, include_superseded: bool = False) -> list[Fold]:
        system = system_end(self._reader.system())
        found = self._reader.sound_folds(system, include_superseded=include_superseded)[1]
        return [fold_copy(fold) for fold in found]

    def log_tokens(self, folds: Sequence[Fold]) -> dict[str, int]:
        """Tokens of the logged messages in each fold's range, by fold id: what a fold
        saved is measured against these (``contextfold.memory.figures``)."""
        return log_tokens(self._reader.store, self.session.id, folds)

    def floor(self) -> int:
        """The smallest budget ``render`` takes now (below it, ``BudgetError``): the reply
        priming, the system prompt and the latest user message the view shows, which
        no fold may hold (``contextfold.core.fold_checks``)."""
        head = self._reader.head()
        latest = self._reader.latest_user(head, self._configured(head.view_version).filter)
        return floor(sum(m.tokens for m in self._reader.system()), latest)

    def state(self, budget: int | None = None, *, folding: bool = False) -> ViewState:
        """The view as strategies see it (live messages, not the folded past).

        After appends alone, the last state is extended with the new messages
        instead of read again, so planning on every append stays cheap.
        ``folding`` says a cycle already committed a fold: budget-driven
        strategies go on down to the low-water mark.
        """
        check_budget(budget)
        head = self._reader.head()
        configured = self._configured(head.view_version)
        config = configured.config
        return replace(
            self._reader.live_state(head, configured.filter),
            budget=budget if budget is not None else config.budget,
            high_water=config.high_water,
            low_water=config.low_water,
            folding=folding,
        )

    # -- rendering ----------------------------------------------------------

    def render(
        self,
        budget: int | None = None,
        *,
        query: str | None = None,
        for_provider: str | None = None,
        branch: int | None = None,
    ) -> list[Message]:
        """The prompt for the next model call (``query``, ``for_provider``, ``branch``:
        see ``render_report``)."""
        return self.render_report(
            budget, query=query, for_provider=for_provider, branch=branch
        ).messages

    def render_report(
        self,
        budget: int | None = None,
        *,
        query: str | None = None,
        for_provider: str | None = None,
        branch: int | None = None,
    ) -> Rendered:
        """Render, with what was omitted, clipped and recalled on the way.

        With recall on (``ViewConfig.recall``), logged messages the prompt lacks
        are recalled by the latest user message, or by ``query`` when given
        (``contextfold.memory.rendering``, ``contextfold.memory.recall``).
        ``for_provider`` (``"openai"`` for the Responses API, ``"anthropic"``)
        renders a fold that keeps that provider's own compaction as its items,
        carried in the message's ``meta`` for the wire translator; every other
        fold, and every fold for ``None``, renders as plain messages
        (``contextfold.core.provider_items``). ``branch`` renders the branch
        ending at that seq (``on``) instead of this handle's.
        """
        if branch is not None:
            return self.on(branch).render_report(budget, query=query, for_provider=for_provider)
        check_budget(budget)
        if query is not None and not isinstance(query, str):
            raise InvalidInput("query is a string", field="query")
        if for_provider is not None and for_provider not in COMPACTION_PROVIDERS:
            known = ", ".join(COMPACTION_PROVIDERS)
            raise InvalidInput(
                f"for_provider is one of {known} or None, not {for_provider!r}",
                field="for_provider",
            )
        head = self._reader.head()
        prompts = self.binding.prompts
        if for_provider is not None:
            prompts = self.binding.provider_prompts.setdefault(for_provider, PromptCache())
        return view_prompt(
            self._reader,
            prompts,
            self._configured(head.view_version),
            head,
            budget=budget,
            query=query,
            target=for_provider,
            bridge=self.binding.bridge,
        )

    def refuse_provider_items(self, fold_id: str, reason: str) -> Fold:
        """Stop rendering a fold's provider items, after the provider refused a prompt
        carrying them (a 4xx: expired, invalid); the next prompt falls back.

        The fold is superseded by one over the same range whose items are kept,
        marked refused with ``reason``, and whose messages are the view's own
        summary; committed like any fold change (``FoldConflict`` when another
        commit came first: read the folds and ask again). Returns the new fold.
        """
        if not isinstance(fold_id, str) or not fold_id:
            raise InvalidInput("fold_id names an active fold", field="fold_id")
        head = self._reader.head()
        fold = next((f for f in self.folds() if f.id == fold_id), None)
        if fold is None:
            raise InvalidInput(f"no active fold {fold_id!r} in view {self.name!r}", field="fold_id")
        replacement = refused_fold(fold, reason)
        self.session.store.commit_folds(
            self.session.id, self.name, [replacement], head.fold_version
        )
        return replacement

    # -- compaction ---------------------------------------------------------

    def commit_folds(self, folds: Sequence[Fold], version: int) -> int:
        """Commit a job's folds to this handle's branch, the one its state was read on,
        and keep them for the next read (``ViewReader.vouch``)."""
        committed = self._reader.store.commit_folds(self.session.id, self.name, folds, version)
        self._reader.vouch(folds)
        return committed

    def compact(
        self, budget: int | None = None, *, limits: JobLimits = DEFAULT_LIMITS
    ) -> CompactionReport:
        """Run the compaction cycle inline until no strategy plans a job.

        Each job makes at most ``limits.max_calls`` model calls within
        ``limits.deadline_s`` seconds. Once a job is planned the view's lease
        is taken (waiting for it), so two compactions of one view never run
        their jobs at once, in one process or across processes.
        """
        store, sid, name = self.session.store, self.session.id, self.name
        return run_cycle(
            self,
            budget=check_budget(budget),
            limits=limits,
            exclusive=lambda: held_lease(store, sid, name),
        )
