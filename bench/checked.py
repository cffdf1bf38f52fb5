"""Checked compaction: must-keep items kept with and without checking.

A scripted model "summarizes" chunks of real agent runs (tau-bench airline,
OpenHands) by returning the chunk's text with every must-keep item dropped at
random (probability ``--drop``), and now and then answers with an error text
instead. The same answers go through ``summarize_checked`` twice: without
pinning (what a plain summarizer commits) and with it. The share of the
chunk's must-keep items present in the fold text is reported for both, and so
is how many error answers became folds. A job the checked path drops keeps
its messages raw in the view, so its items count for neither share.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from _common import conversations, parse_args, report

from contextfold.core.entries import Entry
from contextfold.core.log import LoggedMessage
from contextfold.core.messages import Message
from contextfold.core.tokens import get_counter
from contextfold.extract.artifacts import missing_artifacts
from contextfold.llm.base import Completion
from contextfold.strategies.answers import Expected, judge
from contextfold.strategies.checked import SummaryRejected, must_keep_facts, summarize_checked
from contextfold.strategies.transcript import material, transcript
from contextfold.testing import ScriptedModel

CHUNK = 12
ERROR_ANSWER = "Error: upstream model overloaded, please retry later."


def chunks(rows: Sequence[dict[str, object]]) -> list[str]:
    """Transcripts of consecutive ``CHUNK``-message slices of each run."""
    out = []
    for row in rows:
        messages = [m for m in row["messages"] if m["role"] != "system"]  # type: ignore[index, union-attr]
        for first in range(0, len(messages), CHUNK):
            part = messages[first : first + CHUNK]
            entries = [Entry.of_message(LoggedMessage(i + 1, m, 0)) for i, m in enumerate(part)]
            out.append(transcript(entries))
    return out


def dropping_reply(rng: random.Random, drop: float, error_rate: float):  # type: ignore[no-untyped-def]
    """A reply function: the material with must-keep items dropped at random."""

    def reply(messages: Sequence[Message]) -> str:
        if rng.random() < error_rate:
            return ERROR_ANSWER
        # The material's message: a retry appends the rejected answer and a note after it.
        text = next(str(m["content"]) for m in messages if "<history>" in str(m["content"]))
        source = text.split("<history>\n", 1)[-1].rsplit("\n</history>", 1)[0]
        for item in sorted({f.text for f in must_keep_facts(source)}, key=len, reverse=True):
            if rng.random() < drop:
                source = re.sub(re.escape(item), "", source)
        return source[: 4 * 600]

    return reply


def main() -> None:
    args = parse_args(__doc__ or "")
    limit = 10 if args.quick else None
    rows = [*conversations("taubench_airline_dev", limit), *conversations("openhands_example")]
    texts = chunks(rows)
    drop, error_rate = 0.5, 0.1
    counter = get_counter()
    items_total = kept_plain = kept_checked = items_checked = 0
    errors_committed_plain = errors_committed_checked = rejected_jobs = retries = 0
    for seed, source in enumerate(texts):
        # A fact is kept when its value is (a pin shows it with its key).
        items = [f.text for f in must_keep_facts(source)]
        if not items:
            continue
        prompt: list[Message] = [{"role": "user", "content": f"Summarize.\n{material(source)}"}]
        plain = ScriptedModel(default=dropping_reply(random.Random(seed), drop, error_rate))
        answer: Completion = plain.complete(prompt, max_tokens=600)
        if judge(answer, Expected(source, 600, counter.text)).answer is None:
            errors_committed_plain += 1
        items_total += len(items)
        kept_plain += len(items) - len(missing_artifacts(items, answer.text))
        model = ScriptedModel(default=dropping_reply(random.Random(seed), drop, error_rate))
        try:
            checked = summarize_checked(model, prompt, source=source, max_tokens=600)
        except SummaryRejected:
            rejected_jobs += 1
            continue
        retries += checked.attempts - 1
        errors_committed_checked += checked.text.startswith(ERROR_ANSWER)
        items_checked += len(items)
        kept_checked += len(items) - len(missing_artifacts(items, checked.text))
    report(
        {
            "chunks": len(texts),
            "must_keep_items": items_total,
            "drop_probability": drop,
            "error_answer_rate": error_rate,
            "must_keep_share_unchecked": kept_plain / items_total,
            "must_keep_share_checked": kept_checked / items_checked,
            "error_answers_committed_unchecked": errors_committed_plain,
            "error_answers_committed_checked": errors_committed_checked,
            "jobs_dropped_checked": rejected_jobs,
            "retries_checked": retries,
        },
        args.json,
    )


if __name__ == "__main__":
    main()
