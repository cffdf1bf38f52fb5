"""The one judge of model answers: no bad answer becomes a fold; a summary quoting errors does.

The bad answers are the corpus in ``src/contextfold/testing/bad_answers.txt`` (one a line).
Each is served, as it is and filled into the JSON a strategy asks for, to every
model preset by a scripted model, and through a real HTTP server on 127.0.0.1
speaking OpenAI's protocol (answering 200 with it, or with the ``refusal`` field).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import load_rows
from fake_anthropic import anthropic_reply
from fake_openai import openai_reply
from fake_providers import FakeProvider

from contextfold import Memory, preset_names
from contextfold.core.messages import Message
from contextfold.core.tokens import get_counter
from contextfold.llm import OpenAIModel, OpenAIProvider, RetryPolicy
from contextfold.llm.anthropic import AnthropicModel, AnthropicProvider
from contextfold.llm.base import Completion, Usage, material
from contextfold.strategies.answers import Expected, judge
from contextfold.strategies.checked import SummaryRejected, summarize_checked
from contextfold.testing import SchemaFilling, ScriptedModel, bad_answers

NO_MODEL = frozenset({"offline", "keep-recent", "disabled"})
# Koog's presets fire past 200 messages; the session here has about 150.
OPTIONS: dict[str, dict[str, int]] = {
    **{p: {"max_messages": 50} for p in ("whole-history", "retrieve-facts", "code-agent")},
    # Its masking step alone brings the session under the budget's high water.
    "task-state": {"threshold_tokens": 2000},
}
MODEL_PRESETS = [p for p in preset_names() if p not in NO_MODEL]
COUNTER = get_counter()


BAD = bad_answers()


def agent_runs(runs: int = 6) -> list[Message]:
    """Tau-bench runs in one session: real tool output, refusals and errors among it."""
    rows = load_rows("taubench_airline_dev", limit=runs)
    rest = [m for row in rows for m in row["messages"] if m["role"] != "system"]
    return [rows[0]["messages"][0], *rest]


def test_the_corpus_holds_the_issues_texts_and_more() -> None:
    assert len(BAD) >= 40
    for text in ("Sorry, I can't help with that.", "I can\u2019t", "502 Bad Gateway", "null", ""):
        assert text in BAD


@pytest.mark.parametrize("preset", MODEL_PRESETS)
def test_no_bad_answer_becomes_a_fold_in_any_model_preset(preset: str) -> None:
    session = Memory().session("s")
    session.extend(agent_runs())
    # Room for the whole log: the strategies fire on their own, the rescue never.
    budget = session.view("all").render_report().tokens + 500
    for n, case in enumerate(BAD):
        for model in (ScriptedModel(default=case), SchemaFilling(case)):
            name = f"v{n}-{type(model).__name__}"
            view = session.view(name, preset=preset, budget=budget, **OPTIONS.get(preset, {}))
            view.binding.configuration.give(llm=model)
            report = view.compact()
            asked = len(model.calls) if isinstance(model, ScriptedModel) else model.calls
            assert asked > 0, (preset, case)
            # Masked tool output is no answer: task-state masks before it asks.
            answered = [f for f in view.folds() if f.kind != "masked"]
            assert answered == [], (preset, type(model).__name__, case)
            assert report.failed, (preset, case)


@pytest.mark.parametrize("case", BAD)
def test_the_judge_rejects_every_bad_answer_whatever_the_material(case: str) -> None:
    material_text = "\n".join(str(m.get("content") or "") for m in agent_runs()[:60])
    expected = Expected(material_text, 600, COUNTER.text)
    verdict = judge(Completion(case, Usage("m")), expected)
    assert verdict.answer is None and verdict.reason


@pytest.fixture
def openai_server() -> FakeProvider:
    with FakeProvider("openai") as fake:
        yield fake  # type: ignore[misc]


def test_bad_answers_over_real_http_commit_nothing(openai_server: FakeProvider) -> None:
    provider = OpenAIProvider(base_url=openai_server.url, compatible=True)
    llm = OpenAIModel("local", provider=provider, timeout=5, retry=RetryPolicy(attempts=1))
    session = Memory().session("s")
    session.extend(agent_runs(1))
    for n, case in enumerate([*BAD, None]):
        # None: an empty content with OpenAI's refusal field set.
        reply = (
            openai_reply("", refusal="I'm sorry, I can't assist with that.")
            if case is None
            else openai_reply(case)
        )
        openai_server.add(reply)
        # One attempt a job: one request a case.
        view = session.view(
            f"v{n}", preset="rolling", threshold=1, retain_recent=1, attempts=1, llm=llm
        )
        report = view.compact()
        assert view.folds() == [] and report.failed, case
    assert len(openai_server.requests) == len(BAD) + 1


def test_the_openai_refusal_field_is_carried_and_rejected(openai_server: FakeProvider) -> None:
    provider = OpenAIProvider(base_url=openai_server.url, compatible=True)
    llm = OpenAIModel("local", provider=provider, timeout=5, retry=RetryPolicy(attempts=1))
    openai_server.add(openai_reply("A fine summary of the work.", refusal="I can't help."))
    completion = llm.complete([{"role": "user", "content": "hi"}])
    assert completion.refusal == "I can't help."
    openai_server.add(openai_reply("x", refusal="No."), openai_reply("I fixed src/a.py."))
    checked = summarize_checked(llm, PROMPT, source=SOURCE, max_tokens=200)
    assert checked.attempts == 2 and checked.text.startswith("I fixed src/a.py.")


def test_an_anthropic_refusal_stop_is_carried() -> None:
    with FakeProvider("anthropic") as fake:
        provider = AnthropicProvider(base_url=fake.url, api_key="k")
        llm = AnthropicModel("claude", provider=provider, timeout=5, retry=RetryPolicy(attempts=1))
        fake.add(anthropic_reply("Here is", stop_reason="refusal"), anthropic_reply("Fine."))
        assert llm.complete([{"role": "user", "content": "hi"}]).refusal == "Here is"
        assert llm.complete([{"role": "user", "content": "hi"}]).refusal is None


SOURCE = (
    "[user]: The deploy of api/v2 keeps failing; never touch infra/prod.tf.\n"
    "[tool run]: curl https://api.example.org/v2/health -> 502 Bad Gateway\n"
    "[tool run]: Traceback (most recent call last):\n"
    '  File "app/db.py", line 12, in connect\n'
    "ConnectionRefusedError: [Errno 111] Connection refused\n"
    "[assistant]: I'm sorry, but I can't restart the production database myself."
)
PROMPT: list[Message] = [{"role": "user", "content": f"Summarize.\n{material(SOURCE)}"}]
GOOD = [
    "502 Bad Gateway from https://api.example.org/v2/health: the API could not reach its "
    "database (app/db.py line 12, ConnectionRefusedError: Connection refused).",
    "The user asked why the api/v2 deploy fails. The health check answered 502 Bad Gateway; "
    "a Traceback showed Connection refused in app/db.py. I said I can't restart the "
    "production database myself. Never touch infra/prod.tf.",
    "I'm sorry, but I can't restart the production database myself, I told the user, after "
    "the health check of api/v2 gave 502 Bad Gateway and app/db.py failed with "
    "ConnectionRefusedError.",
    "I cannot reproduce the failure locally and I am unable to complete the deploy of api/v2 "
    "until the database accepts connections again.",
]


@pytest.mark.parametrize("summary", GOOD)
def test_a_summary_quoting_the_errors_it_folds_passes(summary: str) -> None:
    checked = summarize_checked(ScriptedModel([summary]), PROMPT, source=SOURCE, max_tokens=200)
    assert checked.attempts == 1 and checked.text.startswith(summary)


@pytest.mark.parametrize(
    "answer",
    [
        "The deploy of api/v2 failed. Rate limit exceeded, try again later.",
        "Summary: the deploy failed. I'm sorry, but I can't help with that.",
        "Service Unavailable: the server is temporarily unable to service your request.",
    ],
)
def test_error_wording_the_folded_material_lacks_is_rejected(answer: str) -> None:
    with pytest.raises(SummaryRejected):
        summarize_checked(ScriptedModel([answer] * 3), PROMPT, source=SOURCE, max_tokens=200)


def test_a_long_summary_opening_with_a_foreign_refusal_is_rejected() -> None:
    body = " ".join(f"Step {n} checked app/db.py again." for n in range(30))
    answer = f"As an AI language model, I cannot access your servers. {body}"
    verdict = judge(Completion(answer, Usage("m")), Expected(SOURCE, 2000, COUNTER.text))
    assert verdict.answer is None and "opening" in str(verdict.reason)
    assert judge(Completion(body, Usage("m")), Expected(SOURCE, 2000, COUNTER.text)).reason is None


def test_a_retry_says_what_was_wrong_and_passes_the_cap() -> None:
    model = ScriptedModel(["Sorry, I can\u2019t help with that.", "I fixed app/db.py."])
    summarize_checked(model, PROMPT, source=SOURCE, max_tokens=120)
    first, second = model.calls
    assert first.messages == PROMPT and first.max_tokens == 120
    assert second.max_tokens == 120
    assert second.messages[: len(PROMPT)] == PROMPT
    echoed, note = second.messages[len(PROMPT) :]
    assert echoed == {"role": "assistant", "content": "Sorry, I can\u2019t help with that."}
    assert note["role"] == "user"
    assert "refusal" in str(note["content"]) and "at most 90 words" in str(note["content"])


def test_a_failed_call_is_asked_again_unchanged() -> None:
    from contextfold.core.errors import ModelError

    model = ScriptedModel([ModelError("HTTP 503"), "I fixed app/db.py."])
    summarize_checked(model, PROMPT, source=SOURCE, max_tokens=120)
    assert model.calls[0].messages == model.calls[1].messages == PROMPT


def test_an_over_long_answer_is_trimmed_at_a_sentence_end() -> None:
    sentences = [f"I checked module number {n} of app/db.py and it was fine." for n in range(40)]
    model = ScriptedModel([" ".join(sentences)])
    checked = summarize_checked(
        model, PROMPT, source=SOURCE, max_tokens=60, pin=False, counter=COUNTER
    )
    assert checked.attempts == 1 and len(model.calls) == 1
    assert checked.text.endswith("fine.") and COUNTER.text(checked.text) <= 60
    assert checked.text == " ".join(sentences[: checked.text.count("fine.")])


def test_an_over_long_json_answer_is_trimmed_string_by_string() -> None:
    schema = {"type": "object", "required": ["summary", "facts"]}
    long = " ".join(f"Step {n} of the deploy of api/v2 went fine." for n in range(60))
    model = ScriptedModel([{"summary": long, "facts": ["app/db.py refused connections."]}])
    checked = summarize_checked(
        model, PROMPT, source=SOURCE, max_tokens=150, schema=schema, counter=COUNTER
    )
    assert checked.attempts == 1
    assert checked.data["summary"].startswith("Step 0 of") and checked.data["summary"] in long
    assert checked.data["facts"] == ["app/db.py refused connections."]
    assert COUNTER.text(json.dumps(checked.data)) <= 150


def test_an_answer_longer_than_the_range_it_replaces_is_rejected() -> None:
    answer = (
        "I fixed app/db.py " + " ".join(f"and checked log {n}" for n in range(10)) + " and stopped"
    )
    model = ScriptedModel([answer] * 3)
    with pytest.raises(SummaryRejected) as info:
        summarize_checked(model, PROMPT, source=SOURCE, max_tokens=500, tokens_before=20)
    assert "range it replaces" in info.value.reasons[0]


def test_json_answers_need_the_schemas_required_keys() -> None:
    schema = {"type": "object", "required": ["summary", "facts"]}
    model = ScriptedModel([{"summary": "I fixed app/db.py."}, {"summary": "ok", "facts": []}])
    checked = summarize_checked(model, PROMPT, source=SOURCE, max_tokens=200, schema=schema)
    assert checked.attempts == 2
    assert "facts" in str(model.calls[1].messages[-1]["content"])


def test_a_refusal_inside_json_is_a_refusal() -> None:
    schema = {"type": "object", "required": ["summary"]}
    model = ScriptedModel([{"summary": "I\u2019m unable to help with that."}] * 3)
    with pytest.raises(SummaryRejected) as info:
        summarize_checked(model, PROMPT, source=SOURCE, max_tokens=200, schema=schema)
    assert "refusal" in info.value.reasons[0]


def test_a_scripted_refusal_field_is_rejected() -> None:
    refused = Completion("A summary.", Usage("m"), refusal="I must decline.")
    model = ScriptedModel([refused, "I fixed app/db.py."])
    checked = summarize_checked(model, PROMPT, source=SOURCE, max_tokens=200)
    assert checked.attempts == 2


@pytest.mark.parametrize("case", ["Sorry, I can\u2019t help with that.", "502 Bad Gateway", "null"])
def test_the_rescue_never_folds_a_bad_answer(case: str) -> None:
    session = Memory().session("s")
    session.extend(agent_runs(2))
    model = ScriptedModel(default=case)
    # Rolling never fires here; the rescue folds what the budget cannot hold,
    # with the view's model first.
    view = session.view("v", preset="rolling", threshold=1000, budget=3000, llm=model)
    view.compact()
    rescued = [f for f in view.folds() if f.strategy == "rescue"]
    assert rescued and len(model.calls) >= 3
    for fold in rescued:
        assert (fold.usage or {}).get("model") != model.name
        assert case not in fold.text


def test_a_schema_asking_for_error_fields_gets_them() -> None:
    schema = {"type": "object", "properties": {"errors": {}, "status": {}}, "required": ["errors"]}
    answer = {"errors": ["app/db.py refused connections"], "status": "deploy blocked"}
    checked = summarize_checked(
        ScriptedModel([answer]), PROMPT, source=SOURCE, max_tokens=200, schema=schema
    )
    assert checked.attempts == 1 and checked.data == answer


def test_a_rejected_answer_is_a_failed_job_and_a_degraded_view() -> None:
    session = Memory().session("s")
    session.extend(agent_runs(1))
    model = ScriptedModel(default="I\u2019m sorry, but I can\u2019t help with that.")
    view = session.view("v", preset="rolling", threshold=1, retain_recent=1, llm=model)
    events: list[Any] = []
    view.on_event.append(events.append)
    report = view.compact()
    assert report.folds == () and view.folds() == []
    kinds = [e.kind for e in events]
    assert kinds[-2:] == ["failed", "degraded"] and "committed" not in kinds
    assert "summary rejected" in events[-2].detail and "refusal" in events[-2].detail


# -- degenerate answers: a loop is rejected before any trimming -------------------------

LOOPS = {
    "sentence": "The user wants to book a flight to SFO. " * 300,
    "line": "I fixed app/db.py.\n" + "- checked the api/v2 health endpoint again\n" * 40,
    "phrase": "Summary: " + "the agent called get_user_details and then " * 100,
    "preamble then loop": (
        "The deploy of api/v2 failed with 502 Bad Gateway because app/db.py refused "
        "connections. " + "I will keep trying to restart the database. " * 25
    ),
}


@pytest.mark.parametrize("name", list(LOOPS))
def test_a_loop_is_rejected_as_degenerate_even_when_a_trim_would_fit(name: str) -> None:
    loop = LOOPS[name]
    # A cap the loop is far over: trimming at a sentence end would leave a few repeats.
    expected = Expected(SOURCE, 120, COUNTER.text)
    verdict = judge(Completion(loop, Usage("m")), expected)
    assert verdict.answer is None and str(verdict.reason).startswith("degenerate: ")
    model = ScriptedModel([loop] * 3)
    with pytest.raises(SummaryRejected) as info:
        summarize_checked(model, PROMPT, source=SOURCE, max_tokens=120, counter=COUNTER)
    assert all(reason.startswith("degenerate: ") for reason in info.value.reasons)


def test_a_loop_inside_a_json_field_is_degenerate() -> None:
    schema = {"type": "object", "required": ["summary"]}
    expected = Expected(SOURCE, 4000, COUNTER.text, schema=schema)
    answer = json.dumps({"summary": LOOPS["sentence"]})
    verdict = judge(Completion(answer, Usage("m"), json.loads(answer)), expected)
    assert str(verdict.reason).startswith("degenerate: one sentence repeated 300 times")


def test_a_loop_is_a_failed_event_and_no_fold() -> None:
    session = Memory().session("s")
    session.extend(agent_runs(1))
    events: list[Any] = []
    view = session.view(
        "v",
        preset="rolling",
        threshold=1,
        retain_recent=1,
        llm=ScriptedModel(default=LOOPS["line"]),
    )
    view.on_event.append(events.append)
    report = view.compact()
    assert report.failed == ("rolling",) and view.folds() == []
    (failed,) = [e for e in events if e.kind == "failed"]
    assert "degenerate: one sentence repeated 40 times" in failed.detail


LEGIT = {
    "paths": "Files changed:\n"
    + "\n".join(f"- src/contextfold/strategies/module_{n}.py" for n in range(200)),
    "paths with a note": "\n".join(
        f"- /home/user/project/src/app/widgets/button_{n}/index.tsx: updated imports"
        for n in range(100)
    ),
    "steps": " ".join(f"Step {n}: I checked log {n} and found no error." for n in range(40)),
    "like groups": "\n".join(
        "I looked up the reservation and the user's flights." for _ in range(3)
    ),
}


@pytest.mark.parametrize("name", list(LEGIT))
def test_long_lists_and_steps_are_not_degenerate(name: str) -> None:
    expected = Expected(SOURCE, 4000, COUNTER.text)
    verdict = judge(Completion(LEGIT[name], Usage("m")), expected)
    assert verdict.reason is None


def test_real_messages_are_not_degenerate() -> None:
    expected = Expected(SOURCE, 100_000, COUNTER.text)
    texts = [str(m.get("content") or "") for m in agent_runs(20)]
    long = [t for t in texts if len(t.split()) >= 40]
    assert len(long) >= 20
    reasons = [judge(Completion(t, Usage("m")), expected).reason or "" for t in long]
    assert not [r for r in reasons if r.startswith("degenerate")]


def test_repetition_the_material_holds_is_not_the_models_loop() -> None:
    line = "Reminder: the flight to SFO leaves at 09:00 from gate B12."
    repetitive = "\n".join(f"[tool reminder]: {line}" for _ in range(30))
    answer = "\n".join([line] * 30)
    assert (
        judge(Completion(answer, Usage("m")), Expected(repetitive, 4000, COUNTER.text)).reason
        is None
    )
    reason = judge(Completion(answer, Usage("m")), Expected(SOURCE, 4000, COUNTER.text)).reason
    assert str(reason).startswith("degenerate: one sentence repeated 30 times")
