"""Degenerate answers: a small model's loop is not a summary.

Small local models often repeat one sentence, line or phrase until their token
cap. Trimming such an answer at a sentence end would still commit the loop, so
the judge rejects it before any trimming. Three signs, any one enough, each
read only on answers long enough (``MIN_WORDS``) for repetition to mean
something:

- **One sentence or line repeated**: the same sentence (of ``MIN_UNIT_WORDS``
  words or more) ``REPEATS`` times or more, making at least ``REPEATED_SHARE``
  of the answer.
- **Repeated phrases**: at least ``REPEATED_RUNS`` of the answer's runs of
  ``GRAM`` words (within a sentence or line) already occurred earlier in it.
  A list of distinct paths or identifiers differs in every run, so it
  passes; tool output's JSON records repeat about half of theirs.
- **Next to nothing new**: the answer compresses (zlib) to less than
  ``MIN_COMPRESSION`` of its size, where prose and lists of distinct items
  stay above it (a list of 100 paths that differ by a number, about 4%).

Repetition the folded material holds itself is not the model's: a sentence
it repeats, word runs it has (three quarters or more of the answer's distinct
runs), a log that compresses as well.
"""

from __future__ import annotations

import functools
import re
import zlib
from collections import Counter
from collections.abc import Callable

MIN_WORDS = 40
"""Answers shorter than this are never degenerate: a few repeats there cost little."""
MIN_UNIT_WORDS = 3
"""A repeated sentence must have this many words (a bullet "- done" may repeat)."""
REPEATS = 4
"""How often one sentence must occur to be a loop."""
REPEATED_SHARE = 0.5
"""The share of an answer that repetition must make up."""
REPEATED_RUNS = 0.7
"""The share of an answer's word runs that must repeat earlier ones."""
GRAM = 8
"""The length, in words, of the runs compared."""
MIN_COMPRESSION = 0.025
"""Compressed size over raw size below which an answer says almost nothing new."""

_WORD = re.compile(r"\w+")
_UNIT = re.compile(r"(?<=[.!?])\s+|\n+")


def degenerate(text: str, material: Callable[[], str] = str) -> str | None:
    """Why ``text`` is a loop rather than a summary (starting "degenerate: "), or None.

    ``material`` gives what the model was asked to fold, read only when a sign
    shows: repetition the material holds itself (its sentence, its word runs)
    is not the model's loop, since a faithful summary of a repetitive log may
    repeat it.
    """
    words = _WORD.findall(text.lower())
    if len(words) < MIN_WORDS:
        return None
    source = _Source(material)
    units = _units(text)
    counted = Counter(u for u in units if len(u.split()) >= MIN_UNIT_WORDS)
    if counted:
        unit, times = counted.most_common(1)[0]
        if (
            times >= REPEATS
            and times * len(unit.split()) >= REPEATED_SHARE * len(words)
            and f" {unit} " not in source.joined
        ):
            return f"degenerate: one sentence repeated {times} times: {_shown(unit)}"
    grams = _grams(units)
    seen: set[tuple[str, ...]] = set()
    repeated = 0
    for gram in grams:
        if gram in seen:
            repeated += 1
        seen.add(gram)
    if grams and repeated >= REPEATED_RUNS * len(grams):
        own = sum(1 for gram in set(grams) if gram not in source.grams)
        if own * 4 >= len(seen):
            return f"degenerate: {repeated * 100 // len(grams)}% of its {GRAM}-word runs repeat"
    raw = text.encode("utf-8")
    ratio = len(zlib.compress(raw, 9)) / len(raw)
    if ratio < MIN_COMPRESSION and source.ratio >= MIN_COMPRESSION:
        return f"degenerate: compresses to {ratio:.0%} of its size"
    return None


class _Source:
    """The folded material's words, word runs and compression, each computed when first asked."""

    def __init__(self, material: Callable[[], str]) -> None:
        self._material = material

    @functools.cached_property
    def text(self) -> str:
        return self._material()

    @functools.cached_property
    def joined(self) -> str:
        return " " + " ".join(_WORD.findall(self.text.lower())) + " "

    @functools.cached_property
    def grams(self) -> set[tuple[str, ...]]:
        return set(_grams(_units(self.text)))

    @functools.cached_property
    def ratio(self) -> float:
        raw = self.text.encode("utf-8")
        return len(zlib.compress(raw, 9)) / len(raw) if raw else 1.0


def _units(text: str) -> list[str]:
    """The sentences and lines of ``text``, as lower-case words joined by one space."""
    return [" ".join(_WORD.findall(unit.lower())) for unit in _UNIT.split(text)]


def _grams(units: list[str]) -> list[tuple[str, ...]]:
    """The runs of ``GRAM`` words within each sentence or line (a loop's run crosses none)."""
    runs: list[tuple[str, ...]] = []
    for unit in units:
        words = unit.split()
        runs += [tuple(words[i : i + GRAM]) for i in range(len(words) - GRAM + 1)]
    return runs


def _shown(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:59] + "…")
