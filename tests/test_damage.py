"""Damaged state heals from the log (issue 9, point 2): every scripted case of
``contextfold.testing.damage``, one test each."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from contextfold.testing.damage import Case, run, template
from contextfold.testing.damage_cases import CASES

N = 120


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    workdir = tmp_path_factory.mktemp("damage")
    yield template(N, str(workdir)), workdir


def test_at_least_forty_cases() -> None:
    assert len(CASES) >= 40
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_damage_case(case: Case, made: tuple[str, Path]) -> None:
    outcome = run(case, N, made[0], str(made[1]))
    assert outcome.raw_errors == []
    assert outcome.wrong == []
    if case.expect == "heal":
        assert outcome.clear_errors == []
        assert outcome.recovered
    else:
        assert outcome.clear_errors
