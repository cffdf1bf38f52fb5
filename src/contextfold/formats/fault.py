"""What a provider would refuse in a prompt, and the one tool-pairing rule every format shares.

Each format's checks (``openai_checks``, ``anthropic_checks``) yield
``PromptFault``s; tool pairing is ``units.tool_unit_faults`` for all of them,
run on the OpenAI-shaped messages a format's turns stand for, so a pairing
fault reads the same whichever provider would refuse it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.units import tool_unit_faults


@dataclass(frozen=True)
class PromptFault:
    """One thing a provider would refuse: where (message index, field) and why."""

    index: int | None
    field: str | None
    reason: str

    def __str__(self) -> str:
        return str(InvalidInput(self.reason, index=self.index, field=self.field))


def pairing_faults(
    shaped: Sequence[Mapping[str, Any]], where: Sequence[tuple[int, str | None]]
) -> Iterator[PromptFault]:
    """Tool pairing faults of ``shaped`` (OpenAI-shaped), reported at ``where`` (index, field).

    The one rule of ``tool_unit_faults``: every call answered in the run of
    results right after it, and no result that answers nothing in that run.
    """
    for k in tool_unit_faults(shaped):
        index, field = where[k]
        msg = shaped[k]
        if msg["role"] == "tool":
            yield PromptFault(
                index,
                field,
                f"result for id {msg['tool_call_id']!r} answers no call of the turn right "
                "before its results",
            )
            continue
        answered = set()
        for later in shaped[k + 1 :]:
            if later["role"] != "tool":
                break
            answered.add(str(later["tool_call_id"]))
        missing = [c["id"] for c in msg["tool_calls"] if c["id"] not in answered]
        yield PromptFault(index, field, f"call ids {missing} have no result right after their call")
