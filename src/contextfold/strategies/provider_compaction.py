"""The provider's own compaction, stored as a fold over its range.

Anthropic (on-demand compaction) and OpenAI (``/responses/compact``) can
summarize a conversation themselves, into items only they read back. Used
directly, they drop the raw history from the client's hands; here the raw
range stays in the log (recall, search and the page still see it), and what
the provider returns becomes one fold over that range:

- ``data["provider"]`` keeps the items verbatim with the provider and model that
  made them, what they cost in a prompt (``tokens``) and what the call cost;
- ``messages`` are plain text every other target reads: the provider's summary
  when it is readable (Anthropic's block), else the fallback's own summary;
- the fallback strategy's summary of the same range is made up front, in the
  same job, and kept (``data["fallback"]`` when the messages are the
  provider's), so falling back later, when the provider refuses its items
  (``View.refuse_provider_items``), never calls a model at render.

The fallback (default: the rolling compactor) also decides when and what to
fold: its ``plan`` is this strategy's plan, so the range is always one its own
summary can stand for. When the provider's compaction fails or the view's model
cannot ask for it, the fold is the fallback's alone, and ``data["provider"]``
says why (``error``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from contextfold.core.entries import Entry
from contextfold.core.errors import InvalidInput, ModelError
from contextfold.core.folds import Fold, labelled
from contextfold.core.messages import Message, for_model
from contextfold.core.provider_items import (
    COMPACTION_PROVIDERS,
    Compacts,
    ProviderCompacted,
    ProviderName,
    for_target,
)
from contextfold.core.tokens import TokenCounter
from contextfold.core.units import answer_missing
from contextfold.formats.provider_compaction import items_tokens
from contextfold.llm.base import LLM
from contextfold.strategies.base import Job, Strategy, ViewState
from contextfold.strategies.registry import strategy_from_data, strategy_to_data

TYPE_NAME = "provider-compaction"


def _rolling() -> dict[str, Any]:
    return {"type": "rolling"}


@dataclass
class ProviderCompaction:
    """Ask ``provider`` to compact what ``fallback`` would fold, and keep both.

    ``provider`` is ``anthropic`` or ``openai`` and must be the view model's
    (its key and base URL are used); ``model`` names the model that compacts
    (default: the view's). ``fallback`` is a stored strategy, ``{"type":
    "rolling", "options": {...}}``, or a registered strategy object; it must
    make one fold over the whole range it plans. ``instructions`` replace the
    provider's own summarization prompt; ``max_tokens`` caps Anthropic's call
    (thinking included).
    """

    provider: ProviderName
    model: str | None = None
    fallback: Mapping[str, Any] | Strategy = field(default_factory=_rolling)
    instructions: str | None = None
    max_tokens: int = 4096
    name: str = TYPE_NAME

    def __post_init__(self) -> None:
        if self.provider not in COMPACTION_PROVIDERS:
            raise InvalidInput(
                f"provider must be one of {', '.join(COMPACTION_PROVIDERS)}, not {self.provider!r}",
                field="provider",
            )
        if not isinstance(self.fallback, Mapping):
            self.fallback = strategy_to_data(self.fallback, "fallback")
        if self.fallback.get("type") == TYPE_NAME:
            raise InvalidInput("the fallback is the view's own summarizer", field="fallback.type")
        self._own = strategy_from_data(self.fallback, "fallback")
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise InvalidInput("max_tokens is a positive integer", field="max_tokens")

    def plan(self, state: ViewState) -> Job | None:
        job = self._own.plan(state)
        if job is None:
            return None
        system = [for_model(m.message) for m in state.system]
        return replace(job, strategy=self.name, params={**job.params, "system": system})

    def run(self, job: Job, llm: LLM, counter: TokenCounter) -> Sequence[Fold]:
        payload: dict[str, Any]
        try:
            compacted: ProviderCompacted | None = self._compact(job, llm, counter)
        except ModelError as exc:
            compacted = None
            payload = {"name": self.provider, "model": self.model, "items": [], "error": str(exc)}
        own = self._own_fold(job, llm, counter)
        if compacted is not None:
            payload = {
                "name": compacted.provider,
                "model": compacted.model,
                "items": [dict(item) for item in compacted.items],
                "summary": compacted.summary,
                "tokens": items_tokens(compacted, counter),
                "usage": dict(compacted.usage),
                "refused": None,
            }
        own = replace(own, strategy=self.name, usage=_with_call(own.usage, compacted))
        if compacted is None or compacted.summary is None:
            return [replace(own, data={**own.data, "provider": payload})]
        summary: Message = {"role": own.messages[0]["role"], "content": compacted.summary}
        message = labelled(summary, own.start, own.end)
        kept = {"messages": list(own.messages), "tokens": own.tokens_after}
        return [
            replace(
                own,
                text=compacted.summary,
                messages=(message,),
                tokens_after=counter.message(message),
                data={**own.data, "provider": payload, "fallback": kept},
            )
        ]

    def _compact(self, job: Job, llm: LLM, counter: TokenCounter) -> ProviderCompacted:
        if not isinstance(llm, Compacts):
            raise ModelError(f"{llm.name} cannot ask a provider to compact")
        sent = [*job.params.get("system", []), *self._messages(job.entries, counter)]
        return llm.compact(
            sent,
            provider=self.provider,
            model=self.model,
            instructions=self.instructions,
            max_tokens=self.max_tokens,
        )

    def _messages(self, entries: Sequence[Entry], counter: TokenCounter) -> list[Message]:
        """The range as the provider is sent it: an earlier fold of its own first, as
        its items (compacting again summarizes the old summary and what follows),
        every call answered, as a prompt would have it."""
        out: list[Message] = []
        for entry in reversed(list(answer_missing(reversed(entries), counter))):
            if entry.fold is not None:
                shown = for_target(entry.fold, self.provider, leading=not out)
                out.extend(dict(m) for m in shown.messages)
            else:
                out.extend(for_model(m) for m in entry.messages)
        return out

    def _own_fold(self, job: Job, llm: LLM, counter: TokenCounter) -> Fold:
        """The fallback's one fold over the whole range."""
        folds = list(self._own.run(replace(job, strategy=self._own.name), llm, counter))
        if len(folds) != 1 or (folds[0].start, folds[0].end) != (job.start, job.end):
            raise InvalidInput(
                f"the fallback {self._own.name!r} must make one fold over {job.start}..{job.end}",
                field="fallback",
            )
        return folds[0]


def _with_call(
    usage: Mapping[str, Any] | None, compacted: ProviderCompacted | None
) -> Mapping[str, Any] | None:
    """The fold's usage: its own summary's calls and the provider's compaction call,
    so the cycle's figures count both."""
    if compacted is None:
        return usage
    total = dict(usage or {"model": compacted.model})
    for key in ("input_tokens", "output_tokens", "latency_s", "calls"):
        total[key] = total.get(key, 0) + compacted.usage.get(key, 0)
    return total
