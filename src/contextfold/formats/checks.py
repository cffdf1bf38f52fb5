"""Whether a prompt is one a provider accepts, before it is sent.

A provider answers a malformed prompt with an HTTP 400, after the upload and
the wait. ``prompt_faults`` finds the same faults first, each naming the
message index and field; ``check_prompt`` raises the first as ``InvalidInput``.
Each provider's rules are its own module (``openai_checks``,
``anthropic_checks``), listed in ``CHECKS``: a new format's checks are one more
module and one more line here.

Not checked: what depends on the request beyond its messages (the ``tools``
list, the model's own limits) and provider features contextfold never writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.formats.anthropic_checks import anthropic_faults
from contextfold.formats.fault import PromptFault
from contextfold.formats.openai_checks import openai_faults

FaultCheck = Callable[[Sequence[Any], Any], Iterator[PromptFault]]
"""``check(messages, system)``: the faults of a prompt already known to be a list."""

CHECKS: dict[str, FaultCheck] = {"openai": openai_faults, "anthropic": anthropic_faults}
PROVIDERS = tuple(CHECKS)


def prompt_faults(
    messages: Sequence[Mapping[str, Any]],
    provider: str = "openai",
    *,
    system: str | Sequence[Mapping[str, Any]] | None = None,
) -> list[PromptFault]:
    """Every fault ``provider`` would refuse ``messages`` for (empty: it accepts them).

    ``system`` is Anthropic's system parameter; OpenAI keeps its system prompt
    among the messages and refuses one apart (``InvalidInput``).
    """
    if provider not in PROVIDERS:
        raise InvalidInput(
            f"unknown provider {provider!r} (expected one of {', '.join(PROVIDERS)})",
            field="provider",
        )
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        return [PromptFault(None, "messages", "messages must be a list")]
    return list(CHECKS[provider](messages, system))


def check_prompt(
    messages: Sequence[Mapping[str, Any]],
    provider: str = "openai",
    *,
    system: str | Sequence[Mapping[str, Any]] | None = None,
) -> None:
    """Raise ``InvalidInput`` for the first fault ``prompt_faults`` finds, if any."""
    faults = prompt_faults(messages, provider, system=system)
    if faults:
        first = faults[0]
        more = f" ({len(faults) - 1} more faults)" if len(faults) > 1 else ""
        raise InvalidInput(
            f"{provider} would refuse this prompt: {first.reason}{more}",
            index=first.index,
            field=first.field,
        )
