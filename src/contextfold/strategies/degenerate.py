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
  ``GRAM`` words already occurred earlier in it. A list of distinct paths or
  identifiers differs in every run, so it passes; tool output's JSON records
  repeat about half of theirs.
- **Next to nothing new**: the answer compresses (zlib) to less than
  ``MIN_COMPRESSION`` of its size, where prose and lists of distinct items
  stay above it (a list of 100 paths that differ by a number, about 4%).

A sign the folded material shows as well is not the model's: a faithful
summary of a repetitive log may repeat too.
"""

from __future__ import annotations

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
    shows: a sign the material shows too is the material's repetition, which a
    faithful summary of a repetitive log may keep.
    """
    sign = _sign(text)
    if sign is None or _sign(material()) is not None:
        return None
    return sign


def _sign(text: str) -> str | None:
    words = _WORD.findall(text.lower())
    if len(words) < MIN_WORDS:
        return None
    units = [" ".join(_WORD.findall(u.lower())) for u in _UNIT.split(text)]
    counted = Counter(u for u in units if len(u.split()) >= MIN_UNIT_WORDS)
    if counted:
        unit, times = counted.most_common(1)[0]
        if times >= REPEATS and times * len(unit.split()) >= REPEATED_SHARE * len(words):
            return f"degenerate: one sentence repeated {times} times: {_shown(unit)}"
    grams = [tuple(words[i : i + GRAM]) for i in range(len(words) - GRAM + 1)]
    repeated = len(grams) - len(set(grams))
    if repeated >= REPEATED_RUNS * len(grams):
        return f"degenerate: {repeated * 100 // len(grams)}% of its {GRAM}-word runs repeat"
    raw = text.encode("utf-8")
    ratio = len(zlib.compress(raw, 9)) / len(raw)
    if ratio < MIN_COMPRESSION:
        return f"degenerate: compresses to {ratio:.0%} of its size"
    return None


def _shown(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:59] + "…")
