from __future__ import annotations

import asyncio
import json
from typing import Any

from contextfold.core.messages import Message
from contextfold.core.tokens import get_counter
from contextfold.extract.salience import key_sentences
from contextfold.llm.base import LLM
from contextfold.llm.offline import OfflineModel, assignments, history_of, model_or_offline
from contextfold.strategies.transcript import material
from contextfold.testing import ScriptedModel

COUNTER = get_counter("approx")
HISTORY = "\n\n".join(
    [
        "[user]: Please load /data/sales.csv into a table. Never drop the rows with refunds.",
        "[assistant]: Loaded the file; it has 1200 rows and the column price is in euros.",
        "[assistant]: -> python("
        + json.dumps({"code": "df = pd.read_csv('/data/sales.csv')\ntotal, n = df.price.sum(), 3"})
        + ")",
        "[tool python]: Traceback (most recent call last):\nKeyError: 'price_eur'",
        "[assistant]: The column is called price_eur in the March export, so I renamed it.",
        "[user]: Good. The weather is lovely today, by the way.",
    ]
)
VARIABLES = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "type": {"type": "string"},
            "description": {"type": "string"},
        },
    },
}


def prompt(body: str, *, system: str = "You summarize conversations.") -> list[Message]:
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Summarize this for the Planner.\n{body}\nReply briefly."},
    ]


def test_answers_with_key_sentences_of_the_history_block_only() -> None:
    completion = OfflineModel(ratio=1.0).complete(prompt(material(HISTORY)), max_tokens=200)
    assert "/data/sales.csv" in completion.text
    assert "Never drop the rows with refunds." in completion.text
    assert "Summarize this for the Planner" not in completion.text
    assert "Reply briefly" not in completion.text
    assert completion.data is None


def test_usage_names_the_offline_model_and_counts_tokens() -> None:
    messages = prompt(material(HISTORY))
    completion = OfflineModel(counter=COUNTER).complete(messages, max_tokens=200)
    usage = completion.usage
    assert usage.model == "offline"
    assert usage.input_tokens == COUNTER.messages(messages)
    assert usage.output_tokens == COUNTER.text(completion.text) > 0
    assert usage.latency_s > 0
    assert usage.calls == 1


def test_whole_last_user_message_is_the_material_without_tags() -> None:
    messages: list[Message] = [
        {"role": "user", "content": "An older message about Lisbon and its trams."},
        {"role": "user", "content": "The deploy to eu-west-2 failed at 14:05 with exit code 137."},
    ]
    assert history_of(messages) == messages[1]["content"]
    text = OfflineModel().complete(messages, max_tokens=100).text
    assert "eu-west-2" in text
    assert "Lisbon" not in text


def test_every_history_block_is_read_and_json_blocks_as_their_strings() -> None:
    previous = json.dumps({"ConversationSummary": "The user works on invoices for ACME-17."})
    body = f"Previous: {material(previous)}\nNew: {material('[user]: Add the VAT column.')}"
    text = history_of(prompt(body))
    assert text == "The user works on invoices for ACME-17.\n\n[user]: Add the VAT column."


def test_answer_stays_within_max_tokens_and_keeps_must_keep_items() -> None:
    long = "\n\n".join(
        f"[assistant]: Step {i} went fine and the build of module m{i} took {i + 10} seconds."
        for i in range(60)
    )
    history = long + "\n\n[tool run]: FAILED tests/test_io.py::test_read - AssertionError: 3 != 4"
    text = OfflineModel(counter=COUNTER).complete(prompt(material(history)), max_tokens=80).text
    assert COUNTER.text(text) <= 80
    assert "tests/test_io.py" in text
    assert len(text) < len(history) / 5


def test_schema_answer_is_json_filled_by_type() -> None:
    schema = {
        "type": "object",
        "properties": {
            "ConversationSummary": {"type": "string"},
            "Variables": VARIABLES,
            "Artifacts": {"type": "array", "items": {"type": "string"}},
            "Scores": {
                "type": "array",
                "items": {"type": "object", "properties": {"n": {"type": "integer"}}},
            },
            "Extra": {"type": "object", "additionalProperties": {"type": "string"}},
            "Status": {"type": "string", "enum": ["open", "done"]},
            "Count": {"type": "integer"},
            "Ready": {"type": "boolean"},
        },
    }
    completion = OfflineModel(ratio=1.0).complete(
        prompt(material(HISTORY)), max_tokens=400, schema=schema
    )
    data: dict[str, Any] = completion.data
    assert json.loads(completion.text) == data
    assert "/data/sales.csv" in data["ConversationSummary"]
    assert data["Variables"] == [
        {"name": "df", "type": "unknown", "description": "df = pd.read_csv('/data/sales.csv')"},
        {"name": "total", "type": "unknown", "description": "total, n = df.price.sum(), 3"},
        {"name": "n", "type": "unknown", "description": "total, n = df.price.sum(), 3"},
    ]
    assert "/data/sales.csv" in data["Artifacts"]
    assert "price_eur" in data["Artifacts"]
    assert data["Scores"] == []
    assert data["Extra"] == {}
    assert data["Status"] == "open"
    assert data["Count"] == 0
    assert data["Ready"] is False


def test_string_fields_share_one_selection_without_repeating() -> None:
    schema = {
        "type": "object",
        "properties": {"first": {"type": "string"}, "second": {"type": "string"}},
    }
    model = OfflineModel(ratio=1.0)
    data = model.complete(prompt(material(HISTORY)), max_tokens=120, schema=schema).data
    first, second = set(data["first"].splitlines()), set(data["second"].splitlines())
    assert first and second
    assert not first & second


def test_text_is_a_fraction_of_the_material_but_lists_of_objects_are_not() -> None:
    history = "\n\n".join(
        f"[assistant]: Step {i} built module m{i}.\nresult_{i} = build('m{i}')" for i in range(40)
    )
    source_tokens = COUNTER.text(history)
    model = OfflineModel(counter=COUNTER, ratio=0.2, min_tokens=10)
    text = model.complete(prompt(material(history)), max_tokens=2000).text
    assert 10 < COUNTER.text(text) <= 0.2 * source_tokens + 1
    schema = {"type": "object", "properties": {"Summary": _string(), "Variables": VARIABLES}}
    data = model.complete(prompt(material(history)), max_tokens=2000, schema=schema).data
    assert COUNTER.text(data["Summary"]) <= 0.2 * source_tokens + 1
    assert [v["name"] for v in data["Variables"]] == [f"result_{i}" for i in range(40)]
    short = OfflineModel(counter=COUNTER, ratio=0.01, min_tokens=30)
    assert 10 < COUNTER.text(short.complete(prompt(material(history)), max_tokens=2000).text) <= 30


def test_string_list_falls_back_to_key_sentences_without_artifacts() -> None:
    schema = {"type": "object", "properties": {"points": {"type": "array", "items": _string()}}}
    history = "[user]: We talked about gardens and roses.\n\n[assistant]: Roses like sun."
    data = OfflineModel().complete(prompt(material(history)), max_tokens=100, schema=schema).data
    assert data["points"] == [
        "user: We talked about gardens and roses.",
        "assistant: Roses like sun.",
    ]


def test_schema_answer_stays_within_max_tokens() -> None:
    schema = {"type": "object", "properties": {"Summary": _string(), "Variables": VARIABLES}}
    history = "\n\n".join(
        f"[assistant]: x{i} = compute_step({i}, '/tmp/out{i}.csv')" for i in range(80)
    )
    completion = OfflineModel(counter=COUNTER).complete(
        prompt(material(history)), max_tokens=150, schema=schema
    )
    assert COUNTER.text(completion.text) <= 150
    assert completion.data["Variables"]
    assert completion.data["Summary"]


def test_assignments_reads_lines_and_json_encoded_code() -> None:
    source = 'x = 1\nif x == 1:\n    y += 2\nz <= 3\n-> run({"code": "a = f()\\nb=2"})\nx = 5'
    assert assignments(source) == [("x", "x = 5"), ("a", "a = f()"), ("b", "b=2")]


def test_async_twin_answers_the_same() -> None:
    model = OfflineModel()
    messages = prompt(material(HISTORY))
    sync = model.complete(messages, max_tokens=120, schema={"type": "object", "properties": {}})
    both = asyncio.run(
        model.acomplete(messages, max_tokens=120, schema={"type": "object", "properties": {}})
    )
    assert (sync.text, sync.data) == (both.text, both.data) == ("{}", {})
    assert (
        model.complete(messages, max_tokens=120).text
        == asyncio.run(model.acomplete(messages, max_tokens=120)).text
    )


def test_model_or_offline() -> None:
    scripted = ScriptedModel()
    assert model_or_offline(scripted) is scripted
    stand_in = model_or_offline(None, COUNTER)
    assert isinstance(stand_in, OfflineModel)
    assert isinstance(stand_in, LLM)
    assert stand_in.name == "offline"
    assert stand_in.counter is COUNTER


def test_key_sentences_keeps_speakers_and_budget() -> None:
    text = key_sentences(HISTORY, 60, COUNTER)
    assert COUNTER.text(text) <= 60
    lines = text.splitlines()
    assert lines
    assert all(line.split(": ", 1)[0] in ("user", "assistant", "tool python") for line in lines)


def _string() -> dict[str, str]:
    return {"type": "string"}


def test_as_many_string_fields_as_history_blocks_answer_each_from_its_own() -> None:
    first = "[user]: Load /data/sales.csv now.\n\n[assistant]: Loaded 1200 rows from the file."
    second = "[user]: Plot the refunds by month.\n\n[assistant]: The refunds peak in March."
    prompt = f"Two groups.\n=== Group 1 ===\n{material(first)}\n=== Group 2 ===\n{material(second)}"
    schema = {
        "type": "object",
        "properties": {"group_1": {"type": "string"}, "group_2": {"type": "string"}},
    }
    answer = OfflineModel().complete([{"role": "user", "content": prompt}], schema=schema).data
    assert "sales.csv" in answer["group_1"] and "March" not in answer["group_1"]
    assert "March" in answer["group_2"] and "sales.csv" not in answer["group_2"]
