"""JSON-asking strategies read prose, fences and cut-off objects, and ask for less once.

The strategy tests run each preset over a real HTTP server on 127.0.0.1 speaking
OpenAI's protocol; the server answers from what the request asked (JSON mode or
not, the schema's keys named in the system prompt) and records every body.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from conftest import load_rows
from fake_openai import openai_reply
from fake_providers import FakeProvider, Request

from contextfold import Memory
from contextfold.core.folds import Fold
from contextfold.core.messages import Message
from contextfold.core.tokens import get_counter
from contextfold.llm import OpenAIModel, OpenAIProvider, RetryPolicy
from contextfold.memory.cycle import run_cycle
from contextfold.strategies.checked import SummaryRejected, summarize_checked
from contextfold.strategies.lenient import Least, object_in
from contextfold.testing import ScriptedModel

COUNTER = get_counter()
# The families of JSON-asking strategies, each through a preset that runs it first.
FAMILIES: dict[str, dict[str, Any]] = {
    "tool-calls": {},
    "round-compressor": {"rounds_to_compress": 1, "rounds_to_retain": 1},
    "token-budget": {},
    "retrieve-facts": {"max_messages": 50},
}
PROSE = (
    "The user asked to change a reservation. I looked up the user's profile and the "
    "reservation, compared the available flights, and confirmed the new itinerary."
)


def told(n: int) -> str:
    """A distinct summary for the ``n``th field: the same text in every field would be a loop."""
    return f"Step {n}: I looked up record {n} for the user and noted result {n} of the lookup."


def agent_run() -> list[Message]:
    rows = load_rows("taubench_airline_dev", limit=3)
    rest = [m for row in rows for m in row["messages"] if m["role"] != "system"]
    return [rows[0]["messages"][0], *rest]


def asked_keys(request: Request) -> list[str]:
    """The keys the JSON instruction of a request requires."""
    system = str(request.body["messages"][0]["content"])
    schema = json.loads(system.split("JSON schema:\n", 1)[1])
    return list(schema["required"])


def run_family(
    preset: str, answer: Callable[[Request], str]
) -> tuple[list[Request], list[Any], list[Fold]]:
    """The first job of ``preset`` over an agent run, answered by ``answer`` over HTTP."""
    with FakeProvider("openai") as fake:
        fake.answer("POST", "/v1/chat/completions", lambda r: openai_reply(answer(r)))
        provider = OpenAIProvider(base_url=fake.url, compatible=True)
        llm = OpenAIModel("local", provider=provider, timeout=5, retry=RetryPolicy(attempts=1))
        session = Memory().session("s")
        session.extend(agent_run())
        budget = session.view("all").render_report().tokens + 500
        view = session.view("v", preset=preset, budget=budget, llm=llm, **FAMILIES[preset])
        events: list[Any] = []
        view.on_event.append(events.append)
        first_job_only = iter([True])
        run_cycle(view, may_plan=lambda: next(first_job_only, False))
        return list(fake.requests), events, view.folds()


def json_mode(request: Request) -> bool:
    return "response_format" in request.body


@pytest.mark.parametrize("preset", list(FAMILIES))
def test_json_inside_prose_is_read_at_the_first_call(preset: str) -> None:
    def answer(request: Request) -> str:
        data = {key: told(n) for n, key in enumerate(asked_keys(request), start=1)}
        return f"Sure! Here is the JSON you asked for:\n{json.dumps(data)}\nHope this helps."

    requests, events, folds = run_family(preset, answer)
    (committed,) = [e for e in events if e.kind == "committed"]
    assert len(requests) == 1 and json_mode(requests[0])
    assert committed.usage["model"] != "offline"
    assert any(told(1) in f.text for f in folds)


@pytest.mark.parametrize("preset", list(FAMILIES))
def test_an_unusable_answer_is_asked_again_for_less_in_prose(preset: str) -> None:
    def answer(request: Request) -> str:
        return '{"note": "nothing to report"}' if json_mode(request) else PROSE

    requests, events, folds = run_family(preset, answer)
    first, second = requests
    assert json_mode(first) and not json_mode(second)
    assert first.body != second.body
    note = str(second.body["messages"][-1]["content"])
    assert note.startswith("That answer cannot be used: answer lacks the required key")
    assert " only " in note and "no JSON" in note
    (committed,) = [e for e in events if e.kind == "committed"]
    assert committed.usage["model"] != "offline" and committed.usage["calls"] == 2
    assert any(PROSE in f.text for f in folds)


def test_tool_calls_fold_the_groups_a_cut_off_answer_holds() -> None:
    groups: list[int] = []

    def answer(request: Request) -> str:
        keys = asked_keys(request)
        groups.append(len(keys))
        whole = {key: told(n) for n, key in enumerate(keys[:-1], start=1)}
        return json.dumps(whole)[:-1] + f', "{keys[-1]}": "I started to'

    requests, _, folds = run_family("tool-calls", answer)
    assert len(requests) == 1 and groups[0] >= 2
    assert len(folds) == groups[0] - 1
    assert [told(n) in f.text for n, f in enumerate(folds, start=1)] == [True] * len(folds)


def test_a_degenerate_loop_is_asked_again_for_less_and_then_fails() -> None:
    loop = "I searched for flights from JFK to SFO. " * 80

    def answer(request: Request) -> str:
        return json.dumps({k: loop for k in asked_keys(request)}) if json_mode(request) else loop

    requests, events, folds = run_family("tool-calls", answer)
    assert [json_mode(r) for r in requests] == [True, False, False] and folds == []
    assert len({json.dumps(r.body, sort_keys=True) for r in requests}) == 3
    (failed,) = [e for e in events if e.kind == "failed"]
    assert failed.detail.count("degenerate: one sentence repeated") == 3


SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string"}, "facts": {"type": "array"}},
    "required": ["summary", "facts"],
}
PROMPT: list[Message] = [
    {"role": "user", "content": "Summarize:\n<history>\nI fixed a.py\n</history>"}
]


def test_without_least_a_prose_answer_is_asked_again_with_the_same_schema() -> None:
    model = ScriptedModel([PROSE, PROSE, PROSE])
    with pytest.raises(SummaryRejected):
        summarize_checked(model, PROMPT, source="", max_tokens=300, schema=SCHEMA, pin=False)
    assert [call.schema for call in model.calls] == [SCHEMA] * 3


def test_with_least_the_missing_fields_take_their_defaults() -> None:
    least = Least("summary", "Write only the summary.", {"facts": []})
    model = ScriptedModel(['```json\n{"summary": "I fixed a.py."}\n```'])
    checked = summarize_checked(
        model, PROMPT, source="", max_tokens=300, schema=SCHEMA, pin=False, least=least
    )
    assert checked.data == {"summary": "I fixed a.py.", "facts": []}
    # Prose to the full request is not the summary when the schema requires more than it.
    model = ScriptedModel([PROSE, PROSE])
    checked = summarize_checked(
        model, PROMPT, source="", max_tokens=300, schema=SCHEMA, pin=False, least=least
    )
    assert checked.attempts == 2 and checked.data == {"summary": PROSE, "facts": []}
    assert model.calls[0].schema == SCHEMA and model.calls[1].schema is None


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ('{"a": "x"}', {"a": "x"}),
        ('Here it is:\n```json\n{"a": "x"}\n```', {"a": "x"}),
        ('I think {"a": "x", "b": [1, 2]} is right.', {"a": "x", "b": [1, 2]}),
        ('{"a": "x", "b": "cut of', {"a": "x"}),
        ('{"a": "cut of', {"a": "cut of"}),
        ('{"a": "x", "b": ', {"a": "x"}),
        ('{"a": {"inner": "y"}, "b": ["p", "q', {"a": {"inner": "y"}, "b": ["p"]}),
        ('{"a": {"inner": "y"}, "b": ["p", "q"', {"a": {"inner": "y"}, "b": ["p", "q"]}),
        ('Use {curly} braces, then {"a": "x"}', {"a": "x"}),
        ("no json here", None),
        ("[1, 2, 3]", None),
        ('{"a": "x"} }', {"a": "x"}),
    ],
)
def test_object_in_finds_the_object(text: str, found: Any) -> None:
    assert object_in(text) == found
