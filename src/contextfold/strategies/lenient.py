"""Reading JSON answers leniently, and asking for less when they are unusable.

Several strategies ask for one JSON object. Small local models answer it in a
fence, after a line of preamble, cut off at their token cap, nested one level
too deep, or in plain prose. Every strategy reads answers through here, so each
such answer is read the same way:

- ``object_in`` finds the object: the whole answer, a fence, the first object
  inside prose, or an object cut off (closed after its last whole member).
- A strategy that can use part of an answer says so with ``Least``: the one
  field it cannot do without (``key``) and what the other fields are when
  missing (``defaults``). ``read_answer`` then takes a partial object (the
  missing fields filled in) and an answer that is prose and no JSON at all
  as ``key``'s text when ``key`` is all the schema requires (one group of
  tool calls, a summary) or the request was the smaller one below.
- When the answer is still unusable, checked compaction asks for less from
  then on (``smaller_request``): ``Least.note`` names the smaller task (one
  group, the goal arc, the summary alone), answered in plain prose without a
  schema, so the request that failed is not sent again. Its answer is read
  into ``key``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from contextfold.core.messages import Message
from contextfold.llm.base import Completion, parse_json

ECHO_CHARS = 600
"""How much of a rejected answer a retry shows the model."""
_CUTS = 40
"""How many member boundaries, from the end, a cut-off object is tried closed at."""
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class Least:
    """What a strategy can use of a JSON answer, and the smaller request it retries with.

    ``key`` is the field it cannot do without, which a prose answer fills;
    ``defaults`` the other fields' values when an answer lacks them (a field
    absent from both is left out: tool-call groups fold the groups answered);
    ``note`` asks for the smaller task in plain prose.
    """

    key: str
    note: str
    defaults: Mapping[str, Any] = field(default_factory=dict)


def object_in(text: str) -> dict[str, Any] | None:
    """The JSON object of a model's answer: whole, fenced, inside prose, or cut off."""
    whole = parse_json(text)
    if isinstance(whole, dict):
        return whole
    start = text.find("{")
    while start >= 0:
        try:
            value: Any = _DECODER.raw_decode(text, start)[0]
        except ValueError:
            value = _closed(text[start:])
        if isinstance(value, dict) and value:
            return value
        start = text.find("{", start + 1)
    return None


def _closed(fragment: str) -> Any:
    """An object cut off by a token cap, closed after its last whole member.

    A string value cut off mid-sentence is taken only when it is the first member.
    """
    stack: list[str] = []
    cuts: list[tuple[int, str]] = []
    in_string = escaped = False
    for i, char in enumerate(fragment):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            stack.append("}" if char == "{" else "]")
        elif char in "}]":
            if not stack or stack.pop() != char or not stack:
                return None  # a mismatched or whole value: raw_decode already said no
        elif char == ",":
            cuts.append((i, "".join(reversed(stack))))
    closing = "".join(reversed(stack))
    # A string cut off mid-sentence is kept only when no whole member comes before it.
    tail = fragment.rstrip().removesuffix("\\") + ('"' if in_string else "") + closing
    tried = [] if in_string else [tail]
    tried += [fragment[:i] + closed for i, closed in reversed(cuts[-_CUTS:])]
    tried += [tail] if in_string else []
    for candidate in tried:
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    return None


def read_answer(
    completion: Completion, schema: Mapping[str, Any], least: Least | None, *, prose: bool = False
) -> Completion:
    """``completion`` with its ``data`` read leniently for ``schema`` (see the module docstring).

    ``prose``: the request asked for prose (the smaller one), which fills ``least.key``.
    """
    data = completion.data if isinstance(completion.data, dict) else object_in(completion.text)
    if least is None:
        return completion if data is None else replace(completion, data=data)
    if data is None:
        opening = completion.text.lstrip()[:1]
        if not opening or opening in "{[`" or parse_json(completion.text) is not None:
            return completion
        if not prose and list(schema.get("required") or ()) != [least.key]:
            return completion
        data = {least.key: completion.text.strip()}
    missing = {k: v for k, v in least.defaults.items() if k != least.key and k not in data}
    return replace(completion, data={**data, **missing})


def required_of(schema: Mapping[str, Any], least: Least | None) -> Mapping[str, Any]:
    """The schema an answer is checked against: with ``least``, only its key is required."""
    if least is None:
        return schema
    return {**schema, "required": [least.key]}


def smaller_request(answer: str, reason: str, limit: int, least: Least) -> list[Message]:
    """What a retry asking for less adds to the prompt: the rejected answer, the smaller task."""
    return [
        {"role": "assistant", "content": clipped(answer)},
        {
            "role": "user",
            "content": (
                f"That answer cannot be used: {reason}. {least.note} Answer in plain text, "
                f"no JSON, in at most {limit * 3 // 4} words."
            ),
        },
    ]


def clipped(answer: str) -> str:
    """A rejected answer as a retry shows it, at most ``ECHO_CHARS`` characters."""
    shown = answer.strip()
    if len(shown) > ECHO_CHARS:
        shown = shown[:ECHO_CHARS] + " [...]"
    return shown or "(no answer)"
