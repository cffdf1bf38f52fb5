"""Bridging: provisional folds where render would cut, until the view's own fold lands.

In a fast agent loop the background fold lags behind: appends come every few
milliseconds, a model takes seconds (or is cooling down after a failure), and
render would cut the oldest units behind a bare "N earlier messages left out"
marker. Render bridges instead: what it would cut is folded inline with the
rescue's model-free path (``Rescue`` on the offline stand-in, extractive), and
the provisional folds stand where the cut would be. A fold the view commits
over any part of a provisional fold's range replaces it. Render's cut remains
only for what the bridge may not fold within its bounds.

**Provisional folds are not stored; they are a pure function of what is.**
The raw units after the committed folds form *runs* (broken by a fold and by
the latest user message, which render shows; the newest unit is never in one:
it may still wait for tool results), and each run is cut into *steps* at
fixed places: before each user message, and at ``CHUNK_SHARE`` of the room,
never inside a tool unit. A run's provisional fold after step ``k`` is the
rescue's extractive fold of its fold after step ``k - 1`` and step ``k``'s
messages, ``FOLD_SHARE`` of the room at most; render takes the fewest steps,
oldest first, that make the prompt fit (and, when even all of them do not,
shortens the largest fold to fit). All of it follows from the log, the
committed folds and the budget, and the fold's id from its range. So:

- a model job in flight is never disturbed: a render writes nothing, so the
  fold-set version the job was planned at does not move, its commit is not
  refused (no ``FoldConflict`` loop, no model call wasted), and nothing
  provisional has to be found and superseded when the model's fold lands;
- another process rendering the view makes the same steps and the same folds,
  so it sees the same prompt without reading anything more (once it has made
  the steps: see the deadline below);
- a fast loop adds no store write per turn, and nothing is left to clean up.

**Incremental.** A step's place does not move as the log grows, so each
process keeps the folds it made (``Bridge``, by the steps' seqs and the fold's
room): a render makes only the steps it has not made, usually one. A committed
fold moves the start of the run after it, and that run's steps are made again.

**Bounded.** A step holds at most ``CHUNK_SHARE`` of the room (a single unit
larger than that is a step of its own), and a fold's input is the fold before
it plus one step. A render makes steps until ``DEADLINE_S`` has passed (one at
least); the rest of a run then stands as one *digest* fold (each message's
opening words, ``Rescue.digest``, microseconds), which is not cached as the
prompt: the next render makes more steps in its place. The step right before
the newest unit still grows with each append; when it is needed it stands as
such a digest too, and is extracted once a later step follows it. Render's cut remains
only for what no fold can fit (a newest unit and the latest user message
larger than the room, say).

**Or wait.** A view whose ``wait_for_fold_s`` is set waits up to that long,
before bridging, for a fold job of the view running in this process (a runner
here, or an inline ``compact``: ``FOLDING``); jobs in other processes or on
workers are not seen, and the view bridges at once.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

from contextfold.core.clip import clip_messages
from contextfold.core.entries import Entry
from contextfold.core.events import Event, EventCallback, emit
from contextfold.core.folds import Fold, labelled, range_label, unlabelled
from contextfold.core.messages import text_of
from contextfold.core.tokens import TokenCounter
from contextfold.llm.offline import OfflineModel
from contextfold.strategies.base import Job, ViewState
from contextfold.strategies.rescue import MIN_FOLD_TOKENS, Rescue

NAME = "provisional"
"""The strategy name provisional folds carry, and their ids' prefix."""
CHUNK_SHARE = 0.25
"""The most one step of a bridge folds, as a share of the room beside the system prompt."""
FOLD_SHARE = 0.1
"""A provisional fold's room, as a share of the room beside the system prompt (the rescue's)."""
DEADLINE_S = 0.05
"""After this long, a render makes no more steps it has not made before (one always)."""
MIN_SHORT_TOKENS = 24
"""The least a provisional fold is shortened to, beside its range label."""
KEPT = 1024
"""Provisional folds a view keeps in this process for later renders."""

PROVISIONAL = Rescue(name=NAME)
DIGEST = ":digest"
"""The end of the id of a digest a render stood for steps past its deadline."""
GROWING = ":growing"
"""The end of the id of a digest of the step before the newest unit, which still grows."""

Span = tuple[int, int]
"""Entries ``first..last`` of a view state (indices, inclusive)."""


def is_provisional(fold: Fold) -> bool:
    return fold.strategy == NAME and bool(fold.data.get("provisional"))


def standing(fold_ids: Sequence[str]) -> list[tuple[str, int, int]]:
    """The provisional folds among a prompt's fold ids (``Rendered.folds``), with the
    range each stands for: ``(id, start, end)``."""
    out = []
    for fold_id in fold_ids:
        if fold_id.startswith(NAME + ":"):
            start, _, end = fold_id.split(":")[1].partition("-")
            out.append((fold_id, int(start), int(end)))
    return out


def settled(fold_ids: Sequence[str]) -> bool:
    """Whether a prompt holding these folds is what every process renders: no digest
    stands for steps its render had no time to make (``Bridge.folds``)."""
    return not any(f.startswith(NAME + ":") and f.endswith(DIGEST) for f in fold_ids)


def runs(state: ViewState) -> list[list[Span]]:
    """Where provisional folds may stand: runs of raw units, each cut into steps, oldest first.

    A run is broken by a fold and by the latest user message (render shows it);
    it never holds the newest unit (it may still wait for tool results). A step
    ends before each user message and at ``CHUNK_SHARE`` of the room, so the
    places steps end do not move as the log grows or another user message comes.
    """
    if state.budget is None or len(state.units) < 2:
        return []
    limit = max(int((state.budget - state.fixed) * CHUNK_SHARE), MIN_FOLD_TOKENS)
    user = state.latest_user
    entries = state.entries
    out: list[list[Span]] = []
    run: list[Span] = []
    first: int | None = None
    size = last = 0
    for start, end in state.units[:-1]:
        unit = entries[start : end + 1]
        breaks = any(e.fold is not None for e in unit) or (
            user is not None and start <= user <= end
        )
        tokens = sum(e.tokens for e in unit)
        if first is not None and (breaks or entries[start].role == "user" or size + tokens > limit):
            run.append((first, last))
            first, size = None, 0
        if breaks:
            if run:
                out.append(run)
                run = []
            continue
        if first is None:
            first = start
        size += tokens
        last = end
    if first is not None:
        run.append((first, last))
    if run:
        out.append(run)
    return out


@dataclass(frozen=True)
class Bridged:
    """The provisional folds a render stands where it would cut, and whether its
    deadline (``DEADLINE_S``) passed before it made every step they stand for."""

    folds: tuple[Fold, ...]
    stopped: bool


class Bridge:
    """One view's provisional folds in this process: each step made, for later renders;
    those standing, to tell when a committed fold replaces them.

    A run's provisional fold after step ``k`` is made from the fold after step
    ``k - 1`` and step ``k``'s messages: each render folds only the steps it
    has not made, and since every step's fold follows from the log alone, every
    process makes the same ones.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._made: OrderedDict[tuple[int, ...], Fold] = OrderedDict()
        self._standing: dict[int, tuple[Fold, float]] = {}

    def folds(
        self,
        state: ViewState,
        over: Callable[[Sequence[Fold]], int],
        callbacks: list[EventCallback],
    ) -> Bridged:
        """The fewest steps, oldest first, whose provisional folds bring ``over`` (the
        tokens the prompt would be over its budget with them) to 0; when all of them do
        not, the largest of them shortened to fit, if it can be.

        Past the deadline, a step not made yet is not extracted: the rest of its run
        stands as one digest fold (each message's opening words, ``Rescue.digest``),
        which a later render replaces with the steps it makes then.
        """
        if state.budget is None:
            return Bridged((), False)
        room = max(int((state.budget - state.fixed) * FOLD_SHARE), MIN_FOLD_TOKENS)
        began = time.perf_counter()
        made = stopped = False
        taken: list[Fold] = []
        growing = state.units[-1][0] - 1  # the last step before the newest unit still grows
        for run in runs(state):
            fold: Fold | None = None
            key: tuple[int, ...] = (room,)
            for first, last in run:
                steps = state.entries[first : last + 1]
                if last == growing:
                    taken.extend([] if fold is None else [fold])
                    fold = digest_fold(state, steps, room, GROWING)
                    break
                key = (*key, *(e.start for e in steps))
                with self._lock:
                    known = self._made.get(key)
                if known is None and made and time.perf_counter() - began > DEADLINE_S:
                    stopped = True
                    taken.extend([] if fold is None else [fold])
                    fold = digest_fold(state, state.entries[first : run[-1][1] + 1], room, DIGEST)
                    break
                if known is None:
                    made = True
                    known = self._make(state, fold, steps, room, key)
                fold = known
                if over([*taken, fold]) <= 0:
                    return self._shown(state, [*taken, fold], callbacks, stopped=stopped)
            if fold is not None:
                taken.append(fold)
                if over(taken) <= 0:
                    return self._shown(state, taken, callbacks, stopped=stopped)
        excess = over(taken)
        if taken and excess > 0:
            largest = max(range(len(taken)), key=lambda i: taken[i].tokens_after)
            short = shortened(taken[largest], taken[largest].tokens_after - excess, state.counter)
            if short is not None:
                taken[largest] = short
        return self._shown(state, taken, callbacks, stopped=stopped)

    def _make(
        self,
        state: ViewState,
        before: Fold | None,
        steps: Sequence[Entry],
        room: int,
        key: tuple[int, ...],
    ) -> Fold:
        fold = provisional_fold(state, before, steps, room)
        with self._lock:
            self._made[key] = fold
            while len(self._made) > KEPT:
                self._made.popitem(last=False)
        return fold

    def _shown(
        self, state: ViewState, folds: list[Fold], callbacks: list[EventCallback], *, stopped: bool
    ) -> Bridged:
        """The folds a render stands, each told of (``provisional``) the first time it does.

        A fold that grows a run's fold by a step keeps the time the run's first
        fold began standing: ``replaced`` tells how long that run was bridged."""
        now = time.monotonic()
        new = []
        with self._lock:
            for fold in folds:
                was = self._standing.get(fold.start)
                if was is None or was[0].id != fold.id:
                    self._standing[fold.start] = (fold, now if was is None else was[1])
                    new.append(fold)
        for fold in new:
            took = fold.data["made_s"]
            emit(
                Event(
                    "provisional",
                    state.session_id,
                    state.view,
                    NAME,
                    fold.start,
                    fold.end,
                    tokens_before=fold.tokens_before,
                    tokens_after=fold.tokens_after,
                    duration_s=took,
                    data={
                        "fold": fold.id,
                        "ms": round(took * 1000, 3),
                        "steps": fold.data["steps"],
                    },
                ),
                callbacks,
            )
        return Bridged(tuple(folds), stopped)

    def replaced(
        self, session: str, view: str, committed: Sequence[Fold], callbacks: list[EventCallback]
    ) -> None:
        """Tell of each standing provisional fold a committed fold now lies over, and forget it."""
        with self._lock:
            if not self._standing:
                return
            gone = []
            for start, (fold, since) in list(self._standing.items()):
                by = next((c for c in committed if c.overlaps(fold)), None)
                if by is not None:
                    gone.append((fold, since, by))
                    del self._standing[start]
        now = time.monotonic()
        for fold, since, by in gone:
            stood = now - since
            emit(
                Event(
                    "replaced",
                    session,
                    view,
                    NAME,
                    fold.start,
                    fold.end,
                    tokens_before=fold.tokens_before,
                    tokens_after=fold.tokens_after,
                    duration_s=stood,
                    data={
                        "fold": fold.id,
                        "by": by.id,
                        "by_strategy": by.strategy,
                        "by_start": by.start,
                        "by_end": by.end,
                        "stood_s": round(stood, 4),
                    },
                ),
                callbacks,
            )


def shortened(fold: Fold, tokens: int, counter: TokenCounter) -> Fold | None:
    """``fold`` clipped to cost at most ``tokens``, its range label kept; None when it
    cannot be (less room than the label and a few words)."""
    room = tokens - counter.text("\n" + range_label(fold.start, fold.end))
    if room < MIN_SHORT_TOKENS:
        return None
    fitted = clip_messages([unlabelled(fold.messages[0])], room, counter)
    if fitted is None:
        return None
    shown = labelled(fitted[0][0], fold.start, fold.end)
    cost = counter.message(shown)
    if cost > tokens:
        return None
    return replace(
        fold,
        id=f"{fold.id}:{tokens}",
        text=text_of(fitted[0][0]),
        messages=(shown,),
        tokens_after=cost,
    )


def digest_fold(state: ViewState, entries: Sequence[Entry], room: int, suffix: str) -> Fold:
    """Each message's opening words over ``entries``, provisional: what stands for steps
    a render had no time left to extract (``DIGEST``), or for the step that still grows
    with each append (``GROWING``), extracted once it is whole."""
    job = _job(state, tuple(entries), room)
    (fold,) = PROVISIONAL.digest(job, state.counter)
    return replace(
        fold,
        id=f"{NAME}:{job.start}-{job.end}:{room}{suffix}",
        created_at=0.0,
        data={**fold.data, "provisional": True, "steps": 0, "made_s": 0.0},
    )


def _job(state: ViewState, entries: tuple[Entry, ...], room: int) -> Job:
    return Job(
        NAME,
        state.view,
        state.version,
        entries[0].start,
        entries[-1].end,
        entries,
        {"spans": [(0, len(entries) - 1)], "fold_tokens": room},
    )


def provisional_fold(
    state: ViewState, before: Fold | None, steps: Sequence[Entry], room: int
) -> Fold:
    """The rescue's model-free fold of ``before`` (the run's fold so far) and ``steps``,
    marked provisional, its id naming its range and room, so every process makes the
    same one; ``tokens_before`` counts the raw messages it stands for."""
    job = _job(state, (*([] if before is None else [Entry.of_fold(before)]), *steps), room)
    counter: TokenCounter = state.counter
    began = time.perf_counter()
    try:
        (fold,) = PROVISIONAL.run(job, OfflineModel(counter=counter), counter)
    except Exception:  # the extractive stand-in found nothing to keep: each message's opening
        (fold,) = PROVISIONAL.digest(job, counter)
    raw = (0 if before is None else before.tokens_before) + sum(e.tokens for e in steps)
    return replace(
        fold,
        id=f"{NAME}:{job.start}-{job.end}:{room}",
        created_at=0.0,
        tokens_before=raw,
        data={
            **fold.data,
            "provisional": True,
            "steps": 1 if before is None else before.data["steps"] + 1,
            "made_s": time.perf_counter() - began,
        },
    )


class Folding:
    """Which views have a fold job running in this process, so a render may wait for one."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._running: dict[tuple[str, str], int] = {}
        self._ended: dict[tuple[str, str], int] = {}

    @contextmanager
    def running(self, session: str, view: str) -> Iterator[None]:
        key = (session, view)
        with self._cond:
            self._running[key] = self._running.get(key, 0) + 1
        try:
            yield
        finally:
            with self._cond:
                left = self._running[key] - 1
                if left:
                    self._running[key] = left
                else:
                    del self._running[key]
                self._ended[key] = self._ended.get(key, 0) + 1
                self._cond.notify_all()

    def wait(self, session: str, view: str, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a running job of the view to end; False when
        none was running, or none ended in time."""
        key = (session, view)
        deadline = time.monotonic() + timeout
        with self._cond:
            if key not in self._running:
                return False
            ended = self._ended.get(key, 0)
            while self._ended.get(key, 0) == ended:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True


FOLDING = Folding()
"""The jobs running in this process (``run_cycle`` marks each)."""
