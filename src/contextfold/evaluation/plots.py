"""The report's two plots, drawn with matplotlib (the ``eval`` extra) off screen.

- retention vs budget, one line per preset, with the full context (1.0) and the
  suggestion's floor marked: what survives compaction as the budget shrinks;
- prompt tokens per turn over one replayed conversation at one budget, one line
  per preset and one for the full context: how each keeps the prompt flat.

``require_matplotlib`` is called before any work, so ``--report`` without the
extra fails at once, naming it, instead of after a long replay.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from contextfold.core.extras import needs_extra
from contextfold.evaluation.suggest import FLOOR

_SIZE = (8.0, 4.2)
_DPI = 120


def require_matplotlib() -> None:
    """Raise ``MissingExtra`` naming the eval extra when matplotlib cannot be imported."""
    with needs_extra("'contextfold eval --report'", "eval"):
        import matplotlib  # noqa: F401


def _pyplot() -> Any:
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_retention(summary: Mapping[str, Any], path: Path) -> bool:
    """Retention vs budget per preset; False (nothing drawn) when nothing was measured."""
    rows = summary["results"]
    if all(r["retention"] is None for r in rows):
        return False
    plt = _pyplot()
    budgets: list[str] = summary["budgets"]
    fig, ax = plt.subplots(figsize=_SIZE, dpi=_DPI)
    for preset in summary["presets"]:
        by_budget = {r["budget"]: r["retention"] for r in rows if r["preset"] == preset}
        xs = [i for i, b in enumerate(budgets) if by_budget.get(b) is not None]
        ax.plot(xs, [by_budget[budgets[i]] for i in xs], marker="o", label=preset)
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="full context")
    ax.axhline(FLOOR, color="grey", linestyle=":", linewidth=1, label=f"{FLOOR:g} of full")
    ax.set_xticks(range(len(budgets)), budgets)
    ax.set_xlabel("budget (share of each conversation's tokens, or tokens)")
    ax.set_ylabel("answer-recall retention (full context = 1)")
    ax.set_ylim(0, 1.1)
    ax.set_title(
        f"What survives compaction: {summary['questions']} questions, "
        f"{summary['conversations']} conversations"
    )
    _save(plt, fig, ax, path)
    return True


def plot_tokens(summary: Mapping[str, Any], budget: str, path: Path) -> bool:
    """Prompt tokens per sampled turn of ``summary['session']`` at ``budget``; False
    when there is no session to draw."""
    session = summary["session"]
    if not session or not session["turns"]:
        return False
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=_SIZE, dpi=_DPI)
    turns = session["turns"]
    ax.plot(turns, session["full_tokens"], color="black", linestyle="--", label="full context")
    budget_tokens = None
    for arm in session["arms"]:
        if arm["budget"] == budget:
            ax.plot(turns, arm["tokens"], marker="o", markersize=3, label=arm["preset"])
            budget_tokens = arm["budget_tokens"]
    if budget_tokens is not None:
        ax.axhline(budget_tokens, color="grey", linestyle=":", linewidth=1, label="budget")
    ax.set_xlabel("messages logged")
    ax.set_ylabel(f"prompt tokens ({summary['encoding']})")
    ax.yaxis.set_major_formatter(lambda value, _: f"{value:,.0f}")
    shown = "" if budget_tokens is None else f" ({budget_tokens:,} tokens)"
    ax.set_title(
        f"Prompt tokens per turn: {session['title'] or session['id']} "
        f"({session['messages']:,} messages), "
        f"budget {budget}{shown}"
    )
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    _save(plt, fig, ax, path)
    return True


def _save(plt: Any, fig: Any, ax: Any, path: Path) -> None:
    """Grid, the legend beside the plot, and the PNG written."""
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
