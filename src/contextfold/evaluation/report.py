"""``--report DIR``: ``results.json``, the PNG plots, and a self-contained ``report.html``.

The HTML page embeds the PNGs as base64 data URIs and carries its own style,
so it opens anywhere and can be mailed as one file: the inputs and settings,
the suggestion, the table, and the plots.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.evaluation.plots import (
    caption_of,
    probes_figure,
    retention_figure,
    save_png,
    tokens_figure,
)
from contextfold.evaluation.probes import PROBE_TYPES
from contextfold.evaluation.results import skip_summary

RETENTION_PNG = "retention.png"
PROBES_PNG = "probes.png"
TOKENS_PNG = "tokens.png"
_STYLE = """body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}
table{border-collapse:collapse}td,th{padding:.25rem .6rem;border-bottom:1px solid #ddd}
td.n{text-align:right;font-variant-numeric:tabular-nums}th{text-align:left}
img{max-width:100%}.s{background:#eef6ee;padding:.6rem 1rem;border-radius:.3rem}
dt{font-weight:600;float:left;clear:left;width:13rem}dd{margin-left:14rem}"""


def plot_budget(summary: Mapping[str, Any]) -> str:
    """The budget the tokens-per-turn plot is drawn at: the middle one given."""
    budgets: list[str] = summary["budgets"]
    return budgets[len(budgets) // 2]


def write_report(directory: Path, summary: Mapping[str, Any]) -> list[Path]:
    """Write the report's files into ``directory`` (created if missing); returns them."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidInput(f"cannot create {directory}: {exc}", field="report") from exc
    written = [directory / "results.json"]
    written[0].write_text(json.dumps(summary, ensure_ascii=False, indent=1) + "\n", "utf-8")
    images: list[tuple[str, str, Path]] = []
    figure = retention_figure(summary)
    if figure is not None:
        caption = caption_of(figure)
        images.append(("Retention vs budget", caption, save_png(figure, directory / RETENTION_PNG)))
    budget = plot_budget(summary)
    figure = tokens_figure(summary, budget)
    if figure is not None:
        caption = caption_of(figure)
        path = save_png(figure, directory / TOKENS_PNG)
        images.append((f"Prompt tokens per turn at {budget}", caption, path))
    figure = probes_figure(summary)
    if figure is not None:
        caption = caption_of(figure)
        images.append(("Probe scores per type", caption, save_png(figure, directory / PROBES_PNG)))
    page = directory / "report.html"
    page.write_text(_page(summary, images), "utf-8")
    return [*written, *(p for _, _, p in images), page]


def _page(summary: Mapping[str, Any], images: list[tuple[str, str, Path]]) -> str:
    e = html.escape
    parts = [
        "<!doctype html><html lang=en><meta charset=utf-8>",
        "<title>contextfold eval</title>",
        f"<style>{_STYLE}</style>",
        "<h1>contextfold eval</h1>",
    ]
    suggestion = summary.get("suggestion")
    if suggestion:
        parts.append(f"<p class=s><b>Suggestion:</b> {e(suggestion['reason'])}</p>")
    parts.append("<h2>Inputs and settings</h2><dl>")
    for label, value in _settings(summary):
        parts.append(f"<dt>{e(label)}</dt><dd>{e(value)}</dd>")
    parts.append("</dl><h2>Results</h2><table><tr>")
    header, rows = table_rows(summary)
    parts.extend(f"<th>{e(h)}</th>" for h in header)
    parts.append("</tr>")
    for row in rows:
        cells = [f"<td>{e(row[0])}</td><td>{e(row[1])}</td>"]
        cells.extend(f"<td class=n>{e(c)}</td>" for c in row[2:])
        parts.append(f"<tr>{''.join(cells)}</tr>")
    parts.append(f"</table><p>{e(column_notes(summary))}</p>")
    if summary.get("probes"):
        header, rows = probe_rows(summary)
        parts.append("<h2>Probes</h2><table><tr>")
        parts.extend(f"<th>{e(h)}</th>" for h in header)
        parts.append("</tr>")
        for row in rows:
            cells = [f"<td>{e(row[0])}</td>", *(f"<td class=n>{e(c)}</td>" for c in row[1:])]
            parts.append(f"<tr>{''.join(cells)}</tr>")
        parts.append(f"</table><p>{e(probe_notes(summary))}</p>")
    if agreement_notes(summary):
        parts.append(f"<p>{e(agreement_notes(summary))}</p>")
    for title, caption, path in images:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        parts.append(
            f"<h2>{e(title)}</h2><img alt='{e(title)}. {e(caption)}' "
            f"src='data:image/png;base64,{data}'>"
        )
    parts.append("</html>\n")
    return "\n".join(parts)


def _settings(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    skipped = summary.get("skipped") or {}
    settings = [
        ("input", f"{summary['path']} ({summary['format']})"),
        (
            "read",
            f"{summary['conversations']} conversations, {summary['messages']:,} messages, "
            f"{summary['tokens']:,} tokens, {summary['questions']} questions with answer key words",
        ),
        (
            "left out of the input",
            ", ".join(f"{n} {why}" for why, n in skipped.items()) or "nothing",
        ),
        ("skipped per budget", skip_summary(summary) or "nothing"),
        ("presets", ", ".join(summary["presets"])),
        ("budgets", ", ".join(summary["budgets"])),
        ("sampled turns", f"{summary['samples']} a conversation"),
        ("encoding", summary["encoding"]),
        ("model", summary["model"] or "offline stand-in (no model paid)"),
    ]
    if summary.get("judge"):
        settings.append(
            (
                "judge",
                f"{summary['judge']}: {summary['qa_questions']} questions graded "
                f"(at most {summary['questions_per_conversation']} a conversation)",
            )
        )
    if summary.get("probes"):
        settings.append(
            (
                "probes",
                f"{summary['probes']['made']} made, graded by {summary['probes']['grading']}",
            )
        )
    if summary.get("results_file"):
        settings.append(
            (
                "results file",
                f"{summary['results_file']} ({summary['resumed']} records read back)",
            )
        )
    settings.append(("wall time", f"{summary['seconds']:.1f} s"))
    return settings


def table_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The results table as text cells, for the terminal and the page alike; the columns
    for skips, overshoot, failed jobs, model calls, retention and QA accuracy only when they
    say something, and "-" for the figures of a row that ran on no conversation."""
    results = summary["results"]
    columns: list[tuple[str, Any]] = [
        ("preset", lambda r: r["preset"]),
        ("budget", lambda r: r["budget"]),
    ]
    if any(r["skipped"] for r in results):
        columns.append(("skip", lambda r: str(sum(r["skipped"].values()))))
    columns += [
        ("prompt", lambda r: f"{r['tokens_after']:,}"),
        ("ratio", lambda r: _number(r["compression"], "{:.1f}x")),
        ("folds", lambda r: str(r["folds"])),
    ]
    if any(r["overshoot_tokens"] for r in results):
        columns.append(("over", lambda r: f"{r['overshoot_tokens']:,}"))
    if any(r["failed_jobs"] for r in results):
        columns.append(("failed", lambda r: str(r["failed_jobs"])))
    if summary.get("model"):
        columns.append(("model calls/tok", lambda r: f"{r['model_calls']}/{r['model_tokens']:,}"))
    columns.append(("ms p50/p99", _render_ms))
    if any(r["retention"] is not None for r in results):
        columns.append(("retention", lambda r: _number(r["retention"], "{:.2f}")))
    if summary.get("full_qa_accuracy") is not None:
        columns.append(("QA acc", lambda r: _number(r["qa_accuracy"], "{:.2f}")))
    if any(r.get("failed") for r in results):
        columns.append(("calls failed", lambda r: str(sum(r["failed"].values()))))
    return [name for name, _ in columns], [
        [cell(r) if r["conversations"] or name in _UNMEASURED else "-" for name, cell in columns]
        for r in results
    ]


_UNMEASURED = frozenset({"preset", "budget", "skip", "model calls/tok", "calls failed"})
"""The columns a row that ran on no conversation still fills (its calls were paid for)."""


def _number(value: float | None, form: str) -> str:
    return "-" if value is None else form.format(value)


def _render_ms(row: Mapping[str, Any]) -> str:
    if row["render_p50_ms"] is None:
        return "-"
    return f"{row['render_p50_ms']:.2f}/{row['render_p99_ms']:.2f}"


_NOTES = {
    "skip": "conversations left out of the row's figures because the budget is under their "
    "system prompt plus last user message, which every prompt must hold (a short chat at a "
    "share budget, or a long first message)",
    "prompt": "tokens rendered at the end, summed over the conversations",
    "ratio": "tokens before over after",
    "over": "the most tokens the folded view was over its budget at a sampled turn (render's "
    "last-resort cut left them out)",
    "failed": "jobs whose model call failed",
    "model calls/tok": "calls and tokens the strategies spent on --model",
    "ms p50/p99": "render times at the sampled turns",
    "retention": "answer recall in the prompt over the full conversation's",
    "QA acc": "answers the judge graded correct",
    "calls failed": "answers and grades whose call failed (timeout, HTTP error, refusal, "
    "connection), left out of the scores and asked again by a run resumed with --results",
}


def probe_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The probe scores as text cells: per arm, each type's score with its 95% interval
    (n in the header, and in a cell only where failed calls made it smaller), and all
    types together."""
    arms = summary["probes"]["arms"]
    kinds = [*PROBE_TYPES, "all"]
    most = {k: max(_figure(a, k)["n"] for a in arms) for k in kinds}
    header = ["arm", *(f"{k}\nn={most[k]}" for k in kinds)]
    if any(a["failed"] for a in arms):
        header.append("failed")
    rows = []
    for arm in arms:
        cells = [arm["arm"], *(_score(_figure(arm, k), most[k]) for k in kinds)]
        if "failed" in header[-1:]:
            cells.append(str(arm["failed"]))
        rows.append(cells)
    return header, rows


def _figure(arm: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    figure: Mapping[str, Any] = arm["all"] if kind == "all" else arm["by_type"][kind]
    return figure


def _score(figure: Mapping[str, Any], most: int) -> str:
    if not figure["n"]:
        return "-"
    text = f"{figure['score']:.2f}\n{figure['low']:.2f}-{figure['high']:.2f}"
    return text if figure["n"] == most else f"{text}\nn={figure['n']}"


def probe_notes(summary: Mapping[str, Any]) -> str:
    """What the probe table rests on, and what the answers and grades cost per arm."""
    probes = summary["probes"]
    notes = (
        f"Probes: {probes['made']} made from the folded part of the conversations, graded by "
        f"{probes['grading']}; each cell the share correct and its 95% Wilson interval; full is the whole "
        "conversation as the prompt, keep-recent plain trimming."
    )
    return notes + (" " + cost_notes(summary) if summary.get("full") else "")


def cost_notes(summary: Mapping[str, Any]) -> str:
    """Calls and tokens the answers and grades cost per arm (the full context first)."""
    arms = [("full", summary["full"])] + [
        (f"{r['preset']}@{r['budget']}", r) for r in summary["results"] if "answer_calls" in r
    ]
    spent = [a for a in arms if a[1]["answer_calls"] or a[1]["grade_calls"]]
    if not spent:
        return ""
    return (
        "Answers + grades per arm: "
        + "; ".join(
            f"{name} {c['answer_calls']}+{c['grade_calls']} calls, "
            f"{c['answer_tokens'] + c['grade_tokens']:,} tokens"
            for name, c in spent
        )
        + "."
    )


def agreement_notes(summary: Mapping[str, Any]) -> str:
    """The judge's agreement with exact match (and with hand grades), in one sentence."""
    found = summary.get("agreement") or {}
    parts = []
    for name, label in (("exact", "exact match"), ("hand", "your hand grades")):
        figure = found.get(name)
        if figure and figure["n"]:
            parts.append(
                f"with {label} {figure['agreement']:.2f} on {figure['n']} answers "
                f"({figure['judge_correct_other_wrong']} judge CORRECT/{label} WRONG, "
                f"{figure['judge_wrong_other_correct']} judge WRONG/{label} CORRECT)"
            )
    return f"Judge agreement {'; '.join(parts)}." if parts else ""


def column_notes(summary: Mapping[str, Any]) -> str:
    """What the table's columns are."""
    header, _ = table_rows(summary)
    notes = "; ".join(f"{name}: {_NOTES[name]}" for name in header if name in _NOTES) + "."
    if summary.get("full_qa_accuracy") is not None:
        notes += f" Full-context QA accuracy {summary['full_qa_accuracy']:.2f}."
    if "retention" not in header:
        notes += " Retention was not measured: no question with a gold answer to score."
    if skip_summary(summary):
        notes += " " + skip_summary(summary)
    return notes
