"""The development data's two halves: tune on one, report the other.

Rows are split by their place in the file, alternately (first row tuning,
second checking, ...), so each half of every file is fixed and balanced and
needs nothing but the file. Only the tuning half may be looked at while
changing a strategy; the figure that counts is the checking half's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Literal, TypeVar

from contextfold.core.errors import InvalidInput

Half = Literal["tuning", "checking"]
HALVES: tuple[Half, ...] = ("tuning", "checking")

T = TypeVar("T")


def half_of(index: int) -> Half:
    """The half of the row at 0-based ``index`` in its file."""
    return "tuning" if index % 2 == 0 else "checking"


def rows_of(rows: Iterable[T], half: str) -> Iterator[T]:
    """The rows of ``half`` (``"tuning"``, ``"checking"``, or ``"all"`` for every row)."""
    if half not in (*HALVES, "all"):
        raise InvalidInput(f"half is 'tuning', 'checking' or 'all', not {half!r}", field="half")
    for index, row in enumerate(rows):
        if half == "all" or half_of(index) == half:
            yield row
