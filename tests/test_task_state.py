"""The task-state summary: one anchored state, merged in code, from any answer a small model gives.

The model is a scripted server on 127.0.0.1 speaking OpenAI's Chat Completions
(``fake_providers``); the parsing and merging rules are pure functions and are
tested as such; the proxy's default for agent traffic goes through a real
uvicorn server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import NATO, load_rows
from fake_openai import openai_reply
from fake_providers import FakeProvider, Request
from server_harness import running

from contextfold import JobLimits, Memory, Session, View
from contextfold.core.events import Event
from contextfold.core.messages import Message
from contextfold.core.tokens import get_counter
from contextfold.extract.artifacts import extract_artifacts
from contextfold.extract.language import detect_language
from contextfold.integrations.agent_views import agent_view_settings
from contextfold.llm import OpenAIModel, OpenAIProvider, RetryPolicy
from contextfold.server.app import create_app
from contextfold.server.proxy_request import agent_traffic
from contextfold.server.service import Service
from contextfold.server.settings import Settings
from contextfold.strategies import Pipeline, TaskStateSummary, default_preset, get_preset
from contextfold.strategies.task_sections import (
    ANCHORS,
    StateUpdate,
    TaskState,
    merged,
    parse_answer,
    rendered,
)

COUNTER = get_counter()
BUDGET = 1500


def model_of(server: FakeProvider) -> OpenAIModel:
    provider = OpenAIProvider(base_url=server.url, compatible=True)
    return OpenAIModel("local", provider=provider, timeout=10, retry=RetryPolicy(attempts=1))


@pytest.fixture
def server() -> Iterator[FakeProvider]:
    with FakeProvider("openai") as fake:
        yield fake


def chatter(i: int, words: int = 60) -> list[Message]:
    """A round with no must-keep item in it (nothing is pinned from it)."""
    body = " ".join(NATO[(i + k) % len(NATO)] for k in range(words))
    return [
        {"role": "user", "content": f"Round {NATO[i % len(NATO)]}: {body}"},
        {"role": "assistant", "content": f"Noted {NATO[i % len(NATO)]}: {body}"},
    ]


def task_view(session: Session, llm: OpenAIModel | None, **options: Any) -> View:
    return session.view(
        "v", pipeline=Pipeline([TaskStateSummary(**options)]), budget=BUDGET, llm=llm, local=True
    )


def grow(session: Session, view: View, start: int) -> int:
    """Append rounds from ``start`` until the view passes its high mark; the next index."""
    i = start
    state = view.state()
    while state.tokens <= state.high_mark(BUDGET):
        session.extend(chatter(i))
        i += 1
        state = view.state()
    return i


def asked(request: Request) -> str:
    return str(request.body["messages"][-1]["content"])


def test_merge_keeps_earlier_details_across_three_folds(server: FakeProvider) -> None:
    answers = [
        {
            "intent": ["keep the public API unchanged"],
            "artifacts": ["src/loader.py: split into read and parse", "make lint: passes"],
            "decisions": ["parse lazily: the files are large"],
            "errors": ["KeyError: 'utf-8' in read(): fixed by normalising the name"],
            "open_items": ["update docs/loader.md", "add a benchmark"],
            "next_step": "update docs/loader.md",
        },
        # The second answer forgets everything but a new artifact and the next step.
        {"artifacts": ["docs/loader.md: updated"], "next_step": "add a benchmark"},
        # The third marks an open item done and restates an artifact with newer words.
        {"done": ["update docs/loader.md"], "artifacts": ["src/loader.py: parse() cached"]},
    ]
    server.add(*(openai_reply(json.dumps(a)) for a in answers))
    session = Memory().session("s", system="You are a coding agent.")
    view = task_view(session, model_of(server), state_share=0.4)
    i = 0
    for n in range(3):
        i = grow(session, view, i)
        report = view.compact()
        assert not report.failed, report.reasons
        assert len(server.requests) == n + 1
    folds = view.folds()
    assert len(folds) == 1 and folds[0].start == 2 and folds[0].kind == "task_state"
    state = TaskState.from_data(folds[0].data["state"])
    assert state.intent == ("keep the public API unchanged",)
    assert state.artifacts == (
        "src/loader.py: parse() cached",
        "make lint: passes",
        "docs/loader.md: updated",
    )
    assert state.decisions == ("parse lazily: the files are large",)
    assert state.errors == ("KeyError: 'utf-8' in read(): fixed by normalising the name",)
    assert state.open_items == ("add a benchmark",)
    assert state.next_step == "add a benchmark"
    text = folds[0].text
    assert [text.index(a) for a in ANCHORS.values()] == sorted(
        text.index(a) for a in ANCHORS.values()
    )
    # Each request carries the previous state and only the messages folded since.
    second, third = asked(server.requests[1]), asked(server.requests[2])
    assert "KeyError: 'utf-8'" in second and "make lint: passes" in third
    first_round = chatter(0)[0]["content"]
    assert first_round in asked(server.requests[0]) and first_round not in second


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (
            'Here is the update:\n```json\n{"artifacts": ["src/a.py: created"], '
            '"next_step": "run pytest"}\n```',
            StateUpdate({"artifacts": ["src/a.py: created"]}, (), "run pytest"),
        ),
        (
            'Sure. {"errors": ["ImportError: fixed by adding __init__.py"]} Hope it helps.',
            StateUpdate({"errors": ["ImportError: fixed by adding __init__.py"]}),
        ),
        (
            "## Files\n- src/a.py: created\n* tests/test_a.py: added\n\n**Next step:** run pytest\n"
            "Done: write the plan",
            StateUpdate(
                {"artifacts": ["src/a.py: created", "tests/test_a.py: added"]},
                ("write the plan",),
                "run pytest",
            ),
        ),
        (
            "NEXT: run the suite\nARTIFACT: src/a.py edited\nERROR: KeyError, fixed",
            StateUpdate(
                {"artifacts": ["src/a.py edited"], "errors": ["KeyError, fixed"]},
                (),
                "run the suite",
            ),
        ),
        (
            "I edited the loader and the tests pass now.",
            StateUpdate(progress="I edited the loader and the tests pass now."),
        ),
        ('{"artifacts": ["src/a.py"', StateUpdate()),
        ('{"weather": "sunny"}', StateUpdate()),
        ('{"artifacts": ["null", ""], "next_step": "None"}', StateUpdate()),
    ],
)
def test_answers_are_read_into_sections_whatever_their_form(
    answer: str, expected: StateUpdate
) -> None:
    got = parse_answer(answer, "en")
    assert {k: list(v) for k, v in got.added.items()} == {
        k: list(v) for k, v in expected.added.items()
    }
    assert (tuple(got.done), got.next_step, got.progress) == (
        tuple(expected.done),
        expected.next_step,
        expected.progress,
    )


def test_french_headings_are_read_and_french_is_detected() -> None:
    update = parse_answer(
        "## Fichiers\n- src/a.py : créé\n## Erreurs\n- KeyError corrigée\n"
        "## Prochaine étape\nlancer les tests",
        "fr",
    )
    assert update.added == {"artifacts": ["src/a.py : créé"], "errors": ["KeyError corrigée"]}
    assert update.next_step == "lancer les tests"
    assert (
        detect_language("Je voudrais que vous corrigiez le fichier et que les tests passent.")
        == "fr"
    )
    assert detect_language("Bitte ändere die Datei nicht, wir brauchen sie noch.") == "de"
    assert detect_language("src/a.py:12: KeyError") == "en"


def test_a_french_conversation_is_summarized_in_french(server: FakeProvider) -> None:
    server.add(openai_reply(json.dumps({"next_step": "lancer les tests de src/io.py"})))
    session = Memory().session("s", system="Tu es un agent.")
    i = 0
    while session.view("v0").state().tokens < BUDGET:
        session.extend(
            [
                {
                    "role": "user",
                    "content": f"Étape {i} : il faut que le fichier reste tel quel "
                    "et que les tests passent avant la fin de la journée, merci pour votre aide.",
                },
                {
                    "role": "assistant",
                    "content": "Je vais vérifier le fichier et lancer les tests "
                    "dans le dépôt, puis je vous dirai ce qui reste à faire pour la suite.",
                },
            ]
        )
        i += 1
    view = task_view(session, model_of(server))
    assert not view.compact().failed
    body = asked(server.requests[0])
    assert "Write the values in French" in body
    fold = view.folds()[0]
    assert fold.data["language"] == "fr"
    assert "## Next step\nlancer les tests de src/io.py" in fold.text


def test_a_rejected_answer_is_asked_again_once_for_less(server: FakeProvider) -> None:
    server.add(
        openai_reply("I'm sorry, but I can't help with that."),
        openai_reply("NEXT: add a benchmark\nARTIFACT: src/loader.py parsed lazily"),
    )
    session = Memory().session("s", system="You are a coding agent.")
    view = task_view(session, model_of(server))
    grow(session, view, 0)
    assert not view.compact().failed
    first, second = (r.body for r in server.requests)
    assert first != second
    assert len(json.dumps(second)) < len(json.dumps(first))
    assert first.get("response_format") == {"type": "json_object"}
    assert "response_format" not in second and "NEXT:" in asked(server.requests[1])
    fold = view.folds()[0]
    assert fold.data["request"] == "short"
    state = TaskState.from_data(fold.data["state"])
    assert state.next_step == "add a benchmark"
    assert state.artifacts == ("src/loader.py parsed lazily",)


@pytest.mark.parametrize(
    "replies",
    [
        ["I'm sorry, but I can't help with that.", "null"],
        ['{"artifacts": ["src/a.py"', "Error: 502 Bad Gateway"],
    ],
)
def test_a_second_bad_answer_fails_the_job_and_folds_nothing(
    server: FakeProvider, replies: list[str]
) -> None:
    server.add(*(openai_reply(r) for r in replies))
    session = Memory().session("s", system="You are a coding agent.")
    view = task_view(session, model_of(server))
    grow(session, view, 0)
    events: list[Event] = []
    view.on_event.append(events.append)
    report = view.compact()
    assert report.failed == ("task-state",)
    assert [e.kind for e in events].count("failed") == 1
    assert view.folds() == []
    assert len(server.requests) == 2
    assert server.requests[0].body != server.requests[1].body


def test_the_retry_stays_within_the_jobs_call_budget(server: FakeProvider) -> None:
    server.add(openai_reply("I'm sorry, but I can't help with that."))
    session = Memory().session("s", system="You are a coding agent.")
    view = task_view(session, model_of(server))
    grow(session, view, 0)
    report = view.compact(limits=JobLimits(max_calls=1))
    assert report.failed == ("task-state",) and view.folds() == []
    assert len(server.requests) == 1


def test_the_latest_user_messages_are_quoted_verbatim_within_user_share(
    server: FakeProvider,
) -> None:
    server.add(openai_reply(json.dumps({"next_step": "carry on"})))
    session = Memory().session("s", system="You are a coding agent.")
    view = task_view(session, model_of(server), user_share=0.1)
    grow(session, view, 0)
    assert not view.compact().failed
    fold = view.folds()[0]
    quoted = TaskState.from_data(fold.data["state"]).user_words
    folded_users = [
        str(m.message["content"])
        for m in session.messages()
        if m.message["role"] == "user" and fold.start <= m.seq <= fold.end
    ]
    assert quoted and quoted == tuple(folded_users[-len(quoted) :])
    assert len(quoted) < len(folded_users)
    room = BUDGET - view.state().fixed
    assert sum(COUNTER.text(q) + 2 for q in quoted) <= int(room * 0.1)
    for words in quoted:
        assert f"> {words}" in fold.text


def call(i: int, name: str, args: dict[str, str]) -> Message:
    arguments = json.dumps(args)
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": arguments}}
        ],
    }


def agent_run() -> list[Message]:
    """A coding agent's run: a failing test, an edit, a passing test, more asked."""
    return [
        {
            "role": "user",
            "content": "Fix the failing loader test. Never touch src/legacy/compat.py; "
            "the fix must land in src/io/reader.py.",
        },
        call(1, "run_shell", {"command": "pytest -q tests/test_io.py"}),
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": "FAILED tests/test_io.py::test_read - KeyError: 'utf-8'",
        },
        {
            "role": "assistant",
            "content": "I decided to normalise the encoding name because the registry is "
            "case sensitive.",
        },
        call(2, "edit_file", {"path": "src/io/reader.py", "patch": "name.lower()"}),
        {"role": "tool", "tool_call_id": "c2", "content": "ok"},
        {
            "role": "assistant",
            "content": "The test passes now. Next I will update docs/io.md.",
        },
        *[m for i in range(12) for m in chatter(i)],
        {"role": "user", "content": "Go ahead."},
    ]


def test_without_a_model_the_stand_in_writes_a_real_state_of_an_agent_run() -> None:
    session = Memory().session("s", system="You are a coding agent.")
    session.extend(agent_run())
    view = session.view("v", preset="task-state", budget=2000)
    report = view.compact()
    assert not report.failed
    (fold,) = [f for f in view.folds() if f.kind == "task_state"]
    assert fold.strategy == "task-state" and fold.usage and fold.usage["model"] == "offline"
    state = TaskState.from_data(fold.data["state"])
    assert "src/io/reader.py (edit_file)" in state.artifacts
    assert "pytest -q tests/test_io.py (run_shell)" in state.artifacts
    assert any("KeyError: 'utf-8'" in e for e in state.errors)
    assert any("because the registry is case sensitive" in d for d in state.decisions)
    assert state.next_step.startswith("Noted")  # the assistant's last statement in the range
    assert any(i.startswith("Never touch src/legacy/compat.py") for i in state.intent)
    assert state.user_words and all(w in str(agent_run()) for w in state.user_words)


def test_the_stand_in_state_of_a_recorded_agent_run_names_its_files_and_next_step() -> None:
    messages = load_rows("openhands_example", limit=1)[0]["messages"]
    session = Memory().session("s")
    session.extend(messages)
    view = session.view("v", preset="task-state", budget=4000)
    assert not view.compact().failed
    (fold,) = [f for f in view.folds() if f.kind == "task_state"]
    state = TaskState.from_data(fold.data["state"])
    folded = [m for m in messages[fold.start - 1 : fold.end]]
    called = {
        path
        for m in folded
        for c in m.get("tool_calls") or ()
        for path in extract_artifacts(c["function"]["arguments"], ("path",))
    }
    assert called and all(p in fold.text for p in called)
    said = [
        " ".join(str(m.get("content") or "").split()) for m in folded if m["role"] == "assistant"
    ]
    # The assistant's last statement in the range, its sentences as it wrote them.
    last = next(s for s in reversed(said) if s)
    assert state.next_step and state.next_step.split(" [...]")[0] in last


def test_merged_state_renders_every_anchor_once() -> None:
    state = merged(TaskState(), StateUpdate({"errors": ["E1"]}, (), "next"))
    text = rendered(state)
    for anchor in ANCHORS.values():
        assert text.count(anchor) == 1
    assert "- E1" in text and "## Next step\nnext" in text


def test_default_preset_picks_by_model_and_traffic() -> None:
    assert default_preset(model=False, agent=True) == "offline"
    assert default_preset(model=True, agent=True) == "task-state"
    assert default_preset(model=True, agent=False) == "chat"
    pipeline = get_preset("task-state")
    assert [s.name for s in pipeline.strategies] == ["masking", "task-state"] and pipeline.recall


TOOL = {
    "type": "function",
    "function": {"name": "read_file", "parameters": {"type": "object", "properties": {}}},
}


@pytest.mark.parametrize(("tools", "preset"), [(True, "task-state"), (False, "chat")])
def test_the_proxy_gives_agent_traffic_the_task_state(
    tmp_path: Path, tools: bool, preset: str
) -> None:
    with FakeProvider("openai") as upstream:
        upstream.add(openai_reply("noted"))
        settings = Settings(
            database=str(tmp_path / "cf.db"),
            auth=False,
            upstream=f"openai-compatible:{upstream.url}",
            model=f"openai-compatible:{upstream.url}#summarizer",
            runner=False,
        )
        service = Service(settings)
        try:
            with running(create_app(service)) as url:
                body: dict[str, Any] = {
                    "model": "gpt-4o",
                    "messages": [{"role": "user", "content": "Read src/a.py"}],
                }
                if tools:
                    body["tools"] = [TOOL]
                answer = httpx.post(
                    f"{url}/v1/chat/completions",
                    json=body,
                    headers={"X-Contextfold-Session": "s1"},
                    timeout=30,
                )
                assert answer.status_code == 200, answer.text
                view = httpx.get(f"{url}/api/v1/sessions/s1/views/default").json()["config"]
                assert view["preset"] == preset
        finally:
            service.close()


@pytest.mark.parametrize(
    ("given", "preset"),
    [
        ({"model": "openai:gpt-4o-mini", "budget": 8000}, "task-state"),
        ({"model": "openai:gpt-4o-mini", "preset": "rolling"}, "rolling"),
        ({"budget": 8000}, None),
    ],
)
def test_agent_adapters_give_a_view_with_a_model_the_task_state(
    given: dict[str, Any], preset: str | None
) -> None:
    settings = agent_view_settings(given)
    assert settings.get("preset") == preset
    assert {k: v for k, v in settings.items() if k != "preset"} == {
        k: v for k, v in given.items() if k != "preset"
    }


def tool_loop(start: int, steps: int) -> list[Message]:
    """An agent's steps: a call and its result, then a word on it."""
    out: list[Message] = []
    for i in range(start, start + steps):
        out.append(call(i, "read_file", {"path": f"src/mod_{i}.py"}))
        words = " ".join(NATO[(i + k) % len(NATO)] for k in range(40))
        out.append({"role": "tool", "tool_call_id": f"c{i}", "content": words})
        out.append({"role": "assistant", "content": f"Read mod {NATO[i % len(NATO)]}: {words}"})
    return out


@pytest.mark.parametrize("earlier", [False, True])
def test_the_request_being_worked_on_stays_verbatim_beside_the_state(earlier: bool) -> None:
    session = Memory().session("s", system="You are a coding agent.")
    if earlier:
        session.extend([*chatter(0), *chatter(1), *chatter(2)])
    request = "Refactor every module under src/ to drop the global cache."
    session.append({"role": "user", "content": request})
    session.extend(tool_loop(0, 14))
    view = task_view(session, None)
    assert not view.compact().failed
    folds = sorted(view.folds(), key=lambda f: f.start)
    kinds = [f.kind for f in folds]
    prompt = view.render()
    assert request in [m.get("content") for m in prompt]  # raw, never folded
    request_seq = next(m.seq for m in session.messages() if m.message.get("content") == request)
    if earlier:
        # The state precedes the request; the work since it is a marker pointing to it.
        assert kinds == ["task_state", "task_state_marker"]
        assert folds[0].end == request_seq - 1 and folds[1].start == request_seq + 1
    else:
        assert kinds == ["task_state"] and folds[0].start == request_seq + 1
    state = TaskState.from_data(folds[0].data["state"])
    assert any(a.startswith("src/mod_0.py") for a in state.artifacts)
    # The next cycle merges into that state and supersedes both folds.
    session.extend(tool_loop(14, 14))
    assert not view.compact().failed
    again = sorted(view.folds(), key=lambda f: f.start)
    assert [f.kind for f in again] == kinds and again[-1].end > folds[-1].end
    merged_state = TaskState.from_data(again[0].data["state"])
    # Earlier items go only when the state passes its share, the oldest first, and say so.
    lost = set(state.artifacts) - set(merged_state.artifacts)
    assert len(lost) <= again[0].data["items_dropped"]
    newer = {f"src/mod_{i}.py" for i in range(14, 28)}
    assert any(a.split()[0] in newer for a in merged_state.artifacts)


@pytest.mark.parametrize(
    ("wire", "body", "messages", "agent"),
    [
        ("chat_completions", {}, [{"role": "user", "content": "hi"}], False),
        ("chat_completions", {"tools": [TOOL]}, [{"role": "user", "content": "hi"}], True),
        ("chat_completions", {}, [call(1, "read_file", {"path": "a.py"})], True),
        ("messages", {}, [{"role": "user", "content": "hi"}], True),
        ("responses", {}, [{"role": "user", "content": "hi"}], True),
    ],
)
def test_agent_traffic_is_told_by_tools_calls_or_route(
    wire: str, body: dict[str, Any], messages: list[Message], agent: bool
) -> None:
    assert agent_traffic(wire, body, messages) is agent
