"""A view: one consumer's lens on a session's log, with its own folds.

``state`` is what strategies plan over, ``render`` the prompt for the next
model call, ``compact`` the inline compaction loop; ``run_job`` and ``commit``
are the two halves the background runners drive.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from contextfold.core.entries import Entry, entries_of
from contextfold.core.errors import FoldConflict, InvalidInput, ModelError
from contextfold.core.events import Event, EventCallback, EventKind, emit
from contextfold.core.folds import Fold, active_facts, active_in_place
from contextfold.core.log import LoggedMessage
from contextfold.core.messages import Message
from contextfold.core.render import Rendered, render
from contextfold.llm.base import LLM
from contextfold.llm.offline import OfflineModel
from contextfold.store.base import Store
from contextfold.strategies.base import Job, Strategy, ViewState
from contextfold.strategies.pipeline import Pipeline

if TYPE_CHECKING:
    from contextfold.memory.session import Session

MessageFilter = Callable[[Message], bool]
_PAGE = 256
_SYSTEM_PAGE = 8
_T = TypeVar("_T")
MAX_COMPACTION_STEPS = 200


@dataclass(frozen=True)
class CompactionReport:
    """What one ``compact`` call committed."""

    folds: tuple[Fold, ...]
    conflicts: int
    tokens_before: int
    tokens_after: int
    failed: tuple[str, ...] = ()


class View:
    """One consumer's lens: a filter, a pipeline, a budget and its own folds.

    The filter sees tool units whole: a unit is shown only if the filter keeps
    its call and every result, so a view never shows an orphan result or a call
    without the results the log holds.
    """

    def __init__(
        self,
        session: Session,
        name: str,
        *,
        pipeline: Pipeline | None = None,
        budget: int | None = None,
        filter: MessageFilter | None = None,
        llm: Any = None,
    ) -> None:
        if not name:
            raise InvalidInput("view name must not be empty", field="view")
        self.session = session
        self.name = name
        self.pipeline = pipeline
        self.budget = budget
        self.filter = filter
        self.llm = llm
        self.on_event: list[EventCallback] = []

    @property
    def _store(self) -> Store:
        return self.session.store

    def folds(self, *, include_superseded: bool = False) -> list[Fold]:
        return self._store.folds(self.session.id, self.name, include_superseded=include_superseded)

    def _keep(self, logged: LoggedMessage) -> bool:
        return self.filter is None or bool(self.filter(logged.message))

    def _visible(self, live: list[LoggedMessage]) -> list[LoggedMessage]:
        """``live`` (oldest first) through the filter, tool units whole."""
        if self.filter is None:
            return live
        kept = whole_units(reversed(live), lambda m: m.message, self.filter)
        return list(kept)[::-1]

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

    def state(self, budget: int | None = None) -> ViewState:
        """The view as strategies see it (reads live messages, not the folded past)."""
        sid = self.session.id
        version = self._store.fold_version(sid, self.name)
        folds = self._store.folds(sid, self.name)
        in_place = active_in_place(folds)
        system = self._system()
        first = len(system) + 1
        for fold in in_place:
            if fold.start <= first:
                first = max(first, fold.end + 1)
        live = self._visible(self._store.messages(sid, first))
        # Leading folds are not re-read from the log, but they are part of the view.
        entries = entries_of(live, [f for f in in_place if f.end > len(system)])
        return ViewState(
            session_id=sid,
            view=self.name,
            version=version,
            system=tuple(system),
            entries=tuple(entries),
            facts=active_facts(folds),
            counter=self.session.counter,
            budget=budget if budget is not None else self.budget,
        )

    def render(self, budget: int | None = None) -> list[Message]:
        """The prompt for the next model call."""
        return self.render_report(budget).messages

    def render_report(self, budget: int | None = None) -> Rendered:
        """Render, with what was omitted and clipped on the way."""
        sid = self.session.id
        folds = self._store.folds(sid, self.name)
        system = self._system()
        latest = self._store.last_of_role(sid, "user")
        in_place = active_in_place(folds)
        latest_user = None
        if (
            latest is not None
            and self._keep(latest)
            and not any(f.start <= latest.seq <= f.end for f in in_place)
        ):
            latest_user = Entry.of_message(latest)
        return render(
            system=[m.message for m in system],
            newest_first=self._newest_first(in_place, after=len(system)),
            counter=self.session.counter,
            budget=budget if budget is not None else self.budget,
            facts=active_facts(folds),
            latest_user=latest_user,
            first_seq=len(system) + 1,
            system_tokens=sum(m.tokens for m in system),
        )

    def _newest_first(self, in_place: list[Fold], *, after: int) -> Iterator[Entry]:
        """Entries the view shows, newest first."""
        entries = self._log_newest_first(in_place, after=after)
        if self.filter is None:
            return entries
        return whole_units(entries, lambda e: e.message, self.filter)

    def _log_newest_first(self, in_place: list[Fold], *, after: int) -> Iterator[Entry]:
        """Folds and raw messages newest first, reading the log backwards a page at a time."""
        sid = self.session.id
        folds = sorted(in_place, key=lambda f: f.end, reverse=True)
        fi = 0
        before = self._store.last_seq(sid) + 1
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

    def compact(self, budget: int | None = None) -> CompactionReport:
        """Run the pipeline inline until no strategy plans a job.

        A job whose model call fails or whose answers are rejected is dropped
        with a ``failed`` event: the view keeps its previous folds, and that
        strategy is not asked again in this call.
        """
        if self.pipeline is None:
            raise InvalidInput(
                f"view {self.name!r} has no pipeline: pass preset= or pipeline=", field="pipeline"
            )
        committed: list[Fold] = []
        conflicts = 0
        failed: list[str] = []
        state = self.state(budget)
        before = state.tokens
        for _ in range(MAX_COMPACTION_STEPS):
            job = self.pipeline.plan(state, skip=failed)
            if job is None:
                break
            began = time.perf_counter()
            folds = self.run_job(job)
            if folds is None:
                failed.append(job.strategy)
            elif self.commit(job, folds, duration_s=time.perf_counter() - began):
                committed.extend(folds)
            else:
                conflicts += 1
            state = self.state(budget)
        return CompactionReport(tuple(committed), conflicts, before, state.tokens, tuple(failed))

    def run_job(self, job: Job) -> list[Fold] | None:
        """Run one job; None (after a ``failed`` event) when its model let it down."""
        self.emit("started", job)
        began = time.perf_counter()
        try:
            folds = list(
                self.pipeline_strategy(job.strategy).run(job, self.model(), self.session.counter)
            )
        except ModelError as exc:
            self.emit("failed", job, duration_s=time.perf_counter() - began, detail=str(exc))
            self.emit("degraded", job, detail="the view keeps its previous folds")
            return None
        return folds

    def commit(self, job: Job, folds: Sequence[Fold], *, duration_s: float = 0.0) -> bool:
        """Commit at the version the job was planned at; False when another commit came first."""
        try:
            self._store.commit_folds(self.session.id, self.name, folds, job.version)
        except FoldConflict as exc:
            self.emit("rejected", job, detail=str(exc))
            return False
        usage = combined_usage(folds)
        self.emit(
            "committed",
            job,
            tokens_after=sum(f.tokens_after for f in folds),
            usage=usage,
            duration_s=duration_s,
            data={"folds": [f.id for f in folds], "kinds": [f.kind for f in folds]},
        )
        return True

    def model(self) -> LLM:
        """The view's model, or the offline stand-in: chosen here, never in a strategy."""
        if self.llm is not None:
            return self.llm  # type: ignore[no-any-return]
        return OfflineModel(counter=self.session.counter)

    def pipeline_strategy(self, name: str) -> Strategy:
        if self.pipeline is None:
            raise InvalidInput(f"view {self.name!r} has no pipeline", field="pipeline")
        return self.pipeline.strategy(name)

    def emit(self, kind: EventKind, job: Job, **fields: Any) -> None:
        """Send an event about ``job`` to ``on_event`` and to ``logging``."""
        event = Event(
            kind,
            self.session.id,
            self.name,
            job.strategy,
            job.start,
            job.end,
            tokens_before=job.tokens_before,
            **fields,
        )
        emit(event, self.on_event)


def whole_units(
    newest_first: Iterable[_T], message_of: Callable[[_T], Message | None], keep: MessageFilter
) -> Iterator[_T]:
    """Filter items read newest first, keeping or dropping each tool unit whole.

    A tool result waits for its call (the nearest older assistant message calling
    its id); the call and its results stay only if ``keep`` accepts all of them.
    Items without a message (folds) always stay; results whose call never comes
    are dropped.
    """
    held: list[_T] = []
    verdicts: list[bool] = []
    waiting: dict[str, list[int]] = {}
    for item in newest_first:
        msg = message_of(item)
        verdict = msg is None or bool(keep(msg))
        if msg is not None and msg["role"] == "tool":
            waiting.setdefault(str(msg.get("tool_call_id")), []).append(len(held))
        elif not held:
            if verdict:
                yield item
            continue
        elif msg is not None and msg["role"] == "assistant":
            answered = [i for c in msg.get("tool_calls") or () for i in waiting.pop(c["id"], [])]
            verdict = verdict and all(verdicts[i] for i in answered)
            for i in answered:
                verdicts[i] = verdict
        held.append(item)
        verdicts.append(verdict)
        if not waiting:
            yield from (h for h, v in zip(held, verdicts, strict=True) if v)
            held.clear()
            verdicts.clear()
    for orphans in waiting.values():
        for i in orphans:
            verdicts[i] = False
    yield from (h for h, v in zip(held, verdicts, strict=True) if v)


def combined_usage(folds: Sequence[Fold]) -> dict[str, Any] | None:
    """Model usage of a commit: each call's usage sits on the one fold it made."""
    usages = [f.usage for f in folds if f.usage]
    if not usages:
        return None
    total: dict[str, Any] = {"model": usages[0].get("model")}
    for key in ("input_tokens", "output_tokens", "latency_s", "calls"):
        total[key] = sum(u.get(key, 0) for u in usages)
    return total
