"""The guard the cycle puts around a job's model, so any ``LLM`` keeps the job's budget.

``Model`` adapters charge the job budget before each HTTP attempt themselves.
Any other ``LLM`` (a user's own class, ``ScriptedModel``) knows nothing of
budgets, so ``Guarded`` charges one call for it, and for every model:

- waits for the answer only until the job's deadline or its cancel: a model
  that hangs is left behind on a daemon thread, and the job goes on to fail
  (a ``Model`` bounds each of its attempts so itself);
- turns any exception that is not a contextfold error (``TimeoutError``,
  ``ConnectionResetError``, a bug in the user's class) into a ``ModelError``
  naming it, which strategies treat as a failed call.

The cycle leaves the offline stand-in unguarded: it is local and cannot hang.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from contextfold.core.errors import ContextfoldError, ModelError
from contextfold.core.messages import Message
from contextfold.core.provider_items import Compacts, ProviderCompacted, ProviderName
from contextfold.llm.base import LLM, Completion, Model
from contextfold.llm.budget import JobBudget, NoAnswer, call_within

T = TypeVar("T")


class Guarded:
    """``llm`` as a job may use it: within ``budget``, its failures as ``ModelError``."""

    def __init__(self, llm: LLM, budget: JobBudget) -> None:
        self.llm = llm
        self.budget = budget
        self.name = llm.name

    def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        self._admit()
        return self._within_deadline(
            lambda: self.llm.complete(messages, max_tokens=max_tokens, schema=schema)
        )

    def compact(
        self,
        messages: Sequence[Message],
        *,
        provider: ProviderName,
        model: str | None = None,
        instructions: str | None = None,
        max_tokens: int | None = None,
    ) -> ProviderCompacted:
        """The provider's own compaction, on the same terms as ``complete``; a
        ``ModelError`` when the model has none."""
        llm = self.llm
        if not isinstance(llm, Compacts):
            raise ModelError(f"{self.name} cannot ask its provider to compact")
        self._admit()
        return self._within_deadline(
            lambda: llm.compact(
                messages,
                provider=provider,
                model=model,
                instructions=instructions,
                max_tokens=max_tokens,
            )
        )

    def _admit(self) -> None:
        """A ``Model`` charges each attempt itself; any other LLM is charged here, once a call."""
        if isinstance(self.llm, Model):
            self.budget.check(self.name)
        else:
            self.budget.charge(self.name)

    def _within_deadline(self, call: Callable[[], T]) -> T:
        """Run ``call`` and wait no longer than the job may; a ``Model`` bounds its own attempts."""
        try:
            if isinstance(self.llm, Model):
                return call()
            return call_within(call, None, self.budget)
        except NoAnswer:
            raise self._out_of_time() from None
        except Exception as exc:
            failure = self._failure(exc)
            if failure is exc:
                raise
            raise failure from exc

    def _out_of_time(self) -> ContextfoldError:
        """The error for a call the deadline cut short (the budget's own, if it was spent)."""
        self.budget.check(self.name)
        return self.budget.stopped(f"{self.name}: no answer within the job's deadline")

    def _failure(self, exc: Exception) -> ContextfoldError:
        """``exc`` noted as the job's last failure; a library error as it is, else a ``ModelError``."""
        self.budget.note(exc)
        if isinstance(exc, ContextfoldError):
            return exc
        return ModelError(f"{self.name}: {type(exc).__name__}: {exc}")
