"""Token budget (seed 003, a chat backend's memory plan): important data plus a growing summary.

When the view passes its threshold, the newest messages that fit the keep
window stay verbatim (never splitting a tool unit, always keeping the latest
user message) and everything before them is folded, down to the low-water
mark of the threshold (see ``TokenBudget``). One model call answers one JSON
object: the seed's important-data fields and ``conversation_summary``. Both
of the seed's steps read the same new messages, so asking once halves what a
cycle reads. One job makes two folds, committed together:

- a facts fold (kind ``important_data``) rendered right after the system
  prompt: the answer's important data (preferences, decisions, facts, URLs,
  document structure, entities, custom fields), merged into the previous
  cycle's with ``merge_important_data`` and kept within ``data_tokens``;
- an in-place summary fold over the folded range, superseding the previous
  one. It is incremental as in the seed's orchestration: the model gets the
  previous summary and only the messages folded since, with a word target that
  grows with the summary version (``summary_words``).

Render then gives the seed's prompt order: system, important data, summary,
recent messages. Both folds carry the seed's cycle record in their data
(``summary_version``, ``last_summarized_at``, ``messages_summarized_count``,
``last_keep_window_index``, the seq the keep window starts at), so the record
survives as long as the folds do and needs no storage of its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from contextfold.core.entries import Entry
from contextfold.core.errors import InvalidInput
from contextfold.core.folds import Fold
from contextfold.core.messages import Message
from contextfold.core.tokens import TokenCounter
from contextfold.extract.artifacts import missing_artifacts
from contextfold.llm.base import LLM, Completion
from contextfold.strategies.base import Job, ViewState, job_for, keep_start, one_message_fold
from contextfold.strategies.checked import newest_within, summarize_checked, with_pins
from contextfold.strategies.lenient import Least
from contextfold.strategies.pipeline import Pipeline
from contextfold.strategies.templates import fill, load_template
from contextfold.strategies.transcript import material, transcript
from contextfold.strategies.triggers import Trigger

DATA_HEADER = "[IMPORTANT DATA FROM PREVIOUS CONVERSATIONS]"
SUMMARY_HEADER = "[CONVERSATION SUMMARY]"
NO_PREVIOUS_SUMMARY = "none (this is the first summary)"
OBJECT_FIELDS = ("user_preferences", "document_structure", "custom_fields")
LIST_FIELDS = ("key_decisions", "important_facts", "source_urls", "entities")
FIELDS = (
    "user_preferences",
    "key_decisions",
    "important_facts",
    "source_urls",
    "document_structure",
    "entities",
    "custom_fields",
)
SUMMARY_FIELD = "conversation_summary"
SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        **{
            name: {"type": "object"}
            if name in OBJECT_FIELDS
            else {"type": "array", "items": {"type": "string"}}
            for name in FIELDS
        },
        SUMMARY_FIELD: {"type": "string"},
    },
    "required": [SUMMARY_FIELD],
    "additionalProperties": False,
}
SEED_THRESHOLD = 3000
# Words to tokens, with room to spare: an answer is capped at about four
# characters a token, and English prose runs about six characters a word.
TOKENS_PER_WORD = 2


def summary_words(version: int) -> tuple[int, int]:
    """The seed's word target for summary ``version``: 100-150, 200-250, ... capped at 500-750."""
    if version < 1:
        raise InvalidInput(f"summary versions start at 1, not {version}", field="summary_version")
    if version >= 5:
        return (500, 750)
    return (100 * version, 100 * version + 50)


def merge_important_data(previous: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """``new`` merged into ``previous``: the seed's rule, applied at every depth.

    Objects are merged key by key, lists are joined without duplicates in
    first-seen order (earlier cycles first, so chronology holds), and any other
    value is replaced by the newer one (a preference the user changed). A
    missing or null new value keeps the previous one.
    """
    merged: dict[str, Any] = dict(previous)
    for key, value in new.items():
        merged[key] = _merge_value(merged[key], value) if key in merged else value
    return merged


def _merge_value(old: Any, new: Any) -> Any:
    if new is None:
        return old
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        return merge_important_data(old, new)
    if isinstance(old, list) and isinstance(new, list):
        return _unique([*old, *new])
    return new


def _unique(items: Sequence[Any]) -> list[Any]:
    """Items without repeats, first occurrence kept; objects compare by content."""
    seen: set[str] = set()
    out: list[Any] = []
    for item in items:
        key = json.dumps(item, sort_keys=True, ensure_ascii=False)
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def important_data(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A model's extraction in the seed's shape: its fields in order, unknown keys kept in ``custom_fields``."""
    data: dict[str, Any] = {
        name: dict(raw[name]) if name in OBJECT_FIELDS else _unique(raw[name])
        for name in FIELDS
        if raw.get(name) is not None
    }
    extra = {k: v for k, v in raw.items() if k not in FIELDS and v is not None}
    if extra:
        data["custom_fields"] = {**data.get("custom_fields", {}), **extra}
    return data


def data_text(data: Mapping[str, Any]) -> str:
    """Important data as the model reads it: the seed's header and the non-empty fields as JSON."""
    shown = {k: v for k, v in data.items() if v not in (None, "", [], {})}
    return f"{DATA_HEADER}\n{json.dumps(shown, indent=2, ensure_ascii=False)}"


def within_tokens(
    data: Mapping[str, Any], tokens: int, counter: TokenCounter
) -> tuple[dict[str, Any], int]:
    """``data`` whose rendered text fits ``tokens``, and how many list items it lost.

    Merged data only grows, and it renders in every prompt, so it gets a
    budget as pins do: the longest list loses its oldest item first (lists
    are in first-seen order), until the text fits or no list is left. Objects
    are kept whole. The dropped items stay in the log and in earlier folds.
    """
    out = {k: list(v) if isinstance(v, list) else v for k, v in data.items()}
    dropped = 0
    while counter.text(data_text(out)) > tokens:
        lists = [v for v in out.values() if isinstance(v, list) and v]
        if not lists:
            break
        max(lists, key=len).pop(0)
        dropped += 1
    return out, dropped


def _answer_problem(completion: Completion) -> str | None:
    """Why an answer has the wrong shape (no summary, a list where an object belongs, ...)."""
    data = completion.data
    summary = data.get(SUMMARY_FIELD)
    if not isinstance(summary, str) or not summary.strip():
        return f"answer has no {SUMMARY_FIELD} text"
    for name in OBJECT_FIELDS:
        if data.get(name) is not None and not isinstance(data[name], Mapping):
            return f"{name} must be a JSON object"
    for name in LIST_FIELDS:
        if data.get(name) is not None and not isinstance(data[name], list):
            return f"{name} must be a JSON list"
    return None


@dataclass
class TokenBudget:
    """Fold all but a keep window of newest messages into important data and a summary.

    It fires when the view passes ``threshold_tokens``; without one, when it
    passes ``high_water`` of the view's budget (the budget is what the seed's
    3000 stood for), or the seed's 3000 when the view has no budget. A
    ``trigger`` replaces the test. A cycle folds the view down to the low mark
    of that level (``ViewState.low_mark``, of the budget when budget-driven):
    the keep window holds the newest units that fit both ``keep_tokens`` and
    what the low mark leaves beside the system prompt, the important data and
    the summary. The next cycle comes only once the view has grown back by the
    difference, so each call reads many new messages for its one prompt and
    one previous summary.

    ``prompt`` overrides the template (fields ``target_words``,
    ``previous_summary``, ``new_messages``), a path or the text.
    ``extraction_max_tokens`` is what the answer may spend on important data
    beside the summary's words; ``data_tokens`` caps the merged important data
    as rendered (the oldest list items go first, see ``within_tokens``).
    """

    threshold_tokens: int | None = None
    keep_tokens: int = 2500
    data_tokens: int = 500
    prompt: str | Path | None = None
    extraction_max_tokens: int = 1024
    trigger: Trigger | None = None
    name: str = "token-budget"

    def levels(self, state: ViewState) -> tuple[int, int]:
        """The token count the view fires above, and the low mark a cycle folds it down to."""
        if self.threshold_tokens is None and state.budget is not None:
            return state.high_mark(state.budget), state.low_mark(state.budget)
        threshold = SEED_THRESHOLD if self.threshold_tokens is None else self.threshold_tokens
        return threshold, state.low_mark(threshold)

    def plan(self, state: ViewState) -> Job | None:
        fire, low = self.levels(state)
        fired = self.trigger(state) if self.trigger is not None else state.tokens > fire
        if not state.entries or not fired:
            return None
        previous = self._previous_summary(state.entries[0])
        fresh = 1 if previous is not None else 0
        fixed = state.tokens - sum(e.tokens for e in state.entries[fresh:])
        keep = keep_start(state, min(self.keep_tokens, low - fixed))
        if keep <= fresh:
            return None
        facts = state.facts
        own_facts = facts is not None and facts.strategy == self.name
        keep_seq = (
            state.entries[keep].start if keep < len(state.entries) else state.entries[-1].end + 1
        )
        return job_for(
            self.name,
            state,
            0,
            keep - 1,
            version=int(previous.data["summary_version"]) + 1 if previous else 1,
            previous_summary=_unpinned(previous) if previous else None,
            previous_data=dict(facts.data["important_data"]) if facts and own_facts else {},
            previous_data_tokens=facts.tokens_after if facts and own_facts else 0,
            fresh=fresh,
            count=sum(self._messages_in(e) for e in state.entries[:keep]),
            keep_seq=keep_seq,
        )

    def run(self, job: Job, llm: LLM, counter: TokenCounter) -> Sequence[Fold]:
        version: int = job.params["version"]
        previous: str | None = job.params["previous_summary"]
        low, high = summary_words(version)
        answer = summarize_checked(
            llm,
            _ask(
                fill(
                    load_template("token_budget", self.prompt),
                    target_words=f"{low}-{high}",
                    previous_summary=material(previous) if previous else NO_PREVIOUS_SUMMARY,
                    new_messages=material(transcript(job.entries[job.params["fresh"] :])),
                )
            ),
            source=transcript(job.entries),
            max_tokens=TOKENS_PER_WORD * high + self.extraction_max_tokens,
            schema=SCHEMA,
            accept=_answer_problem,
            tokens_before=job.tokens_before + job.params["previous_data_tokens"],
            counter=counter,
            least=Least(SUMMARY_FIELD, "Write only the conversation summary."),
        )
        extracted = {k: v for k, v in answer.data.items() if k != SUMMARY_FIELD}
        merged = merge_important_data(job.params["previous_data"], important_data(extracted))
        merged, dropped = within_tokens(merged, self.data_tokens, counter)
        facts_text = data_text(merged)
        has_data = facts_text != data_text({})
        # A must-keep item already in the important data need not be pinned again.
        missing = missing_artifacts(answer.pinned, facts_text) if has_data else answer.pinned
        body = str(answer.data[SUMMARY_FIELD]).strip()
        # The pins share the summary's token cap with the text, as they share its fold.
        pinned = list(
            newest_within(
                missing,
                TOKENS_PER_WORD * high - counter.text(body),
                cost=lambda item: counter.text(f"- {item}") + 1,
            )
        )
        conversation_summary = with_pins(body, pinned)
        record = {
            "summary_version": version,
            "last_summarized_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "messages_summarized_count": job.params["count"],
            "last_keep_window_index": job.params["keep_seq"],
        }
        summary_message: Message = {
            "role": "user",
            "content": f"{SUMMARY_HEADER}\n{conversation_summary}",
        }
        # One call made both folds: its usage sits on the summary, so a commit counts it once.
        folds = [
            one_message_fold(
                job,
                self.name,
                summary_message,
                counter,
                kind="summary",
                data={
                    SUMMARY_FIELD: conversation_summary,
                    **record,
                    "target_words": [low, high],
                    "pinned": pinned,
                },
                usage=answer.usage.to_dict(),
            )
        ]
        if has_data:
            facts_message: Message = {"role": "user", "content": facts_text}
            folds.append(
                one_message_fold(
                    job,
                    self.name,
                    facts_message,
                    counter,
                    kind="important_data",
                    tokens_before=job.params["previous_data_tokens"],
                    placement="facts",
                    data={"important_data": merged, **record, "items_dropped": dropped},
                )
            )
        return folds

    def _previous_summary(self, entry: Entry) -> Fold | None:
        fold = entry.fold
        if fold is not None and fold.strategy == self.name and fold.kind == "summary":
            return fold
        return None

    def _messages_in(self, entry: Entry) -> int:
        """Log messages an entry stands for; an earlier summary of ours knows its own count."""
        if entry.fold is None:
            return 1
        if self._previous_summary(entry) is not None:
            return int(entry.fold.data["messages_summarized_count"])
        return entry.end - entry.start + 1


def _unpinned(summary: Fold) -> str:
    """A summary as the model reads it again: its pins are carried over without being re-read.

    They are part of the folded range, so checked compaction pins each one
    again when the new answer leaves it out (newest first within the budget).
    """
    pinned = summary.data.get("pinned") or []
    return str(summary.data[SUMMARY_FIELD]).removesuffix(with_pins("", pinned))


def _ask(prompt: str) -> list[Message]:
    return [{"role": "user", "content": prompt}]


def token_budget(**options: Any) -> Pipeline:
    """The seed-003 setup: important data and a progressive summary once past 3000 tokens."""
    return Pipeline([TokenBudget(**options)], name="token-budget")
