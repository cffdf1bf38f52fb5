"""The one judge of model answers: bad answers committed, good summaries falsely rejected.

- **Bad answers**: every case of ``src/contextfold/testing/bad_answers.txt`` (refusals, error
  pages, JSON error bodies, null values, ...) is served by a scripted model to
  every model preset, as text and filled into every field of the JSON the
  strategy asks for, over six tau-bench runs in one session. Goal: 0 folds
  committed. ``--quick`` tries four presets.
- **Good answers**: the shared agent runs (tau-bench airline and OpenHands,
  which hold real tool errors, tracebacks and agent refusals) are cut into
  chunks of ``CHUNK`` messages; each chunk's summaries are judged as a strategy
  would judge them, against the chunk as the folded material. The summaries are
  the offline extractive model's, and templated realistic ones that quote the
  chunk's errors and refusals: opening with an error, closing with one, in
  the middle of a first-person account, a quoted refusal, and goal-batch JSON
  sections. A summary longer than its chunk is no good summary and is not
  tried. Goal: 0 falsely rejected. ``--quick`` reads 20 tau-bench runs.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from _common import conversations, parse_args, report

from contextfold import Memory, preset_names
from contextfold.core.entries import Entry
from contextfold.core.log import LoggedMessage
from contextfold.core.messages import Message, text_of
from contextfold.core.tokens import get_counter
from contextfold.extract.artifacts import extract_artifacts
from contextfold.llm.base import Completion, Usage, material, parse_json
from contextfold.llm.offline import OfflineModel
from contextfold.strategies import describe_presets
from contextfold.strategies.answers import REFUSAL_PATTERNS, Expected, judge, normalized
from contextfold.strategies.goal_batch import SCHEMA as GOAL_BATCH_SCHEMA
from contextfold.strategies.transcript import transcript
from contextfold.testing import SchemaFilling, ScriptedModel, bad_answers

CHUNK = 12
MAX_TOKENS = 600
NO_MODEL = frozenset(p.name for p in describe_presets() if not p.model)
QUICK_PRESETS = ("rolling", "token-budget", "adr-0041", "retrieve-facts")
KOOG = {p: {"max_messages": 50} for p in ("whole-history", "retrieve-facts", "code-agent")}
_REFUSAL = re.compile("|".join(REFUSAL_PATTERNS))
COUNTER = get_counter()


def corpus_figures(presets: Sequence[str]) -> dict[str, Any]:
    """Bad answers served to each preset: jobs asked, folds committed."""
    rows = list(conversations("taubench_airline_dev", 6))
    messages = [rows[0]["messages"][0]]
    messages += [m for row in rows for m in row["messages"] if m["role"] != "system"]
    session = Memory().session("s")
    session.extend(messages)
    budget = session.view("all").render_report().tokens + 500
    cases = bad_answers()
    tried = committed = unasked = 0
    per_preset: dict[str, int] = {}
    for preset in presets:
        folds = 0
        for n, case in enumerate(cases):
            for model in (ScriptedModel(default=case), SchemaFilling(case)):
                name = f"{preset}-{n}-{type(model).__name__}"
                view = session.view(name, preset=preset, budget=budget, **KOOG.get(preset, {}))
                view.binding.configuration.give(llm=model)
                report = view.compact()
                tried += 1
                unasked += not report.failed and not report.folds
                folds += len(view.folds())
        per_preset[f"corpus_folds_{preset.replace('-', '_')}"] = folds
        committed += folds
    return {
        "corpus_cases": len(cases),
        "corpus_presets": len(presets),
        "corpus_tried": tried,
        "corpus_not_asked": unasked,
        "corpus_folds_committed": committed,
        **per_preset,
    }


def chunks(rows: Sequence[dict[str, Any]]) -> list[list[Message]]:
    out = []
    for row in rows:
        messages = [m for m in row["messages"] if m["role"] != "system"]
        out += [messages[i : i + CHUNK] for i in range(0, len(messages), CHUNK)]
    return out


def quotes(part: Sequence[Message]) -> tuple[list[str], list[str]]:
    """The chunk's error lines and its assistant's refusal sentences, verbatim."""
    source = "\n".join(text_of(m) for m in part)
    errors = [e[:200] for e in extract_artifacts(source, kinds=["error"])]
    refusals = [
        sentence.strip()[:200]
        for m in part
        if m["role"] == "assistant"
        for sentence in re.split(r"(?<=[.!?])\s+", text_of(m))
        if _REFUSAL.search(normalized(sentence))
    ]
    return errors, refusals


def templated(part: Sequence[Message]) -> dict[str, str]:
    """Realistic summaries of a chunk quoting its errors and refusals, by template name."""
    goal = next((text_of(m)[:150] for m in part if m["role"] == "user"), "the task in progress")
    tools = sorted({c["function"]["name"] for m in part for c in (m.get("tool_calls") or ())}) or [
        "no tools"
    ]
    errors, refusals = quotes(part)
    out = {
        "episodic": f"I worked on: {goal}. I called {', '.join(tools)}. "
        + (f"Errors seen: {'; '.join(errors[:3])}. " if errors else "")
        + "Next: go on with what the user asked.",
    }
    if errors:
        out["opens_with_error"] = f"{errors[0]} - this stopped me while I worked on: {goal}."
        out["closes_with_error"] = (
            f"The user asked: {goal}. I used {', '.join(tools)}. The last error was: {errors[-1]}"
        )
    if refusals:
        out["quoted_refusal"] = f'I told the user "{refusals[0]}" The request was: {goal}.'
    sections = {
        "goal_arc": f"The user asked: {goal}",
        "human_direction": goal,
        "what_was_achieved": f"I called {', '.join(tools)}.",
        "dead_ends": "; ".join([*errors[:3], *refusals[:1]]),
        "lasting_constraints": "",
        "key_artifacts": ", ".join(tools),
    }
    out["goal_batch_json"] = json.dumps(sections)
    return out


def good_figures(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Good summaries of real chunks judged against them: tried and falsely rejected."""
    tried: Counter[str] = Counter()
    rejected: Counter[str] = Counter()
    samples: list[str] = []
    offline = OfflineModel(counter=COUNTER)
    with_quotes = 0
    for part in chunks(rows):
        entries = [Entry.of_message(LoggedMessage(i + 1, m, 0)) for i, m in enumerate(part)]
        source = transcript(entries)
        tokens = COUNTER.text(source)
        prompt: list[Message] = [{"role": "user", "content": f"Summarize.\n{material(source)}"}]
        answers = {"offline": offline.complete(prompt, max_tokens=MAX_TOKENS)}
        answers.update(
            {name: Completion(text, Usage("t")) for name, text in templated(part).items()}
        )
        with_quotes += any(quotes(part))
        for name, answer in answers.items():
            schema = GOAL_BATCH_SCHEMA if name == "goal_batch_json" else None
            if schema is not None:
                answer = Completion(answer.text, answer.usage, parse_json(answer.text))
            if COUNTER.text(answer.text) > tokens:
                continue  # longer than what it replaces: no good summary
            expected = Expected(source, MAX_TOKENS, COUNTER.text, tokens, schema)
            tried[name] += 1
            verdict = judge(answer, expected)
            if verdict.answer is None:
                rejected[name] += 1
                if len(samples) < 5:
                    samples.append(f"{name}: {verdict.reason}")
    figures: dict[str, Any] = {
        "chunks": len(chunks(rows)),
        "chunks_quoting_errors_or_refusals": with_quotes,
        "good_tried": sum(tried.values()),
        "good_falsely_rejected": sum(rejected.values()),
    }
    for name in tried:
        figures[f"good_tried_{name}"] = tried[name]
        figures[f"good_rejected_{name}"] = rejected[name]
    if samples:
        figures["rejected_samples"] = samples
    return figures


def main() -> None:
    args = parse_args(__doc__ or "")
    began = time.perf_counter()
    presets = (
        list(QUICK_PRESETS) if args.quick else [p for p in preset_names() if p not in NO_MODEL]
    )
    figures = corpus_figures(presets)
    rows = [
        *conversations("taubench_airline_dev", 20 if args.quick else None),
        *conversations("openhands_example"),
    ]
    figures.update(good_figures(rows))
    figures["seconds"] = round(time.perf_counter() - began, 1)
    report(figures, args.json)


if __name__ == "__main__":
    main()
