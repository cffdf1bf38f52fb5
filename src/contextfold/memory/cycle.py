"""The one compaction cycle: plan, run, check and commit jobs for one view.

``View.compact``, every runner and a remote worker call ``run_cycle`` and
nothing else, so each event is emitted here and only here:

- ``planned`` and ``started`` for each job;
- ``committed`` when its folds are in, ``rejected`` when another commit came
  first (the cycle plans again from what is committed);
- ``failed`` then ``degraded`` when its model let it down (any exception, a
  spent budget, a passed deadline), its folds do not fit the job, or the store
  refused them: the view keeps its previous folds.

Every job runs within a ``JobBudget`` (``llm.budget``): at most
``limits.max_calls`` model calls (HTTP attempts, retries included) and
``limits.deadline_s`` seconds, whatever the strategy and the adapter; a
runner that gives the job up cancels it (``on_budget`` hands it each budget).
After a failed job the cycle asks that model nothing more: the rescue, if
one is needed, folds extractively. Each job runs marked in ``FOLDING``, so a
render of a view set to wait for its fold (``wait_for_fold_s``) knows one is
in flight (``contextfold.memory.bridge``).

Two choices are made here, once, outside every strategy. The model: the view's,
or the offline stand-in when it has none. And the last resort: when the view's
own strategies leave it over its budget, what render would cut is
folded instead (``Rescue``: with the view's model; extractively when that
fails; as each message's opening words when nothing else gives an answer), so
the model is told what happened there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from typing import Any, Protocol

from contextfold.core.errors import BudgetError, ContextfoldError, FoldConflict, InvalidInput
from contextfold.core.events import Event, EventCallback, EventKind, emit, log
from contextfold.core.folds import Fold
from contextfold.core.tokens import TokenCounter
from contextfold.llm.base import LLM
from contextfold.llm.budget import DEFAULT_LIMITS, JobBudget, JobLimits, job_budget
from contextfold.llm.guard import Guarded
from contextfold.llm.offline import OfflineModel
from contextfold.memory.bridge import FOLDING
from contextfold.store.base import Store
from contextfold.strategies.base import Job, Strategy, ViewState
from contextfold.strategies.pipeline import Pipeline
from contextfold.strategies.rescue import Rescue


class CompactedView(Protocol):
    """What the cycle needs of a view: a ``View``, or a worker's handle on one."""

    name: str

    @property
    def session(self) -> SessionSide: ...

    @property
    def on_event(self) -> list[EventCallback]: ...

    def require_pipeline(self) -> Pipeline: ...

    def state(self, budget: int | None = None, *, folding: bool = False) -> ViewState: ...

    def model(self) -> LLM | None: ...

    def commit_folds(self, folds: Sequence[Fold], version: int) -> int: ...


class SessionSide(Protocol):
    """The session's side of a compacted view: its id, its store, its token counter."""

    id: str
    store: Store
    counter: TokenCounter


MAX_STEPS = 200
"""Jobs one cycle may run: a strategy that keeps planning cannot spin it forever."""
RESCUE = Rescue()

RunJob = Callable[[Strategy, Job, LLM, TokenCounter], Sequence[Fold]]
"""Where a job's expensive part runs: here by default, a process pool in ``ProcessRunner``."""


def run_here(strategy: Strategy, job: Job, llm: LLM, counter: TokenCounter) -> Sequence[Fold]:
    return list(strategy.run(job, llm, counter))


@dataclass(frozen=True)
class CompactionReport:
    """What one cycle committed."""

    folds: tuple[Fold, ...]
    conflicts: int
    tokens_before: int
    tokens_after: int
    failed: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    """Why each failed job failed, in the order of ``failed``."""

    @property
    def degraded(self) -> bool:
        """True when a job failed: the view kept folds it would have replaced."""
        return bool(self.failed)


def run_cycle(
    view: CompactedView,
    *,
    budget: int | None = None,
    run: RunJob = run_here,
    may_plan: Callable[[], bool] = lambda: True,
    may_commit: Callable[[], bool] = lambda: True,
    listeners: Iterable[EventCallback] = (),
    limits: JobLimits = DEFAULT_LIMITS,
    on_budget: Callable[[JobBudget], None] = lambda budget: None,
    exclusive: Callable[[], AbstractContextManager[object]] | None = None,
) -> CompactionReport:
    """Plan and run jobs until none is planned; a strategy that failed is not asked again.

    A budget that cannot hold the system prompt and the latest user message is
    a ``BudgetError``, raised before anything is planned: no fold could make
    the view fit it, so none is made.

    A runner that is stopping answers no to ``may_plan`` (no new job starts)
    and, when it gives up on running jobs, to ``may_commit`` (nothing more is
    committed). ``exclusive`` (the view's lease, for an inline compaction) is
    entered before the first job runs and held until the cycle ends.
    """
    pipeline = view.require_pipeline()
    callbacks = [*view.on_event, *listeners]
    committed: list[Fold] = []
    conflicts = 0
    failed: list[str] = []
    reasons: list[str] = []
    state = view.state(budget)
    required = required_tokens(state)
    if state.budget is not None and required > state.budget:
        raise BudgetError(state.budget, required)
    before = state.tokens
    model = view.model()
    with ExitStack() as held:
        for _ in range(MAX_STEPS):
            if not (may_plan() and may_commit()):
                break
            planned = plan(pipeline.strategies, state, skip=[f for f in failed if f != RESCUE.name])
            if planned is None:
                break
            if exclusive is not None:
                held.enter_context(exclusive())
                exclusive = None
                state = view.state(budget)  # what the holder before us committed
                continue
            strategy, job = planned
            # After a failure the rescue asks the model nothing more: it folds extractively.
            llm = None if failed and strategy is RESCUE else model
            bound = JobBudget(limits)
            on_budget(bound)
            with FOLDING.running(view.session.id, view.name):
                folds, reason = _step(view, strategy, job, llm, bound, run, may_commit, callbacks)
            if reason is not None:
                failed.append(job.strategy)
                reasons.append(reason)
            if folds:
                committed.extend(folds)
            elif reason is None:
                conflicts += 1
            state = view.state(budget, folding=bool(committed))
    return CompactionReport(
        tuple(committed), conflicts, before, state.tokens, tuple(failed), tuple(reasons)
    )


def plan(
    strategies: Sequence[Strategy], state: ViewState, *, skip: Collection[str] = ()
) -> tuple[Strategy, Job] | None:
    """The first job a strategy plans; else the rescue of what render would cut.

    A view with no strategies (the ``disabled`` preset) never folds, not even to rescue,
    and nothing is planned for a budget below ``required_tokens``.
    """
    if state.budget is not None and required_tokens(state) > state.budget:
        return None
    for strategy in strategies:
        if strategy.name in skip:
            continue
        job = strategy.plan(state)
        if job is not None:
            return strategy, job
    if not strategies or RESCUE.name in skip:
        return None
    job = RESCUE.plan(state)
    return None if job is None else (RESCUE, job)


def required_tokens(state: ViewState) -> int:
    """What every prompt of the view holds whatever is folded: system prompt, reply
    priming and the latest user message (as render requires them)."""
    user = state.latest_user
    return state.fixed + (0 if user is None else state.entries[user].tokens)


def _step(
    view: CompactedView,
    strategy: Strategy,
    job: Job,
    model: LLM | None,
    bound: JobBudget,
    run: RunJob,
    may_commit: Callable[[], bool],
    callbacks: list[EventCallback],
) -> tuple[list[Fold], str | None]:
    """One job: the folds committed ([] when none was), and why it failed, if it did.

    The rescue cannot fail: when its model fails it folds extractively, and
    says so with ``failed`` and ``degraded`` before it commits.
    """

    def tell(kind: EventKind, **fields: Any) -> None:
        event = Event(
            kind,
            view.session.id,
            view.name,
            job.strategy,
            job.start,
            job.end,
            tokens_before=job.tokens_before,
            **fields,
        )
        emit(event, callbacks)

    counter = view.session.counter
    llm: LLM = OfflineModel(counter=counter) if model is None else model
    if not isinstance(llm, OfflineModel):
        llm = Guarded(llm, bound)
    tell("planned")
    tell("started")
    began = time.perf_counter()
    failure: str | None = None
    try:
        with job_budget(bound):
            folds = _run_checked(run, strategy, job, llm, counter, view.name)
    except Exception as exc:
        if not may_commit():
            return [], None  # given up on (a runner stopping): abandoned, not failed
        failure = _reason(exc)
        tell("failed", duration_s=time.perf_counter() - began, detail=failure)
        if strategy is not RESCUE:
            tell("degraded", detail="the view keeps its previous folds")
            return [], failure
        tell("degraded", detail="the rescue folds without the model")
        folds = _rescue_without(llm, job, run, counter, view.name)
    if not may_commit():
        return [], failure
    committed, reason = _commit(view, job, folds, time.perf_counter() - began, tell)
    return committed, reason or failure


def _commit(
    view: CompactedView,
    job: Job,
    folds: list[Fold],
    duration: float,
    tell: Callable[..., None],
) -> tuple[list[Fold], str | None]:
    """Commit a job's folds at the version it was planned at: the folds committed ([]
    when another commit came first, or the store refused them), and why it refused."""
    try:
        view.commit_folds(folds, job.version)
    except FoldConflict as exc:
        tell("rejected", detail=str(exc))
        return [], None
    except ContextfoldError as exc:
        reason = f"commit: {exc}"
        tell("failed", duration_s=duration, detail=reason)
        tell("degraded", detail="the view keeps its previous folds")
        return [], reason
    tell(
        "committed",
        tokens_after=sum(f.tokens_after for f in folds),
        usage=combined_usage(folds),
        duration_s=duration,
        data={"folds": [f.id for f in folds], "kinds": [f.kind for f in folds]},
    )
    return folds, None


def _run_checked(
    run: RunJob, strategy: Strategy, job: Job, llm: LLM, counter: TokenCounter, view: str
) -> list[Fold]:
    folds = list(run(strategy, job, llm, counter))
    _check(job, folds, view)
    return folds


def _rescue_without(
    llm: LLM, job: Job, run: RunJob, counter: TokenCounter, view: str
) -> list[Fold]:
    """The last resort must not fail: the extractive stand-in, else each message's opening."""
    if not isinstance(llm, OfflineModel):
        try:
            return _run_checked(run, RESCUE, job, OfflineModel(counter=counter), counter, view)
        except Exception as exc:
            log.info("rescue fell back to a digest of %s..%s: %s", job.start, job.end, exc)
    return list(RESCUE.digest(job, counter))


def _check(job: Job, folds: Sequence[Fold], view: str) -> None:
    """A job's folds stay inside its range and its view, or none of them is committed."""
    if not folds:
        raise InvalidInput(f"strategy {job.strategy!r} made no fold", field="folds")
    for fold in folds:
        if fold.view != view or fold.start < job.start or fold.end > job.end:
            raise InvalidInput(
                f"fold {fold.start}..{fold.end} of view {fold.view!r} lies outside the job "
                f"{job.start}..{job.end} of view {view!r}",
                field="folds",
            )


def _reason(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, ContextfoldError) else f"{type(exc).__name__}: {exc}"


def combined_usage(folds: Sequence[Fold]) -> dict[str, Any] | None:
    """Model usage of a commit: each call's usage sits on the one fold it made."""
    usages = [f.usage for f in folds if f.usage]
    if not usages:
        return None
    total: dict[str, Any] = {"model": usages[0].get("model")}
    for key in ("input_tokens", "output_tokens", "latency_s", "calls"):
        total[key] = sum(u.get(key, 0) for u in usages)
    return total
