"""The report's two plots, drawn with matplotlib (the ``eval`` extra) off screen.

- retention vs budget, one line per preset, with the full context (1.0), the
  suggestion's floor and keep-recent (plain trimming, the baseline a preset must
  beat) drawn as references: what survives compaction as the budget shrinks;
- prompt tokens per turn over one replayed conversation at one budget, one line
  per preset and one for the full context: how each keeps the prompt flat;
- probe scores per type, one bar per arm (the full context first) with its 95%
  interval as a whisker: what kind of thing each arm keeps.

Each says what a reader needs to compare without the table beside it: the
budget in both units (a share of each conversation's tokens, and tokens), the
conversations and questions it rests on in the title, and the conversations
skipped per budget in a caption under it. Budgets are drawn smallest first,
whatever order they were given in.

``require_matplotlib`` is called before any work, so ``--report`` without the
extra fails at once, naming it, instead of after a long replay.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from contextfold.core.extras import needs_extra
from contextfold.evaluation.probes import PROBE_TYPES
from contextfold.evaluation.results import skip_summary
from contextfold.evaluation.suggest import FLOOR

_SIZE = (9.0, 5.0)
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


BASELINE = "keep-recent"
"""Plain trimming: drawn as a reference line, the figure every other preset must beat."""
BASELINE_LABEL = f"{BASELINE} (plain trimming)"
FULL_LABEL = "full context (1.0)"
_REFERENCE = {"color": "dimgrey", "linestyle": "--", "marker": "s"}
_CAPTION_WIDTH = 150
_GREYS = ("dimgrey", "darkgrey", "silver", "gainsboro")
"""keep-recent's bars, one shade a budget."""


def _style(preset: str) -> dict[str, Any]:
    if preset == BASELINE:
        return {**_REFERENCE, "label": BASELINE_LABEL}
    return {"marker": "o", "label": preset}


def _budgets(summary: Mapping[str, Any]) -> list[tuple[str, float]]:
    """Each budget with its mean tokens a conversation, smallest first."""
    total = max(summary["conversations"], 1)
    first: dict[str, float] = {}
    for row in summary["results"]:
        first.setdefault(row["budget"], row["budget_tokens"] / total)
    return sorted(first.items(), key=lambda item: item[1])


def budget_tick(label: str, mean_tokens: float, summary: Mapping[str, Any]) -> str:
    """The budget as given, and below it in the other unit."""
    if label.endswith("%"):
        return f"{label}\n≈{mean_tokens:,.0f} tok"
    share = 100 * mean_tokens * summary["conversations"] / max(summary["tokens"], 1)
    return f"{int(label):,} tok\n≈{share:.2g}%"


def _budget_axis(summary: Mapping[str, Any]) -> str:
    shares = [b.endswith("%") for b in summary["budgets"]]
    if all(shares):
        return "budget: % of each conversation's tokens (below it, the mean in tokens)"
    if not any(shares):
        return "budget: tokens a conversation (below it, as % of the mean conversation)"
    return "budget: % of each conversation's tokens, or tokens (below it, the other unit)"


def skip_caption(summary: Mapping[str, Any]) -> str:
    """Which conversations each budget's points leave out, and why."""
    skipped = skip_summary(summary)
    if not skipped:
        return f"Every preset ran on all {summary['conversations']} conversations at every budget."
    return f"{skipped} Those are left out of the points; n: the conversations a point rests on."


def retention_figure(summary: Mapping[str, Any]) -> Any | None:
    """Retention vs budget per preset (None: nothing measured retention)."""
    rows = summary["results"]
    if all(r["retention"] is None for r in rows):
        return None
    plt = _pyplot()
    budgets = _budgets(summary)
    fig, ax = plt.subplots(figsize=_SIZE, dpi=_DPI)
    top = 1.0
    for preset in summary["presets"]:
        by_budget = {r["budget"]: r for r in rows if r["preset"] == preset}
        points = [
            (x, by_budget[label])
            for x, (label, _) in enumerate(budgets)
            if label in by_budget and by_budget[label]["retention"] is not None
        ]
        if not points:
            continue
        ys = [float(r["retention"]) for _, r in points]
        top = max(top, *ys)
        ax.plot([x for x, _ in points], ys, **_style(preset))
        for (x, r), y in zip(points, ys, strict=True):
            note = f"{y:.2f}" + (f" (n={r['conversations']})" if r["skipped"] else "")
            ax.annotate(note, (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.axhline(1.0, color="black", linestyle="-", linewidth=1, label=FULL_LABEL)
    ax.axhline(
        FLOOR, color="grey", linestyle=":", linewidth=1, label=f"{FLOOR:g} of full (--suggest)"
    )
    ax.set_xticks(range(len(budgets)), [budget_tick(b, t, summary) for b, t in budgets])
    ax.set_xlim(-0.3, len(budgets) - 0.7)
    ax.set_xlabel(_budget_axis(summary))
    ax.set_ylabel("answer-recall retention\n(relative to the full context = 1.0)")
    ax.set_ylim(0, top + 0.15)
    ax.set_title(
        f"Answer-recall retention by budget: {summary['questions']} questions over "
        f"{summary['conversations']} conversations"
    )
    caption = skip_caption(summary)
    if BASELINE not in summary["presets"]:
        caption += f" Add {BASELINE} to --presets to compare with plain trimming."
    _finish(fig, ax, caption)
    return fig


def tokens_figure(summary: Mapping[str, Any], budget: str) -> Any | None:
    """Prompt tokens per sampled turn of ``summary['session']`` at ``budget`` (None: no
    session to draw)."""
    session = summary["session"]
    if not session or not session["turns"]:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=_SIZE, dpi=_DPI)
    turns = session["turns"]
    ax.plot(turns, session["full_tokens"], color="black", label="full context")
    arms = [a for a in session["arms"] if a["budget"] == budget]
    for arm in arms:
        if not arm["skipped"]:
            ax.plot(turns, arm["tokens"], markersize=3, **_style(arm["preset"]))
    shown = ""
    if arms:
        shown = f" = {arms[0]['budget_tokens']:,} tokens"
        ax.axhline(
            arms[0]["budget_tokens"],
            color="red",
            linestyle=":",
            linewidth=1,
            label=f"budget {budget}{shown}",
        )
    ax.set_xlabel("messages logged (sampled turns)")
    ax.set_ylabel(f"prompt tokens ({summary['encoding']})")
    ax.yaxis.set_major_formatter(lambda value, _: f"{value:,.0f}")
    ax.set_title(
        f"Prompt tokens per turn at budget {budget}{shown}:\n"
        f"{session['title'] or session['id']} ({session['messages']:,} messages), the longest "
        f"of {summary['conversations']} conversations"
    )
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    skipped = [f"{a['preset']} ({a['skipped']})" for a in arms if a["skipped"]]
    caption = (
        f"Skipped on this conversation, so not drawn: {', '.join(skipped)}."
        if skipped
        else "The full context grows with every message; a rendered prompt never exceeds "
        "the budget (render cuts what the folds leave over)."
    )
    _finish(fig, ax, caption)
    return fig


def probes_figure(summary: Mapping[str, Any]) -> Any | None:
    """Probe scores per type, a bar per arm with its 95% interval (None: no probes)."""
    probes = summary.get("probes")
    if not probes or not probes["made"]:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=_SIZE, dpi=_DPI)
    arms = probes["arms"]
    width = 0.8 / len(arms)
    baselines = 0
    for i, arm in enumerate(arms):
        xs, ys, below, above = [], [], [], []
        for x, kind in enumerate(PROBE_TYPES):
            figure = arm["by_type"][kind]
            if figure["n"]:
                xs.append(x - 0.4 + width * (i + 0.5))
                ys.append(figure["score"])
                below.append(figure["score"] - figure["low"])
                above.append(figure["high"] - figure["score"])
        style: dict[str, Any] = {"label": arm["arm"]}
        if arm["arm"] == "full":
            style = {"label": "full context", "color": "black"}
        elif arm["arm"].startswith(f"{BASELINE}@"):
            grey = _GREYS[baselines % len(_GREYS)]
            baselines += 1
            style = {"label": f"{arm['arm']} (plain trimming)", "color": grey, "hatch": "//"}
        ax.bar(xs, ys, width, yerr=[below, above], capsize=2, **style)
    counts = [arms[0]["by_type"][kind]["n"] for kind in PROBE_TYPES]
    ax.set_xticks(
        range(len(PROBE_TYPES)), [f"{k}\n(n={n})" for k, n in zip(PROBE_TYPES, counts, strict=True)]
    )
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("share of probes answered correctly")
    ax.set_title(
        f"Probe scores by type: {probes['made']} probes over {summary['conversations']} "
        f"conversations,\ngraded by {probes['grading']}"
    )
    _finish(
        fig,
        ax,
        "Whiskers: 95% Wilson intervals. Probes are made from the part of each conversation "
        "at least one arm folded; a type with no bar had no probe or no verdict.",
    )
    return fig


def _finish(fig: Any, ax: Any, caption: str) -> None:
    """Grid, the legend beside the plot, and the caption under it, with room kept for it."""
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    lines = textwrap.wrap(caption, _CAPTION_WIDTH)
    fig.text(0.01, 0.01, "\n".join(lines), fontsize=8, va="bottom")
    fig.tight_layout(rect=(0, 0.015 + 0.03 * len(lines), 1, 1))


def caption_of(fig: Any) -> str:
    """The caption under a figure, as one line (what a test or a page reads)."""
    return " ".join(" ".join(t.get_text().split()) for t in fig.texts)


def save_png(fig: Any, path: Path) -> Path:
    """Write ``fig`` to ``path`` and free it."""
    plt = _pyplot()
    fig.savefig(path)
    plt.close(fig)
    return path
