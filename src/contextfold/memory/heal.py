"""Self-healing folds: a view reads only folds fit to render, and quarantines the rest.

Folds are derived data (the log is the truth), so a damaged fold is never
worth an error: it is quarantined (kept in the store, marked with why, never
rendered), a ``quarantined`` event says which and why, and the view renders
from the raw log and its remaining folds. Quarantining moves the view's fold
version, so caches and jobs planned over the damaged set notice, and the next
compaction folds the range again.

A fold is checked against ``contextfold.core.fold_checks`` when this process
first reads it (or, for a fold it commits itself, right after the commit, off
the turn), and its data is read from the store only then: a committed fold
never changes, so later reads name it as known and get this process's copy
back (``Store.folds(known=)``). An edit of a fold's row behind the store's back
is therefore found by a process that has not read that fold yet. The checks of
the set (overlaps, facts) are cheap and run on every fresh read. Appends never
make a sound fold unsound: seqs are never reused, and the log only grows.
"""

from __future__ import annotations

import threading

from contextfold.core.errors import DamagedFold, StoreError
from contextfold.core.events import Event, EventCallback, emit
from contextfold.core.fold_checks import own_fault, place_fault, set_faults
from contextfold.core.folds import Fold
from contextfold.core.messages import Message
from contextfold.core.tokens import TokenCounter
from contextfold.store.base import Head, Store


class Checked:
    """Folds this process found sound, by id, as they read then; shared by a view's handles.

    A fold vouched for after a read began (committed here meanwhile) outlives that
    read's ``keep``, which did not see it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sound: dict[str, Fold] = {}
        self._vouched: dict[str, int] = {}
        self._ticket = 0

    def known(self, fold: Fold) -> bool:
        with self._lock:
            return self._sound.get(fold.id) == fold

    def sound(self) -> tuple[int, dict[str, Fold]]:
        """Where a read begins, and the folds it need not read again."""
        with self._lock:
            return self._ticket, dict(self._sound)

    def vouch(self, folds: list[Fold]) -> None:
        """Remember folds this process committed and checked as sound."""
        with self._lock:
            self._ticket += 1
            for fold in folds:
                self._sound[fold.id] = fold
                self._vouched[fold.id] = self._ticket

    def keep(self, folds: list[Fold], read_at: int) -> None:
        """Remember ``folds`` as sound, and forget folds no longer active (but not those
        vouched for since the read began at ``read_at``)."""
        with self._lock:
            later = {i: t for i, t in self._vouched.items() if t > read_at and i in self._sound}
            self._sound = {f.id: f for f in folds} | {i: self._sound[i] for i in later}
            self._vouched = later


def sound_folds(
    store: Store,
    session_id: str,
    view: str,
    *,
    system: int,
    counter: TokenCounter,
    checked: Checked,
    callbacks: list[EventCallback],
    include_superseded: bool = False,
) -> tuple[Head, list[Fold]]:
    """The view's head and folds, after quarantining every fold unfit to render.

    ``system`` is the length of the log's leading system prompt. Each pass
    quarantines at least one fold or returns; a fold the store cannot mark
    (so the same fault would come back forever) is a ``StoreError``.
    """
    tried: set[str] = set()

    def quarantine(fold_id: str, reason: str, fold: Fold | None) -> None:
        if fold_id in tried:
            raise StoreError(
                f"fold {fold_id!r} of {session_id}/{view} is unfit ({reason}) "
                "and could not be quarantined"
            )
        tried.add(fold_id)
        store.quarantine_fold(session_id, view, fold_id, reason)
        event = Event(
            "quarantined",
            session_id,
            view,
            "" if fold is None else fold.strategy,
            0 if fold is None else fold.start,
            0 if fold is None else fold.end,
            detail=f"fold {fold_id} is kept out of the view: {reason}",
            data={"fold": fold_id, "reason": reason},
        )
        emit(event, callbacks)

    while True:
        read_at, known = checked.sound()
        head = store.head(session_id, view)
        try:
            folds = store.folds(
                session_id, view, include_superseded=include_superseded, known=known
            )
        except DamagedFold as exc:
            quarantine(exc.fold_id, exc.reason, None)
            continue
        active = [f for f in folds if f.superseded_by is None]
        fresh = [f for f in active if not checked.known(f)]
        faults = fold_faults(fresh, head.last_seq, system, counter, store, session_id)
        faults.update(set_faults([f for f in active if f.id not in faults]))
        checked.keep([f for f in active if f.id not in faults], read_at)
        if not faults:
            return head, folds
        by_id = {f.id: f for f in active}
        for fold_id, reason in faults.items():
            quarantine(fold_id, reason, by_id[fold_id])


def fold_faults(
    fresh: list[Fold],
    last_seq: int,
    system: int,
    counter: TokenCounter,
    store: Store,
    session_id: str,
) -> dict[str, str]:
    """Why each of ``fresh`` cannot render, by id: its own checks and its place in the log."""
    faults: dict[str, str] = {}
    latest = store.last_of_role(session_id, "user") if fresh else None
    edges = _edges(store, session_id, fresh, last_seq)
    for fold in fresh:
        reason = own_fault(fold, counter) or place_fault(
            fold,
            last_seq=last_seq,
            system=system,
            latest_user=None if latest is None else latest.seq,
            first=edges.get(fold.start),
            after=edges.get(fold.end + 1),
        )
        if reason is not None:
            faults[fold.id] = reason
    return faults


def _edges(store: Store, session_id: str, folds: list[Fold], last_seq: int) -> dict[int, Message]:
    """The logged messages at each fold's start and just past its end, by seq.

    Read as one range when they lie close together (a masking commit folds
    thousands of neighbouring units), else one by one.
    """
    wanted = {s for f in folds for s in (f.start, f.end + 1) if 1 <= s <= last_seq}
    if not wanted:
        return {}
    lo, hi = min(wanted), max(wanted)
    if hi - lo + 1 <= _DENSE * len(wanted):
        found = store.messages(session_id, lo, hi)
    else:
        found = [m for seq in sorted(wanted) for m in store.messages(session_id, seq, seq)]
    return {m.seq: m.message for m in found if m.seq in wanted}


_DENSE = 8
"""A range read pays for this many messages per edge before point reads are cheaper."""
