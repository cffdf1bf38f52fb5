import pytest

from contextfold.core.errors import InvalidInput
from contextfold.evaluation.split import half_of, rows_of


def test_halves_alternate_and_cover_every_row_once():
    rows = [f"conv-{i}" for i in range(7)]
    tuning = list(rows_of(rows, "tuning"))
    checking = list(rows_of(rows, "checking"))
    assert tuning == ["conv-0", "conv-2", "conv-4", "conv-6"]
    assert checking == ["conv-1", "conv-3", "conv-5"]
    assert sorted(tuning + checking) == rows
    assert list(rows_of(rows, "all")) == rows
    assert [half_of(i) for i in range(3)] == ["tuning", "checking", "tuning"]


def test_unknown_half_names_the_field():
    with pytest.raises(InvalidInput) as caught:
        list(rows_of([1], "test"))
    assert caught.value.field == "half"
