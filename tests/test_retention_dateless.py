"""Retention without date gains: an answer's date words leave its key words."""

from __future__ import annotations

import pytest

from contextfold.evaluation.retention import date_words, dateless, keyed_questions, recall


@pytest.mark.parametrize(
    ("answer", "dates"),
    [
        ("7 May 2023", {"7", "may", "2023"}),
        ("The week before 9 June, 2023", {"week", "9", "june", "2023"}),
        ("May 7th", {"may", "7th"}),
        ("on 2023-05-07", {"2023", "05", "07"}),
        ("last Tuesday", {"tuesday"}),
        ("yesterday", {"yesterday"}),
        ("3 dogs since 2019", {"2019"}),
        ("3 dogs and 12 cats", set()),
    ],
)
def test_date_words(answer: str, dates: set[str]) -> None:
    assert date_words(answer) == dates


def test_a_fold_that_prints_dates_gains_nothing_dateless() -> None:
    messages = [
        {"role": "user", "content": "I adopted Biscuit, a beagle, at the shelter."},
        {"role": "assistant", "content": "Biscuit sounds lovely."},
    ]
    question = {"question": "When did I adopt a dog, and which?", "answer": "Biscuit, 7 May 2023"}
    ((_, keys),) = keyed_questions(messages, [question])
    assert keys == {"biscuit", "7", "may", "2023"}
    only_date = {"7", "may", "2023", "adopted"}
    assert recall(keys, only_date) == 0.75
    kept = dateless(keys, question["answer"])
    assert kept == {"biscuit"}
    assert recall(kept, only_date) == 0.0
    assert dateless({"7", "2023"}, "7 May 2023") == set()
