"""Probes: questions made from a conversation itself, for chats and agent runs without gold ones.

A probe is made without a model, deterministically, from the folded part of a
conversation: the messages before the shortest raw tail an arm's final prompt
ends with (what at least one arm had to fold at its budget), so that it asks
what compaction had to keep; an arm that still shows a probe's source raw
keeps it, and scores it. Four types, each a question, a gold answer and the
indexes of the messages it was made from:

- ``recall``: a fact stated in a user or assistant sentence (a number, a date,
  a name), asked as a blank to fill: the gold is the words blanked;
- ``artifact``: a path, URL or identifier touched (``extract.artifacts``),
  asked with the words around it: the gold is the item;
- ``continuation``: the last user request in the folded part and the
  assistant's last stated next step after it: what was being done and what
  came next;
- ``decision``: a sentence saying what was chosen and why (decided, chose,
  instead, because, going with, ...), its first words given, the rest the gold.

A probe's ``keys`` are the rare words of its gold the question does not give
away (``retention.key_words``); a probe without keys is not made. Exact match
(``exact_match``) is at least half of the keys in a text: in the compacted prompt
it is the offline grade (retention), in an answer the check the judge is
measured against. Probes are balanced over the types, taken evenly spread
through the folded part.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from contextfold.core.messages import Message, text_of
from contextfold.evaluation.retention import STOPWORDS, key_words, word_set
from contextfold.extract.artifacts import find_artifacts, sentences

PROBE_TYPES = ("recall", "artifact", "continuation", "decision")
ARTIFACT_KINDS = ("path", "url", "identifier", "ticket", "code", "hex")
BLANK = "____"
_CONTEXT_WORDS = 12
"""Words either side of a blanked item a question shows."""
_SENTENCE_WORDS = 5
"""A fact's sentence has at least this many words (a heading gives no context to ask by)."""
_LEAD_WORDS = 2
"""A decision's question shows at least this many words before the blank."""

_DECISION = re.compile(
    r"\b(decided|decide to|chose|choose|chosen|instead of|instead|because|going with|"
    r"go with|opted|settled on|picked|we'll use|let's use)\b",
    re.IGNORECASE,
)
_NEXT_STEP = re.compile(
    r"\b(next|then|i'll|i will|let me|now i|going to|after that|plan is)\b", re.IGNORECASE
)
_NAME = re.compile(r"(?<=[a-z,;:] )[A-Z][a-zA-Z]{2,}\b(?: [A-Z][a-zA-Z]{2,}\b)*")
_FACT_KINDS = ("date", "time", "money", "quantity", "number", "code")


@dataclass(frozen=True)
class Probe:
    """One question made from the conversation, with its gold answer and where it came from."""

    id: str
    type: str
    question: str
    gold: str
    keys: tuple[str, ...]
    sources: tuple[int, ...]
    """0-based indexes of the messages it was made from."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Probe:
        return cls(
            str(data["id"]),
            str(data["type"]),
            str(data["question"]),
            str(data["gold"]),
            tuple(data["keys"]),
            tuple(data["sources"]),
        )


def exact_match(keys: Sequence[str] | set[str], text: str) -> bool:
    """Exact match: at least half of ``keys`` (rounded up) are words of ``text``."""
    if not keys:
        return False
    found = len(set(keys) & word_set(text))
    return 2 * found >= len(keys)


def make_probes(messages: Sequence[Message], folded: int, limit: int) -> list[Probe]:
    """At most ``limit`` probes from ``messages[:folded]``, balanced over the types."""
    if limit <= 0 or folded <= 0:
        return []
    df = Counter(w for m in messages for w in word_set(text_of(m)))
    rare = max(3.0, 0.01 * len(messages))
    part = list(messages[:folded])
    found = {
        "recall": _recall(part),
        "artifact": _artifact(part),
        "continuation": _continuation(part),
        "decision": _decision(part),
    }
    keyed: dict[str, list[Probe]] = {}
    for kind, drafts in found.items():
        keyed[kind] = []
        seen: set[str] = set()
        for question, gold, sources in drafts:
            keys = key_words({"question": question, "answer": gold}, df, rare)
            if keys and gold not in seen:
                seen.add(gold)
                number = len(keyed[kind]) + 1
                keyed[kind].append(
                    Probe(f"{kind}-{number}", kind, question, gold, tuple(sorted(keys)), sources)
                )
    return _balanced(keyed, limit)


def _balanced(keyed: dict[str, list[Probe]], limit: int) -> list[Probe]:
    """Round-robin over the types; each type's probes taken evenly spread over the part."""
    share = {kind: 0 for kind in PROBE_TYPES}
    left = limit
    while left > 0:
        grew = False
        for kind in PROBE_TYPES:
            if left > 0 and share[kind] < len(keyed[kind]):
                share[kind] += 1
                left -= 1
                grew = True
        if not grew:
            break
    chosen: list[Probe] = []
    for kind in PROBE_TYPES:
        chosen.extend(_spread(keyed[kind], share[kind]))
    return chosen


def _spread(items: list[Probe], n: int) -> list[Probe]:
    if n >= len(items):
        return items
    return [items[(2 * k + 1) * len(items) // (2 * n)] for k in range(n)]


Draft = tuple[str, str, tuple[int, ...]]


def _spoken(part: Sequence[Message]) -> list[tuple[int, str]]:
    """User and assistant sentences with the index of their message."""
    return [
        (i, sentence)
        for i, m in enumerate(part)
        if m.get("role") in ("user", "assistant")
        for _, sentence in sentences(text_of(m))
    ]


def _blanked(sentence: str, start: int, end: int) -> str:
    """``sentence`` with ``[start:end]`` blanked, cut to the words around the blank."""
    before = sentence[:start].split()[-_CONTEXT_WORDS:]
    after = sentence[end:].split()[:_CONTEXT_WORDS]
    return " ".join([*before, BLANK, *after])


def _recall(part: Sequence[Message]) -> list[Draft]:
    drafts: list[Draft] = []
    for i, sentence in _spoken(part):
        if len(sentence.split()) < _SENTENCE_WORDS:
            continue
        facts = [a for a in find_artifacts(sentence, _FACT_KINDS) if a.kind != "code"]
        spans = [(a.start, a.start + len(a.text)) for a in facts]
        if not spans:
            spans = [(n.start(), n.end()) for n in _NAME.finditer(sentence)]
        if not spans:
            continue
        start, end = spans[0]
        question = (
            f'Fill in the blank with what our conversation said: "{_blanked(sentence, start, end)}"'
        )
        drafts.append((question, sentence[start:end], (i,)))
    return drafts


def _artifact(part: Sequence[Message]) -> list[Draft]:
    drafts: list[Draft] = []
    for i, m in enumerate(part):
        for _, sentence in sentences(text_of(m)):
            for item in find_artifacts(sentence, ARTIFACT_KINDS):
                at = sentence.find(item.text)
                kind = {"path": "file or path", "url": "URL"}.get(item.kind, "identifier")
                question = f'Which {kind} did we work with here: "{_blanked(sentence, at, at + len(item.text))}"?'
                drafts.append((question, item.text, (i,)))
    return drafts


def _continuation(part: Sequence[Message]) -> list[Draft]:
    users = [i for i, m in enumerate(part) if m.get("role") == "user" and text_of(m).strip()]
    if not users:
        return []
    asked = users[-1]
    request = _clip(text_of(part[asked]))
    steps = [(i, s) for i, s in _spoken(part[asked + 1 :]) if _NEXT_STEP.search(s) is not None]
    sources: tuple[int, ...] = (asked,)
    gold = request
    if steps:
        index, step = steps[-1]
        sources = (asked, asked + 1 + index)
        gold = f"{request} Next: {step}"
    question = (
        "At the point where the earlier part of our conversation ended, what was the user's "
        "last request, and what did the assistant say it would do next?"
    )
    return [(question, gold, sources)]


def _decision(part: Sequence[Message]) -> list[Draft]:
    drafts: list[Draft] = []
    for i, sentence in _spoken(part):
        found = _DECISION.search(sentence)
        if found is None or sentence.endswith("?"):
            continue
        lead = " ".join(sentence[: found.end()].split()[-_CONTEXT_WORDS:])
        rest = sentence[found.end() :].strip()
        if len(lead.split()) < _LEAD_WORDS or not (word_set(rest) - STOPWORDS):
            continue
        question = (
            f'What was chosen, and why? Our conversation said: "{lead} {BLANK}" - complete it.'
        )
        drafts.append((question, rest, (i,)))
    return drafts


def _clip(text: str, words: int = 40) -> str:
    parts = text.split()
    return " ".join(parts[:words])
