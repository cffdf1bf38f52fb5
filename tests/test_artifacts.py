from __future__ import annotations

import pytest

from contextfold.extract.artifacts import (
    KINDS,
    extract_artifacts,
    find_artifacts,
    find_facts,
    is_constraint,
    missing_artifacts,
)


def kinds_of(text: str) -> dict[str, str]:
    return {a.text: a.kind for a in find_artifacts(text)}


@pytest.mark.parametrize(
    ("text", "item", "kind"),
    [
        ("see https://example.com/a/b?x=1.", "https://example.com/a/b?x=1", "url"),
        ("docs at www.python.org, then", "www.python.org", "url"),
        ("edit src/contextfold/render.py now", "src/contextfold/render.py", "path"),
        ("run ./bench/retention.py", "./bench/retention.py", "path"),
        ("open C:\\Users\\me\\notes.txt", "C:\\Users\\me\\notes.txt", "path"),
        ("change config.yaml and", "config.yaml", "path"),
        ("call get_counter() first", "get_counter", "identifier"),
        ("set MAX_COMPACTION_STEPS to", "MAX_COMPACTION_STEPS", "identifier"),
        ("the myVar value", "myVar", "identifier"),
        ("a ViewState holds", "ViewState", "identifier"),
        ("commit 3f9a2c1b broke it", "3f9a2c1b", "hex"),
        (
            "id 123e4567-e89b-12d3-a456-426614174000 here",
            "123e4567-e89b-12d3-a456-426614174000",
            "hex",
        ),
        ("fixes PROJ-1234 today", "PROJ-1234", "ticket"),
        ("see issue #42.", "#42", "ticket"),
        ("took 250 ms overall", "250 ms", "quantity"),
        ("uses 3.5 GB of RAM", "3.5 GB", "quantity"),
        ("ran 5km", "5km", "quantity"),
        ("45% of it", "45%", "quantity"),
        ("it cost $1,200 in total", "$1,200", "money"),
        ("paid 30 dollars", "30 dollars", "money"),
        ("due 2023-05-07 at noon", "2023-05-07", "date"),
        ("on 8 May, 2023 we met", "8 May, 2023", "date"),
        ("by May 25 at the latest", "May 25", "date"),
        ("back in June 2023 it", "June 2023", "date"),
        ("on 7/5/23 exactly", "7/5/23", "date"),
        ("at 10:30 am sharp", "10:30 am", "time"),
        ("we lost 2048 of them", "2048", "number"),
    ],
)
def test_each_kind_is_found(text: str, item: str, kind: str) -> None:
    assert kinds_of(text).get(item) == kind


def test_error_lines_are_kept_whole() -> None:
    log = (
        "collecting ...\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 3, in <module>\n'
        "ValueError: bad value\n"
        "FAILED tests/test_x.py::test_y - AssertionError\n"
        "Process exited with code 2\n"
        "all good here\n"
    )
    errors = extract_artifacts(log, kinds=["error"])
    assert errors == [
        "Traceback (most recent call last):",
        "ValueError: bad value",
        "FAILED tests/test_x.py::test_y - AssertionError",
        "Process exited with code 2",
    ]


def test_constraints_are_directives_not_chat() -> None:
    text = (
        "Never push to main. Don't use tabs. You must keep tests green. "
        "Always run ruff before committing. Only edit files under src/. "
        "We should not touch the schema. I always loved painting. "
        "You must be so proud! I don't know. Do you always do that?"
    )
    assert extract_artifacts(text, kinds=["constraint"]) == [
        "Never push to main.",
        "Don't use tabs.",
        "You must keep tests green.",
        "Always run ruff before committing.",
        "Only edit files under src/.",
        "We should not touch the schema.",
    ]
    assert is_constraint("Please, do not rename the public API.")
    assert not is_constraint("Must have been a long day.")


def test_lone_digits_and_plain_words_are_not_artifacts() -> None:
    assert extract_artifacts("I have 3 kids and a dog called Max, ok") == []


def test_order_of_appearance_each_text_once() -> None:
    text = "read a.py, then b.py, then a.py again at 10:30 am"
    assert extract_artifacts(text) == ["a.py", "b.py", "10:30 am"]


def test_an_overlap_goes_to_the_earlier_kind() -> None:
    found = find_artifacts("https://github.com/org/repo/blob/3f9a2c1b/src/app.py")
    assert [a.kind for a in found] == ["url"]


def test_kinds_filter_and_unknown_text() -> None:
    text = "see https://x.org and src/a.py on 2024-01-02"
    assert extract_artifacts(text, kinds=["path", "date"]) == ["src/a.py", "2024-01-02"]
    assert set(KINDS) >= {a.kind for a in find_artifacts(text)}
    assert extract_artifacts("") == []


def test_missing_artifacts_respects_word_boundaries_case_and_spacing() -> None:
    items = ["12", "5 km", "src/x.py", "Never push to main.", "PROJ-7"]
    summary = "In 2012 I ran 5km; never push  to MAIN. proj-7 is done."
    assert missing_artifacts(items, summary) == ["12", "src/x.py"]
    assert missing_artifacts([], summary) == []


def test_extraction_is_deterministic() -> None:
    text = "FAILED run 3f9a2c1b on 2024-01-02; don't use src/old.py, cost $5, took 3 s."
    assert extract_artifacts(text) == extract_artifacts(text)
    assert missing_artifacts(extract_artifacts(text), text) == []


TOOL_OUTPUT = (
    '{"user_id": "omar_davis_3817", "first_name": "Omar", "address": {"address1": '
    '"281 Spruce Street", "zip": "92164"}, "payment_methods": {"gift_card_3481935": '
    '{"source": "gift_card", "amount": 22, "id": "gift_card_3481935"}}, "reservations": '
    '["JG7FMM", "LQ940Q"], "membership": "gold", "seats": 31}'
)


def test_json_keys_are_never_items() -> None:
    found = extract_artifacts(TOOL_OUTPUT)
    for key in ("user_id", "first_name", "payment_methods", "address1"):
        assert key not in found
    assert "omar_davis_3817" in found and "JG7FMM" in found


def test_facts_give_values_their_key_and_drop_bare_numbers() -> None:
    facts = [f.shown for f in find_facts(TOOL_OUTPUT + "\nThe 22 bags and 31 seats, build 4711.")]
    assert "user_id" not in facts and "first_name" not in facts
    assert "user_id: omar_davis_3817" in facts and "id: gift_card_3481935" in facts
    assert "amount: 22" in facts and "seats: 31" in facts and "zip: 92164" in facts
    assert "build: 4711" in facts and "JG7FMM" in facts
    # 281 is part of an address, not its value; bare 22 and 31 say nothing on their own.
    assert not any(f in ("281", "22", "31", "address1: 281") for f in facts)
