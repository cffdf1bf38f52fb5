"""Budgets given as a share of each conversation's tokens (``10%``) or as tokens (``1200``)."""

from __future__ import annotations

from dataclasses import dataclass

from contextfold.core.errors import InvalidInput


@dataclass(frozen=True)
class Budget:
    """One budget: ``share`` of the full conversation's tokens, or ``tokens`` outright."""

    label: str
    share: float | None = None
    tokens: int | None = None

    def for_conversation(self, full_tokens: int) -> int:
        """The budget in tokens for a conversation of ``full_tokens`` (at least 1)."""
        if self.tokens is not None:
            return self.tokens
        assert self.share is not None
        return max(1, int(full_tokens * self.share))


def parse_budget(text: str) -> Budget:
    """``5%`` (0 < p <= 100) or a whole number of tokens (> 0)."""
    item = text.strip()
    if item.endswith("%"):
        try:
            percent = float(item[:-1])
        except ValueError:
            raise InvalidInput(f"not a percentage: {text!r}", field="budgets") from None
        if not 0 < percent <= 100:
            raise InvalidInput(
                f"a percentage budget must be above 0 and at most 100, got {text!r}",
                field="budgets",
            )
        return Budget(label=f"{percent:g}%", share=percent / 100)
    try:
        tokens = int(item)
    except ValueError:
        raise InvalidInput(
            f"a budget is a percentage (10%) or whole tokens (1200), not {text!r}",
            field="budgets",
        ) from None
    if tokens <= 0:
        raise InvalidInput(f"a budget must be more than 0 tokens, got {tokens}", field="budgets")
    return Budget(label=str(tokens), tokens=tokens)


def parse_budgets(text: str) -> list[Budget]:
    """A comma-separated list of budgets, in the order given, repeats refused."""
    budgets = [parse_budget(item) for item in text.split(",") if item.strip()]
    if not budgets:
        raise InvalidInput("no budgets given", field="budgets")
    labels = [b.label for b in budgets]
    if len(set(labels)) != len(labels):
        raise InvalidInput(f"a budget is given twice in {text!r}", field="budgets")
    return budgets
