"""Filler dropped from kept prose, never from a tool's output or a must-keep item."""

from __future__ import annotations

import pytest

from contextfold.core.tokens import get_counter
from contextfold.extract.candidates import Source, candidates_of
from contextfold.extract.filler import terse

COUNTER = get_counter("approx")


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("Oh wow, I really just adopted a beagle!", "I adopted a beagle!"),
        ("Yeah, I never liked jazz.", "I never liked jazz."),
        ("It was so, so good.", "It was good."),
        ("Ok!", "Ok!"),
        ("The Hollywood sign", "The Hollywood sign"),
    ],
)
def test_terse(text: str, kept: str) -> None:
    assert terse(text) == kept


def test_prose_loses_filler_but_tool_output_and_must_keep_items_do_not() -> None:
    sources = [
        Source(None, "Caroline", "Wow, I really just adopted a beagle named Biscuit.", True),
        Source(
            None, "tool", "Wow, I really just adopted a beagle named Biscuit.", False, prose=False
        ),
        Source(None, "Caroline", "Oh, the file is really at src/app/main.py now.", True),
    ]
    texts = [c.text for c in candidates_of(sources, COUNTER)]
    assert texts == [
        "I adopted a beagle named Biscuit.",
        "Wow, I really just adopted a beagle named Biscuit.",
        "Oh, the file is really at src/app/main.py now.",
    ]
