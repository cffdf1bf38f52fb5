"""Checked compaction: bad answers are refused and retried, dropped items pinned."""

from __future__ import annotations

import json

import pytest
from conftest import load_rows

from contextfold.core.entries import Entry
from contextfold.core.errors import ModelError
from contextfold.core.log import LoggedMessage
from contextfold.core.messages import Message
from contextfold.llm.base import material
from contextfold.strategies.checked import PINNED_HEADER, SummaryRejected, summarize_checked
from contextfold.strategies.transcript import transcript
from contextfold.testing import ScriptedModel

SOURCE = (
    "[user]: Never touch src/loader.py; the fix must land in src/io/reader.py.\n"
    "[tool run_tests]: FAILED tests/test_io.py::test_read - KeyError: 'utf-8'\n"
    "[assistant Planner -> CodeInterpreter]: Docs at https://example.org/io on 2024-05-03."
)
PROMPT: list[Message] = [{"role": "user", "content": f"Summarize.\n{material(SOURCE)}"}]


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("Error: the upstream model is overloaded", "error"),
        ("I'm sorry, I cannot help with that.", "error"),
        ("<!DOCTYPE html><html>502 Bad Gateway</html>", "error"),
        ("x" * 5000, "exceeds"),
    ],
)
def test_bad_answers_are_retried_then_accepted(bad: str, reason: str) -> None:
    model = ScriptedModel([bad, "I fixed src/io/reader.py."])
    checked = summarize_checked(model, PROMPT, source=SOURCE, max_tokens=100)
    assert checked.attempts == 2
    assert checked.text.startswith("I fixed src/io/reader.py.")
    assert checked.usage.calls == 2
    assert len(model.calls) == 2


def test_repeated_failure_drops_the_job_with_every_reason() -> None:
    model = ScriptedModel(["", ModelError("HTTP 503"), "Error: overloaded"])
    with pytest.raises(SummaryRejected) as info:
        summarize_checked(model, PROMPT, source=SOURCE, max_tokens=100, attempts=3)
    reasons = info.value.reasons
    assert len(reasons) == 3
    assert "empty" in reasons[0] and "503" in reasons[1] and "error" in reasons[2]
    assert isinstance(info.value, ModelError)


def test_json_is_required_when_a_schema_is_given() -> None:
    schema = {"type": "object", "properties": {"summary": {"type": "string"}}}
    model = ScriptedModel(["not json at all", {"summary": "ok src/io/reader.py"}])
    checked = summarize_checked(model, PROMPT, source=SOURCE, max_tokens=100, schema=schema)
    assert checked.attempts == 2
    assert checked.data == {"summary": "ok src/io/reader.py"}


def test_items_the_answer_dropped_are_pinned_verbatim() -> None:
    model = ScriptedModel(["I changed the reader as asked."])
    checked = summarize_checked(model, PROMPT, source=SOURCE, max_tokens=200)
    assert PINNED_HEADER in checked.text
    for item in ("src/io/reader.py", "https://example.org/io", "2024-05-03"):
        assert item in checked.pinned
        assert f"- {item}" in checked.text
    assert any("KeyError" in p for p in checked.pinned)
    assert any(p.startswith("Never touch src/loader.py") for p in checked.pinned)


def test_items_the_answer_kept_are_not_pinned() -> None:
    answer = (
        "I must not touch src/loader.py; the fix goes in src/io/reader.py. "
        "tests/test_io.py::test_read failed with KeyError: 'utf-8'. "
        "Docs: https://example.org/io, 2024-05-03."
    )
    checked = summarize_checked(ScriptedModel([answer]), PROMPT, source=SOURCE, max_tokens=200)
    assert "src/io/reader.py" not in checked.pinned
    assert "https://example.org/io" not in checked.pinned


def test_speaker_labels_are_never_pinned() -> None:
    checked = summarize_checked(ScriptedModel(["Short."]), PROMPT, source=SOURCE, max_tokens=200)
    assert not any("CodeInterpreter" in p or "run_tests" in p for p in checked.pinned)


def test_pinning_can_be_turned_off() -> None:
    model = ScriptedModel(["Short."])
    checked = summarize_checked(model, PROMPT, source=SOURCE, max_tokens=200, pin=False)
    assert checked.pinned == () and checked.text == "Short."


def test_pins_are_capped_keeping_the_newest_items() -> None:
    source = "\n".join(f"[tool read_file]: opened src/pkg/module_{i:03}.py" for i in range(200))
    prompt: list[Message] = [{"role": "user", "content": material(source)}]
    checked = summarize_checked(
        ScriptedModel(["Read many modules."]), prompt, source=source, max_tokens=50, pin_chars=200
    )
    assert 0 < len(checked.pinned) < 200
    assert checked.pins_dropped == 200 - len(checked.pinned)
    assert checked.pinned[-1] == "src/pkg/module_199.py"
    assert sum(len(p) + 3 for p in checked.pinned) <= 200
    uncapped = summarize_checked(
        ScriptedModel(["Read many modules."]), prompt, source=source, max_tokens=50, pin_chars=10**6
    )
    assert len(uncapped.pinned) == 200 and uncapped.pins_dropped == 0


def test_pins_of_tool_output_are_facts_not_json_keys_or_bare_numbers() -> None:
    for row in load_rows("taubench_airline_dev", limit=10):
        part = [m for m in row["messages"] if m["role"] != "system"]
        entries = [Entry.of_message(LoggedMessage(i + 1, m, 0)) for i, m in enumerate(part)]
        source = transcript(entries)
        keys: set[str] = set()
        for message in part:
            if message["role"] == "tool":
                try:
                    keys |= _keys(json.loads(str(message["content"])))
                except ValueError:
                    continue
        checked = summarize_checked(
            ScriptedModel(["I helped the user."]), PROMPT, source=source, max_tokens=2000
        )
        for item in checked.pinned:
            assert item not in keys, item
            assert not item.replace(",", "").replace(".", "").isdigit(), item


def _keys(value: object) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()
