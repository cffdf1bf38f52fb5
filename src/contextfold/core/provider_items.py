"""What a provider's own compaction made, kept in a fold, and to whom it is shown.

Anthropic (on-demand compaction) and OpenAI (``/responses/compact``) summarize
a conversation on their side and hand back items only they can read: a signed
``compaction`` block, an ``encrypted_content`` item. A fold keeps them verbatim
in ``data["provider"]`` with the provider and model that made them; its
``messages`` stay plain text, which every other target reads.

A prompt rendered for the provider that made them shows the fold as one
assistant message whose ``meta`` carries the items (``meta["openai"]["items"]``,
``meta["anthropic"]["content"]``) and the fold's id (``["fold"]``): the only
``meta`` render keeps, so a wire translator can send the items as they came,
and a caller whose provider refused them knows which fold to mark. The
message's ``content`` is the plain text, for a translator that knows nothing of
them. A prompt for anyone else, or for no one (``None``), gets the plain
messages. Once the provider refuses its items, the fold is superseded by one
whose items are marked refused and whose messages are the view's own summary of
the same range (``refused_fold``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable

from contextfold.core.errors import InvalidInput
from contextfold.core.folds import Fold
from contextfold.core.messages import Message, for_model

ProviderName = Literal["anthropic", "openai"]
COMPACTION_PROVIDERS: tuple[ProviderName, ...] = ("anthropic", "openai")


@dataclass(frozen=True)
class ProviderCompacted:
    """A provider's compaction of some messages.

    ``items`` go back to that provider exactly as they came; ``summary`` is the
    readable text among them (None when they are opaque); ``usage`` is what the
    call cost (``model``, ``input_tokens``, ``output_tokens``, ``calls``, ...).
    """

    provider: ProviderName
    model: str
    items: tuple[Mapping[str, Any], ...]
    summary: str | None
    usage: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Compacts(Protocol):
    """A model that can ask its provider to compact messages on the provider's side."""

    def compact(
        self,
        messages: Sequence[Message],
        *,
        provider: ProviderName,
        model: str | None = None,
        instructions: str | None = None,
        max_tokens: int | None = None,
    ) -> ProviderCompacted: ...


def payload_of(fold: Fold) -> Mapping[str, Any] | None:
    """The provider's items a fold keeps, with who made them, or None."""
    payload = fold.data.get("provider")
    return payload if isinstance(payload, Mapping) else None


def usable_for(fold: Fold, target: str | None) -> bool:
    """Whether ``fold`` renders as its provider's items for ``target``: the same
    provider made them, it has not refused them, and there are some."""
    payload = payload_of(fold)
    if target is None or payload is None or payload.get("refused"):
        return False
    items = payload.get("items")
    return payload.get("name") == target and isinstance(items, list) and bool(items)


def for_target(fold: Fold, target: str | None, *, leading: bool = True) -> Fold:
    """``fold`` as a prompt for ``target`` shows it: its provider's items in the
    message's ``meta`` and their cost as its tokens, or the fold as it is.

    Anthropic takes its block only first in ``messages`` (a 400,
    ``compaction_block_misplaced``, otherwise), so a fold that does not lead
    the prompt (``leading``) renders plain for it.
    """
    if not usable_for(fold, target) or (target == "anthropic" and not leading):
        return fold
    payload = payload_of(fold) or {}
    items = list(payload["items"])
    carried: dict[str, Any] = {"items": items} if target == "openai" else {"content": items}
    carried["fold"] = fold.id
    message: Message = {
        "role": "assistant",
        "content": fold.text,
        "meta": {str(target): carried},
    }
    tokens = payload.get("tokens")
    cost = tokens if isinstance(tokens, int) and tokens >= 0 else fold.tokens_after
    return replace(fold, messages=(message,), tokens_after=cost)


def folds_for(
    folds: Sequence[Fold], target: str | None, *, first_seq: int, facts: Fold | None
) -> list[Fold]:
    """Active in-place ``folds`` as a prompt for ``target`` shows them; the one that
    starts at ``first_seq``, right after the system prompt, leads it unless a
    facts fold comes first."""
    if target is None:
        return list(folds)
    return [for_target(f, target, leading=f.start == first_seq and facts is None) for f in folds]


def for_prompt(message: Mapping[str, Any]) -> Message:
    """A fold's message as a prompt carries it: without ``meta``, except the items
    a provider made, which only a prompt rendered for that provider holds."""
    out = for_model(message)
    meta = message.get("meta")
    if isinstance(meta, Mapping):
        kept = {k: v for k, v in meta.items() if k in COMPACTION_PROVIDERS}
        if kept:
            out["meta"] = kept
    return out


def provider_items(message: Mapping[str, Any], provider: ProviderName) -> list[Any] | None:
    """The items ``provider`` made that a rendered message carries, or None: what a
    wire translator sends in the message's place."""
    meta = message.get("meta")
    carried = meta.get(provider) if isinstance(meta, Mapping) else None
    if not isinstance(carried, Mapping):
        return None
    items = carried.get("items" if provider == "openai" else "content")
    return list(items) if isinstance(items, list) else None


def carried_folds(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """The ids of the folds whose provider items a rendered prompt carries: what to
    pass to ``View.refuse_provider_items`` when the provider refuses the prompt."""
    out: list[str] = []
    for message in messages:
        meta = message.get("meta")
        for provider in COMPACTION_PROVIDERS:
            carried = meta.get(provider) if isinstance(meta, Mapping) else None
            if isinstance(carried, Mapping) and isinstance(carried.get("fold"), str):
                out.append(carried["fold"])
    return out


def refused_fold(fold: Fold, reason: str) -> Fold:
    """The fold that replaces ``fold`` once its provider refused its items: the same
    range, the items kept for audit but marked refused, and the view's own summary
    (``data["fallback"]``) as its messages when it had one apart."""
    payload = payload_of(fold)
    if payload is None or not payload.get("items"):
        raise InvalidInput(f"fold {fold.id} keeps no provider items", field="fold_id")
    if payload.get("refused"):
        raise InvalidInput(f"fold {fold.id}'s provider items are refused already", field="fold_id")
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput("say why the provider refused the items", field="reason")
    data = {k: v for k, v in fold.data.items() if k != "fallback"}
    data["provider"] = {**payload, "refused": reason, "refused_at": time.time()}
    messages, tokens = fold.messages, fold.tokens_after
    fallback = fold.data.get("fallback")
    if isinstance(fallback, Mapping) and isinstance(fallback.get("messages"), list):
        messages = tuple(fallback["messages"])
        tokens = int(fallback.get("tokens", tokens))
    return replace(
        fold,
        id=uuid.uuid4().hex,
        created_at=time.time(),
        text=str(messages[0].get("content") or ""),
        messages=messages,
        tokens_after=tokens,
        data=data,
        superseded_by=None,
    )
