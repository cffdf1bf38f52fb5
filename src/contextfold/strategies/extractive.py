"""Placeholder until the extractive strategy lands (replaced in the same change)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contextfold.folds import Fold
from contextfold.strategies.base import Job, ViewState
from contextfold.tokens import TokenCounter


@dataclass
class ExtractiveSummary:
    name: str = "extractive"

    def plan(self, state: ViewState) -> Job | None:
        return None

    def run(self, job: Job, llm: Any, counter: TokenCounter) -> Sequence[Fold]:
        raise NotImplementedError
