"""The model-free stand-in: an ``LLM`` that answers with key sentences.

Every model strategy runs without a model ("Without --model, model-free
stand-ins run and say so"): ``model_or_offline`` hands it an ``OfflineModel``,
whose usage names the model ``offline`` so reports and folds say what ran.

The answer is built from the material only: the ``<history>`` blocks of the
last user message (``strategies.transcript.material`` puts them there), or the
whole message when it has none; a block that is JSON (an earlier JSON summary)
is read as its strings. Instructions around the material are ignored.
Plain answers are the extractive selector's key sentences
(``salience.key_sentences``), shorter than the material as a summary would be
(see ``OfflineModel``).

With a ``schema`` the answer is JSON filled generically, by type:

* object: every property, filled by its own schema; an object with only
  ``additionalProperties`` is ``{}``;
* string: key sentences (all string fields share one selection, in order, so
  two fields never repeat each other); enum: its first value;
* array of strings: the must-keep items (``artifacts.extract_artifacts``), or
  key sentences when there are none;
* array of objects whose fields are all strings: one item per name assigned at
  the start of a line (``name = ...``, Python style, also after a transcript's
  ``[speaker]: `` and inside JSON-encoded strings such as tool-call
  arguments): the first field is the name, the last the assignment line,
  fields between ``unknown``. TaskWeaver's
  ``Variables: [{name, type, description}]`` comes out as ``{df, unknown,
  "df = pd.read_csv(...)"}``. Any other array of objects is ``[]``;
* number, integer, boolean, null: ``0``, ``0``, ``false``, ``null``;
* a string or array of strings whose schema names an extraction with
  ``"x-extract"`` (``extract.task_items.EXTRACTORS``: ``requests``,
  ``statement``, ``errors``, ``touched``, ``reasons``, ``open``, ``none``):
  what that extraction reads from the material, within the field's share of
  the cap, not of ``ratio`` (a string joins the items by lines, or opens the
  first when it is too long). The task state asks so for each section.

A prompt that summarizes several ranges at once gives each its own
``<history>`` block; an object schema with one string field for each of its
two or more blocks answers each field from its own block (``block_fields``).

Fields share the token cap equally after the JSON skeleton; text takes at most
``ratio`` of the material (see ``OfflineModel``), lists of objects the rest.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextfold.core.messages import Message, text_of
from contextfold.core.tokens import TokenCounter, get_counter
from contextfold.extract.artifacts import extract_artifacts
from contextfold.extract.salience import key_sentences
from contextfold.extract.task_items import EXTRACTORS
from contextfold.llm.base import HISTORY_CLOSE, HISTORY_OPEN, LLM, Completion, Usage

OFFLINE = "offline"
UNKNOWN = "unknown"
_HISTORY = re.compile(re.escape(HISTORY_OPEN) + r"\n?(.*?)\n?" + re.escape(HISTORY_CLOSE), re.S)
# ``name = value`` (or ``a, b = ...``) opening a line, after a transcript's
# ``[speaker]: `` or a ``>>>`` prompt if there is one.
_ASSIGNMENT = re.compile(
    r"^[ \t]*(?:\[[^\]\n]{1,80}\]:[ \t]*)?(?:>>>[ \t]*)?"
    r"(?P<line>(?P<names>[A-Za-z_]\w*(?:[ \t]*,[ \t]*[A-Za-z_]\w*)*)[ \t]*=(?!=)[ \t]*\S.*)$",
    re.M,
)
_JSON_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
_STRING: Mapping[str, Any] = {"type": "string"}
_SHRINK = 0.8
EXTRACT = "x-extract"
"""The schema keyword naming the extraction that fills a field (``EXTRACTORS``)."""
_FITS = 4


@dataclass
class OfflineModel:
    """An ``LLM`` that needs no model: key sentences, or JSON filled from them.

    Like a summarizer, it writes less than it read: its text (key sentences,
    string fields and lists of strings) takes at most ``ratio`` of the
    material's tokens (``min_tokens`` at least), the whole answer never more
    than ``max_tokens``. ``counter`` counts usage and caps answers; the approximate
    one is the default because the stand-in should cost nothing to build.
    """

    counter: TokenCounter = field(default_factory=lambda: get_counter("approx"))
    max_tokens: int = 1024
    ratio: float = 0.25
    min_tokens: int = 32
    must_share: float = 0.25
    name: str = OFFLINE

    def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        started = time.perf_counter()
        blocks = history_blocks(messages)
        source = "\n\n".join(blocks)
        cap = max(min(max_tokens or self.max_tokens, self.max_tokens), 1)
        data: Any = None
        fields = block_fields(schema, len(blocks)) if schema is not None else None
        if schema is None:
            text = key_sentences(
                source, min(cap, self._room(source)), self.counter, must_share=self.must_share
            )
        elif fields is not None:
            share = (cap - self.counter.text(json.dumps(dict.fromkeys(fields, "")))) // len(fields)
            data = {
                name: fill_schema(
                    _STRING, block, share, self.counter, text_tokens=self._room(block)
                )
                for name, block in zip(fields, blocks, strict=True)
            }
            text = json.dumps(data, ensure_ascii=False)
        else:
            data = fill_schema(schema, source, cap, self.counter, text_tokens=self._room(source))
            text = json.dumps(data, ensure_ascii=False)
        usage = Usage(
            OFFLINE,
            self.counter.messages(messages),
            self.counter.text(text),
            time.perf_counter() - started,
            1,
        )
        return Completion(text, usage, data)

    async def acomplete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        return self.complete(messages, max_tokens=max_tokens, schema=schema)

    def _room(self, source: str) -> int:
        """Tokens the text drawn from ``source`` may take: ``ratio`` of it, ``min_tokens`` at least."""
        return max(math.ceil(self.ratio * self.counter.text(source)), self.min_tokens)


def model_or_offline(llm: LLM | None, counter: TokenCounter | None = None) -> LLM:
    """``llm``, or the offline stand-in (counting with ``counter``) when there is none."""
    if llm is not None:
        return llm
    return OfflineModel() if counter is None else OfflineModel(counter=counter)


def history_of(messages: Sequence[Message]) -> str:
    """The material of a prompt: the last user message's ``<history>`` blocks, or all of it."""
    return "\n\n".join(history_blocks(messages))


def history_blocks(messages: Sequence[Message]) -> list[str]:
    """The last user message's non-empty ``<history>`` blocks, or the whole message as one."""
    users = [m for m in messages if m["role"] == "user"]
    last = users[-1] if users else (messages[-1] if messages else None)
    if last is None:
        return []
    text = text_of(last)
    found = _HISTORY.findall(text)
    if not found:
        return [text] if text else []
    return [b for b in (_readable(b.strip()) for b in found) if b]


def block_fields(schema: Mapping[str, Any], blocks: int) -> list[str] | None:
    """The string fields of an object schema that has one for each of ``blocks`` (two or more).

    Such a prompt summarizes several ranges at once, one block each, and
    each field answers for its own block.
    """
    fields = _string_fields(_first_option(schema))
    return fields if fields is not None and len(fields) == blocks > 1 else None


def _readable(block: str) -> str:
    """A block holding JSON (an earlier JSON summary) as its strings, one paragraph each."""
    if not block.startswith(("{", "[")):
        return block
    try:
        data = json.loads(block)
    except ValueError:
        return block
    return "\n\n".join(_strings(data))


def _strings(data: Any) -> list[str]:
    if isinstance(data, str):
        return [data] if data.strip() else []
    if isinstance(data, Mapping):
        return [s for value in data.values() for s in _strings(value)]
    if isinstance(data, list):
        return [s for value in data for s in _strings(value)]
    return []


def fill_schema(
    schema: Mapping[str, Any],
    source: str,
    max_tokens: int,
    counter: TokenCounter,
    *,
    text_tokens: int | None = None,
) -> Any:
    """A value of ``schema`` filled from ``source`` within ``max_tokens``.

    Fields share what the JSON skeleton leaves equally; text fields (strings,
    lists of strings) take ``text_tokens`` at most between them, and lists of
    objects get what the text leaves.
    """
    texts, rows = _slots(schema)
    skeleton = counter.text(json.dumps(_Filler(source, counter, 0, 0, 0).value(schema)))
    left = max(max_tokens - skeleton, 0)
    text_share = extract_share = left // max(texts + rows, 1)
    if text_tokens is not None and texts:
        text_share = min(text_share, text_tokens // texts)
    row_share = (left - text_share * texts) // rows if rows else 0
    data = None
    for _ in range(_FITS):
        filler = _Filler(source, counter, text_share, texts, row_share, extract_share)
        data = filler.value(schema)
        if counter.text(json.dumps(data, ensure_ascii=False)) <= max_tokens:
            return data
        text_share, row_share = int(text_share * _SHRINK), int(row_share * _SHRINK)
        extract_share = int(extract_share * _SHRINK)
    return _Filler(source, counter, 0, 0, 0).value(schema)


def assignments(source: str) -> list[tuple[str, str]]:
    """``(name, line)`` for each name assigned in ``source``, first seen first, last line kept.

    JSON-encoded strings (tool-call arguments, an earlier JSON summary) are
    decoded and searched too, so code inside them counts.
    """
    texts = [source]
    for raw in _JSON_STRING.findall(source):
        if "\\n" in raw or "=" in raw:
            try:
                texts.append(json.loads(f'"{raw}"'))
            except ValueError:
                continue
    found: dict[str, str] = {}
    for text in texts:
        for match in _ASSIGNMENT.finditer(text):
            line = match.group("line").strip()
            for name in re.split(r"[ \t]*,[ \t]*", match.group("names")):
                found[name] = line
    return list(found.items())


def _type(schema: Mapping[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
    if kind is None and isinstance(schema.get("properties"), Mapping):
        return "object"
    if kind is None:
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                return _type(options[0])
    return kind if isinstance(kind, str) else None


def _first_option(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if "type" not in schema and isinstance(options, list) and options:
            return _first_option(options[0])
    return schema


def _string_fields(item: Mapping[str, Any]) -> list[str] | None:
    """The field names of an object schema whose fields are all strings, else None."""
    properties = item.get("properties")
    if _type(item) != "object" or not isinstance(properties, Mapping) or not properties:
        return None
    if all(_type(p) == "string" for p in properties.values()):
        return list(properties)
    return None


def _slots(schema: Mapping[str, Any]) -> tuple[int, int]:
    """How many text fields and lists of objects take a share of the token cap."""
    schema = _first_option(schema)
    kind = _type(schema)
    if "enum" in schema:
        return 0, 0
    if kind == "object":
        counts = [_slots(p) for p in (schema.get("properties") or {}).values()]
        return sum(t for t, _ in counts), sum(r for _, r in counts)
    if kind == "string":
        return 1, 0
    if kind == "array":
        items = schema.get("items") or {}
        if _type(items) == "string":
            return 1, 0
        if _string_fields(items) is not None:
            return 0, 1
    return 0, 0


class _Filler:
    """Fills one schema; string fields draw in turn from one selection of sentences."""

    def __init__(
        self,
        source: str,
        counter: TokenCounter,
        share: int,
        slots: int,
        row_share: int,
        extract_share: int = 0,
    ) -> None:
        self.source = source
        self.counter = counter
        self.share = share
        self.row_share = row_share
        # Extractions are already a choice, not a summary: the material's ``ratio`` is not theirs.
        self.extract_share = extract_share
        self.pool: deque[str] = deque(
            key_sentences(source, share * slots, counter).splitlines() if share > 0 else ()
        )

    def value(self, schema: Mapping[str, Any]) -> Any:
        schema = _first_option(schema)
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return enum[0]
        kind = _type(schema)
        extraction = EXTRACTORS.get(str(schema.get(EXTRACT)))
        if extraction is not None and kind in ("string", "array"):
            items = self.within(extraction(self.source), self.extract_share)
            if not items and self.extract_share > 0 and kind == "string":
                found = extraction(self.source)  # one item too long for the share: its opening
                items = (
                    [found[0][: self.extract_share * 3].rsplit(" ", 1)[0] + " [...]"]
                    if found
                    else []
                )
            return "\n".join(items) if kind == "string" else items
        if kind == "object":
            properties = schema.get("properties") or {}
            return {name: self.value(sub) for name, sub in properties.items()}
        if kind == "string":
            return self.text()
        if kind == "array":
            return self.array(schema.get("items") or {})
        if kind in ("number", "integer"):
            return 0
        if kind == "boolean":
            return False
        return None

    def text(self) -> str:
        taken: list[str] = []
        used = 0
        while self.pool:
            cost = self.counter.text(self.pool[0]) + 1
            if taken and used + cost > self.share:
                break
            taken.append(self.pool.popleft())
            used += cost
        return "\n".join(taken)

    def array(self, items: Mapping[str, Any]) -> list[Any]:
        if _type(items) == "string":
            if self.share <= 0:
                return []
            found = extract_artifacts(self.source)
            if not found:
                found = key_sentences(self.source, self.share, self.counter).splitlines()
            return self.within(found, self.share)
        fields = _string_fields(items)
        if fields is None:
            return []
        rows: list[dict[str, str]] = []
        for name, line in assignments(self.source):
            row = {f: UNKNOWN for f in fields}
            row[fields[-1]] = line
            row[fields[0]] = name
            rows.append(row)
        return self.within(rows, self.row_share)

    def within(self, values: Sequence[Any], share: int) -> list[Any]:
        """The leading ``values`` that fit ``share``."""
        out: list[Any] = []
        used = 0
        for value in values:
            cost = self.counter.text(json.dumps(value, ensure_ascii=False)) + 1
            if used + cost > share:
                break
            out.append(value)
            used += cost
        return out
