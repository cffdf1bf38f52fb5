"""Reading one view from the store: its system prompt, its sound folds, its live
state and its log newest first.

A ``ViewReader`` is made per handle over the caches this process shares for
the view (``ReadCaches``): the last state, extended by appends instead of read
again (``contextfold.memory.cache``), and the folds already found sound
(``contextfold.memory.heal``). The log is read a page at a time, so a read
costs what the view shows, not what the log holds.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from contextfold.core.entries import Entry, entries_of
from contextfold.core.events import EventCallback
from contextfold.core.folds import Fold, active_facts, active_in_place, fold_copy
from contextfold.core.log import LoggedMessage
from contextfold.core.tokens import TokenCounter
from contextfold.core.units import whole_units
from contextfold.memory.cache import Grown, StateCache
from contextfold.memory.filters import MessageFilter
from contextfold.memory.heal import Checked, fold_faults, sound_folds
from contextfold.memory.pins import PinScan
from contextfold.store.base import Head, Store
from contextfold.strategies.base import ViewState

PAGE = 256
"""Messages read at once when the log is read backwards."""
_SYSTEM_PAGE = 8


def system_end(system: list[LoggedMessage]) -> int:
    """The seq the system prompt ends at (0 for none): its length on a branch from seq 1,
    its last seq on one that starts a root of its own."""
    return system[-1].seq if system else 0


@dataclass(eq=False)
class ReadCaches:
    """What reading keeps for one view in this process: the last live state, the folds
    found sound, and what its pin rules select (``contextfold.memory.pins``)."""

    states: StateCache = field(default_factory=StateCache)
    checked: Checked = field(default_factory=Checked)
    pins: Grown[PinScan] = field(default_factory=Grown)


class ViewReader:
    """Reads the view ``name`` of one session, through this process's caches for it."""

    def __init__(
        self,
        store: Store,
        session_id: str,
        name: str,
        counter: TokenCounter,
        caches: ReadCaches,
        callbacks: list[EventCallback],
    ) -> None:
        self.store = store
        self.session_id = session_id
        self.name = name
        self.counter = counter
        self.caches = caches
        self.callbacks = callbacks
        self._system: tuple[LoggedMessage, ...] | None = None

    def head(self) -> Head:
        return self.store.head(self.session_id, self.name)

    def read_after(self, after: int) -> list[LoggedMessage]:
        """The logged messages after seq ``after``, oldest first."""
        return self.store.messages(self.session_id, after + 1)

    def system(self) -> list[LoggedMessage]:
        """The leading system messages of the log: never folded, always rendered. Once
        another message follows them they can never change, so they are read once."""
        if self._system is not None:
            return list(self._system)
        out: list[LoggedMessage] = []
        while True:
            page = self.store.messages(self.session_id, len(out) + 1, len(out) + _SYSTEM_PAGE)
            for logged in page:
                if logged.role not in ("system", "developer"):
                    self._system = tuple(out)
                    return out
                out.append(logged)
            if len(page) < _SYSTEM_PAGE:
                return out

    def sound_folds(
        self, system: int, *, include_superseded: bool = False
    ) -> tuple[Head, list[Fold]]:
        """The head and the folds fit to render; unfit ones are quarantined (``memory.heal``)."""
        return sound_folds(
            self.store,
            self.session_id,
            self.name,
            system=system,
            counter=self.counter,
            checked=self.caches.checked,
            callbacks=self.callbacks,
            include_superseded=include_superseded,
        )

    def vouch(self, committed: Sequence[Fold]) -> None:
        """Check the folds this process just committed, as the store hands them out, and
        keep the sound ones: the next fresh read then reads neither their data nor their
        checks again, so a fold landing does not cost the next turn its whole body."""
        copies = [fold_copy(fold) for fold in committed]
        head = self.head()
        end = system_end(self.system())
        faults = fold_faults(copies, head.last_seq, end, self.counter, self.store, self.session_id)
        self.caches.checked.vouch([fold for fold in copies if fold.id not in faults])

    def latest_user(self, head: Head, keep: MessageFilter | None) -> LoggedMessage | None:
        """The latest user message at ``head`` that the view's filter keeps."""
        latest = self.store.last_of_role(self.session_id, "user")
        if latest is None or latest.seq > head.last_seq:
            return None
        return latest if keep is None or keep(latest.message) else None

    def live_state(self, head: Head, keep: MessageFilter | None) -> ViewState:
        """The view's live messages and folds at ``head``, before any budget: the last
        state extended by the messages appended since, or read afresh."""
        states = self.caches.states
        state = states.extend(head, keep, self.read_after)
        if state is None:
            state = self._read_state(keep)
            states.put(head, state)
        return state

    def _read_state(self, keep: MessageFilter | None) -> ViewState:
        system = self.system()
        end = system_end(system)
        head, folds = self.sound_folds(end)
        in_place = active_in_place(folds)
        first = end + 1
        for fold in in_place:
            if fold.start <= first:
                first = max(first, fold.end + 1)
        live = self.store.messages(self.session_id, first, head.last_seq)
        if keep is not None:
            live = list(whole_units(reversed(live), lambda m: m.message, keep))[::-1]
        # Leading folds are not re-read from the log, but they are part of the view.
        entries = entries_of(live, [f for f in in_place if f.end > end])
        return ViewState(
            session_id=self.session_id,
            view=self.name,
            version=head.fold_version,
            system=tuple(system),
            entries=tuple(entries),
            facts=active_facts(folds),
            counter=self.counter,
        )

    def newest_first(self, in_place: list[Fold], *, after: int, last: int) -> Iterator[Entry]:
        """Folds and raw messages newest first, reading the log backwards a page at a time."""
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
            page = self.store.messages_before(
                self.session_id, before, min(PAGE, before - 1 - floor)
            )
            # A branch skips the seqs of other branches, so a page may reach below floor.
            page = [logged for logged in page if logged.seq > floor]
            if not page:
                if fi == len(folds):
                    return
                before = floor + 1
                continue
            for logged in page:
                yield Entry.of_message(logged)
            before = page[-1].seq
