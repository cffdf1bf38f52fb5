"""Composable triggers: small predicates over a view's counts.

``Tokens(3000) | MessageCount(200)`` fires when either does; ``&`` needs both.
``OverBudget()`` compares with the budget the view is rendered at.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from contextfold.strategies.base import ViewState


class Trigger(ABC):
    """A predicate over a view's counts; ``|`` and ``&`` combine two."""

    @abstractmethod
    def __call__(self, state: ViewState) -> bool: ...

    def __or__(self, other: Trigger) -> Trigger:
        return AnyOf((self, other))

    def __and__(self, other: Trigger) -> Trigger:
        return AllOf((self, other))


@dataclass(frozen=True)
class AnyOf(Trigger):
    triggers: tuple[Trigger, ...]

    def __call__(self, state: ViewState) -> bool:
        return any(t(state) for t in self.triggers)


@dataclass(frozen=True)
class AllOf(Trigger):
    triggers: tuple[Trigger, ...]

    def __call__(self, state: ViewState) -> bool:
        return all(t(state) for t in self.triggers)


@dataclass(frozen=True)
class Always(Trigger):
    def __call__(self, state: ViewState) -> bool:
        return True


@dataclass(frozen=True)
class Never(Trigger):
    def __call__(self, state: ViewState) -> bool:
        return False


@dataclass(frozen=True)
class Tokens(Trigger):
    """More than ``limit`` prompt tokens."""

    limit: int

    def __call__(self, state: ViewState) -> bool:
        return state.tokens > self.limit


@dataclass(frozen=True)
class MessageCount(Trigger):
    """More than ``limit`` rendered messages."""

    limit: int

    def __call__(self, state: ViewState) -> bool:
        return state.message_count > self.limit


@dataclass(frozen=True)
class Characters(Trigger):
    """More than ``limit`` characters of conversation text."""

    limit: int

    def __call__(self, state: ViewState) -> bool:
        return state.characters > self.limit


@dataclass(frozen=True)
class Rounds(Trigger):
    """More than ``limit`` rounds in the view."""

    limit: int

    def __call__(self, state: ViewState) -> bool:
        return len(state.rounds) > self.limit


@dataclass(frozen=True)
class UnfoldedRounds(Trigger):
    """More than ``limit`` rounds after the last summary."""

    limit: int

    def __call__(self, state: ViewState) -> bool:
        return len(state.unfolded_rounds) > self.limit


@dataclass(frozen=True)
class OverBudget(Trigger):
    """Prompt tokens above ``ratio`` of the render budget (never without a budget).

    Without a ``ratio``, the view's high-water mark: early enough that a
    background fold lands before render has to cut.
    """

    ratio: float | None = None

    def __call__(self, state: ViewState) -> bool:
        if state.budget is None:
            return False
        if self.ratio is None:
            return state.above_high_water
        return state.tokens > state.budget * self.ratio


@dataclass(frozen=True)
class Predicate(Trigger):
    """A user function of the view state."""

    fn: Callable[[ViewState], bool]

    def __call__(self, state: ViewState) -> bool:
        return bool(self.fn(state))
