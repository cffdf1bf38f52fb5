"""Round compressor (seed 002, TaskWeaver's prompt compression).

Once ``rounds_to_compress + rounds_to_retain`` closed rounds come after the
last summary, and in a view with a budget once the prompt passes its high
water too, every one of them but the newest ``rounds_to_retain`` is
compressed (exactly ``rounds_to_compress`` when compaction keeps up without a
budget; see ``RoundCompressor`` for why a budget waits). The new
summary is written from the previous summary plus those rounds, and its fold
covers the view from its start through them, superseding the previous one.

The model answers JSON: ``{"ConversationSummary": ...}`` for planner views,
plus ``"Variables": [{name, type, description}]`` for code-generating views.
The code of the compressed rounds is not kept, only the variables it defined,
so later code can still refer to them. Only closed rounds are folded, never
the round in progress, and rounds never split a tool unit.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from contextfold.core.errors import InvalidInput
from contextfold.core.folds import Fold
from contextfold.core.messages import Message
from contextfold.core.tokens import TokenCounter
from contextfold.core.units import round_spans
from contextfold.llm.base import LLM, Completion
from contextfold.strategies.base import Job, ViewState, job_for, one_message_fold
from contextfold.strategies.checked import newest_within, summarize_checked, with_pins
from contextfold.strategies.lenient import Least
from contextfold.strategies.rolling import rounds_covered
from contextfold.strategies.templates import fill, load_template
from contextfold.strategies.transcript import material, transcript
from contextfold.strategies.triggers import Trigger

SUMMARY = "ConversationSummary"
VARIABLES = "Variables"
VARIABLE_FIELDS = ("name", "type", "description")
NO_SUMMARY = "None"
_STRING = {"type": "string"}
SCHEMAS: dict[str, dict[str, Any]] = {
    "planner": {
        "type": "object",
        "properties": {SUMMARY: _STRING},
        "required": [SUMMARY],
    },
    "code": {
        "type": "object",
        "properties": {
            SUMMARY: _STRING,
            VARIABLES: {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {f: _STRING for f in VARIABLE_FIELDS},
                    "required": list(VARIABLE_FIELDS),
                },
            },
        },
        "required": [SUMMARY, VARIABLES],
    },
}


@dataclass
class RoundCompressor:
    """Compress old rounds into a JSON summary; the newest rounds stay verbatim.

    The fold renders as a user message: TaskWeaver hands the summary to the
    model inside the first user message of the conversation, and quoting
    conversation keeps its trust instead of gaining a system prompt's
    authority. ``kind`` picks the planner or code-generator prompt and schema;
    ``prompt`` (a path or the template text, with ``{previous_summary}`` and
    ``{content}`` fields) overrides the prompt.

    When it fires: without a budget, as the seed says, once
    ``rounds_to_compress + rounds_to_retain`` closed rounds follow the summary
    (every ``rounds_to_compress`` rounds). A view with a budget also waits for
    the prompt to pass ``high_water`` of it (hysteresis, as every preset has):
    each call re-reads the prompt and the previous summary, which short rounds
    cannot amortize two at a time. Either way a cycle folds every closed round
    but the newest ``rounds_to_retain``, so ``rounds_to_compress`` is the
    smallest step and ``rounds_to_retain`` what stays verbatim. ``trigger``
    replaces both conditions.

    Deprecated: TaskWeaver's compaction redesign (seed 000, phase 3) replaces
    the round compressor with the rolling compactor, which folds in the
    background and keeps one summary per agent. It still works and warns
    (``DeprecationWarning``); ``docs/migrating-from-round-compressor.md`` says
    how to move.
    """

    rounds_to_compress: int = 2
    rounds_to_retain: int = 3
    kind: Literal["planner", "code"] = "planner"
    prompt: str | Path | None = None
    max_tokens: int = 1024
    attempts: int = 3
    trigger: Trigger | None = None
    name: str = "round_compressor"

    def __post_init__(self) -> None:
        warnings.warn(
            "RoundCompressor is deprecated in favour of RollingCompactor (seed 000, phase 3): "
            "see docs/migrating-from-round-compressor.md",
            DeprecationWarning,
            stacklevel=3,
        )
        if self.kind not in SCHEMAS:
            raise InvalidInput(f"kind must be planner or code, not {self.kind!r}", field="kind")

    def plan(self, state: ViewState) -> Job | None:
        closed = [r for r in state.unfolded_rounds if r.closed]
        retain = max(self.rounds_to_retain, 0)
        if self.trigger is None:
            ready = len(closed) >= max(self.rounds_to_compress, 1) + retain and (
                state.budget is None or state.above_high_water
            )
        else:
            ready = self.trigger(state)
        count = len(closed) - retain
        if not ready or count <= 0:
            return None
        return job_for(self.name, state, 0, closed[count - 1].last)

    def run(self, job: Job, llm: LLM, counter: TokenCounter) -> Sequence[Fold]:
        first = job.entries[0]
        previous = first.fold if first.fold is not None and first.fold.kind != "masked" else None
        rounds = [e for e in job.entries if previous is None or e is not first]
        done = rounds_covered(previous) if previous is not None else 0
        end = done + sum(r.has_user for r in round_spans(rounds))
        prompt = fill(
            load_template(f"round_compressor_{self.kind}", self.prompt),
            previous_summary=material(self._previous(previous)) if previous else NO_SUMMARY,
            content=material(transcript(rounds)),
        )
        messages: list[Message] = [{"role": "user", "content": prompt}]
        raw = [e for e in rounds if e.fold is None or e.fold.kind == "masked"]
        # The previous pins come first: the newest items win when pins run out of room.
        carried = self._pinned(previous) if previous is not None else []
        checked = summarize_checked(
            llm,
            messages,
            source="\n".join([*carried, transcript(raw)]),
            max_tokens=self.max_tokens,
            schema=SCHEMAS[self.kind],
            attempts=self.attempts,
            accept=self._accept,
            tokens_before=job.tokens_before,
            counter=counter,
            least=Least(SUMMARY, "Write only the conversation summary.", {VARIABLES: []}),
        )
        summary, variables = _parsed(checked.data)
        body = self._body(end, summary, variables)
        # The pins share the answer's token cap with the summary, as they share its fold.
        pinned = newest_within(
            checked.pinned,
            self.max_tokens - counter.text(body),
            cost=lambda item: counter.text(f"- {item}") + 1,
        )
        text = with_pins(body, pinned)
        message: Message = {"role": "user", "content": text}
        data: dict[str, Any] = {SUMMARY: summary}
        if self.kind == "code":
            data[VARIABLES] = variables
        data.update(
            kind=self.kind,
            rounds=[1, end],
            compressed_rounds=[done + 1, end],
            pinned=list(pinned),
            attempts=checked.attempts,
        )
        return [
            one_message_fold(
                job,
                self.name,
                message,
                counter,
                kind="summary",
                data=data,
                usage=checked.usage.to_dict(),
            )
        ]

    def _previous(self, fold: Fold) -> str:
        """The previous summary as TaskWeaver keeps it (the JSON answer), without its pins.

        The pins are carried over instead of re-read (``_pinned``): checked
        compaction pins each one again when the new answer leaves it out, so
        the model need not read them every cycle to keep them.
        """
        summary = fold.data.get(SUMMARY)
        if fold.strategy != self.name or not isinstance(summary, str):
            return fold.text
        previous: dict[str, Any] = {SUMMARY: summary}
        if self.kind == "code":
            previous[VARIABLES] = fold.data.get(VARIABLES) or []
        return json.dumps(previous, ensure_ascii=False, indent=2)

    def _pinned(self, fold: Fold) -> list[str]:
        """The pins of our previous summary (another fold's text is re-read whole)."""
        pinned = fold.data.get("pinned")
        if fold.strategy != self.name or not isinstance(pinned, list):
            return []
        return [str(item) for item in pinned]

    def _accept(self, completion: Completion) -> str | None:
        data = completion.data
        if not isinstance(data, Mapping):
            return None
        summary = data.get(SUMMARY)
        if not isinstance(summary, str) or not summary.strip():
            return f"answer has no {SUMMARY} text"
        if self.kind == "code" and not isinstance(data.get(VARIABLES, []), list):
            return f"{VARIABLES} is not a list"
        return None

    def _body(self, end: int, summary: str, variables: Sequence[Mapping[str, str]]) -> str:
        lines = [f"[Conversation Summary (Rounds 1-{end})]", summary.strip()]
        if self.kind == "code" and variables:
            lines += ["", "Variables:"]
            lines += [f"- {v['name']} ({v['type']}): {v['description']}" for v in variables]
        return "\n".join(lines)


def _parsed(data: Any) -> tuple[str, list[dict[str, str]]]:
    """The summary and the well-formed variables (each a named object) of an answer."""
    summary = str(data[SUMMARY]).strip()
    variables = [
        {f: str(item.get(f) or "unknown").strip() for f in VARIABLE_FIELDS}
        for item in data.get(VARIABLES) or []
        if isinstance(item, Mapping) and str(item.get("name") or "").strip()
    ]
    return summary, variables
