"""A pipeline: strategies in order; the first that plans a job wins.

ADR-0041's order is the model: cheap, fine-grained folds first (tool calls),
coarser ones after (threshold, then goal batches). Re-planning after every
commit lets a later strategy see what an earlier one folded.

``recall`` is whether a view with this pipeline recalls from its log by
default (``contextfold.memory.recall``); the preset factories set it, and a
view's own ``recall`` setting overrides it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from contextfold.core.errors import InvalidInput
from contextfold.strategies.base import Job, Strategy, ViewState


class Pipeline:
    def __init__(
        self, strategies: Sequence[Strategy], *, name: str = "custom", recall: bool = False
    ) -> None:
        names = [s.name for s in strategies]
        if len(set(names)) != len(names):
            raise InvalidInput(
                f"strategy names must be unique in a pipeline: {names}", field="strategies"
            )
        self.name = name
        self.recall = recall
        self.strategies = tuple(strategies)
        self._by_name = {s.name: s for s in strategies}

    def plan(self, state: ViewState, *, skip: Collection[str] = ()) -> Job | None:
        """The first job any strategy plans, leaving out the strategies named in ``skip``."""
        for strategy in self.strategies:
            if strategy.name in skip:
                continue
            job = strategy.plan(state)
            if job is not None:
                return job
        return None

    def strategy(self, name: str) -> Strategy:
        return self._by_name[name]

    def __repr__(self) -> str:
        return f"Pipeline({self.name!r}, {[s.name for s in self.strategies]})"
