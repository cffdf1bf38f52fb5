from __future__ import annotations

import json
from typing import Any

import pytest

from contextfold import Memory, Session, View
from contextfold.core.errors import InvalidInput
from contextfold.core.folds import Fold
from contextfold.core.messages import text_of
from contextfold.strategies import Always, Pipeline
from contextfold.strategies.base import ViewState
from contextfold.strategies.checked import PINNED_HEADER
from contextfold.strategies.koog import (
    CODE_AGENT_CONCEPTS,
    FACTS_HEADER,
    TLDR_HEADER,
    Concept,
    RetrieveFacts,
    WholeHistory,
    code_agent,
    retrieve_facts,
    whole_history,
)
from contextfold.strategies.transcript import HISTORY_OPEN
from contextfold.testing import ScriptedModel

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
CONCEPTS = [
    Concept("goal", "What is the user's goal?"),
    Concept("files", "Which files were changed?", "multiple"),
]


def tag(i: int) -> str:
    """A number-free label, so the messages hold no must-keep items."""
    return LETTERS[i // 26 % 26] + LETTERS[i % 26]


def chat(n: int, start: int = 0) -> list[dict[str, Any]]:
    roles = ("user", "assistant")
    return [
        {"role": roles[i % 2], "content": f"Note {tag(i)} about the plan."}
        for i in range(start, start + n)
    ]


def new_session(messages: list[dict[str, Any]], system: str | None = None) -> Session:
    session = Memory().session("s", system=system)
    session.extend(messages)
    return session


def tldr_view(session: Session, model: ScriptedModel, **options: Any) -> View:
    local = options.get("predicate") is not None  # Python code runs in this process only
    return session.view("v", pipeline=whole_history(**options), llm=model, local=local)


def active(view: View, kind: str) -> Fold:
    (fold,) = [f for f in view.folds() if f.kind == kind]
    return fold


def test_whole_history_fires_above_max_messages_only() -> None:
    session = new_session(chat(200))
    model = ScriptedModel(default="They planned.")
    view = tldr_view(session, model)
    assert view.compact().folds == ()
    session.extend(chat(1, 200))
    (fold,) = view.compact().folds
    assert (fold.start, fold.end) == (1, 191)
    assert len(model.calls) == 1


def test_whole_history_fires_above_max_characters_only() -> None:
    messages = [{"role": ("user", "assistant")[i % 2], "content": "a" * 10_000} for i in range(20)]
    session = new_session(messages)
    view = tldr_view(session, ScriptedModel(default="Many letters."), keep_last=2)
    assert view.state().characters == 200_000
    assert view.compact().folds == ()
    session.append({"role": "user", "content": "b"})
    (fold,) = view.compact().folds
    assert (fold.start, fold.end) == (1, 19)


def test_whole_history_fires_on_the_predicate() -> None:
    seen: list[int] = []

    def predicate(state: ViewState) -> bool:
        seen.append(state.message_count)
        return state.message_count > 12

    session = new_session(chat(12))
    view = tldr_view(session, ScriptedModel(default="Short."), predicate=predicate)
    assert view.compact().folds == ()
    session.extend(chat(2, 12))
    (fold,) = view.compact().folds
    assert (fold.start, fold.end) == (1, 4)
    assert seen[:2] == [12, 14]


def test_keeps_the_last_messages_and_renders_the_tldr_in_their_place() -> None:
    session = new_session(chat(30), system="You code.")
    view = tldr_view(session, ScriptedModel(default="They planned a release."), max_messages=20)
    view.compact()
    rendered = view.render()
    assert rendered[0] == {"role": "system", "content": "You code."}
    assert rendered[1] == {
        "role": "user",
        "content": f"{TLDR_HEADER}\nThey planned a release.\n[folded: seq 2-21]",
    }
    assert rendered[2:] == session.history()[-10:]
    fold = active(view, "summary")
    assert (fold.start, fold.end, fold.placement) == (2, 21, "in_place")
    assert fold.data["messages_folded"] == 20
    assert fold.usage is not None and fold.usage["model"] == "scripted"
    assert fold.tokens_before == sum(session.counter.message(m) for m in session.history()[1:21])


def test_the_boundary_moves_back_to_the_start_of_a_tool_unit() -> None:
    calls = [
        {"id": f"c{k}", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
        for k in range(3)
    ]
    unit: list[dict[str, Any]] = [
        {"role": "assistant", "content": None, "tool_calls": calls},
        *({"role": "tool", "tool_call_id": f"c{k}", "content": "a.py b.py"} for k in range(3)),
    ]
    session = new_session([*chat(20), *unit, *chat(7, 20)])
    view = tldr_view(session, ScriptedModel(default="Listed files."), max_messages=20)
    view.compact()
    fold = active(view, "summary")
    assert fold.end == 20
    assert view.render()[1:] == session.history()[20:]


def test_a_new_tldr_folds_in_and_supersedes_the_previous_one() -> None:
    session = new_session(chat(30))
    model = ScriptedModel(["First TL;DR of the plan.", "Second TL;DR of the plan."])
    view = tldr_view(session, model, max_messages=20)
    view.compact()
    first = active(view, "summary")
    session.extend(chat(15, 30))
    view.compact()
    second = active(view, "summary")
    assert second.covers(first) and (second.start, second.end) == (1, 35)
    assert second.data["messages_folded"] == 35
    prompt = text_of(model.calls[1].messages[-1])
    assert f"{TLDR_HEADER}\nFirst TL;DR of the plan." in prompt
    assert "Note AA about" not in prompt and "Note BD about" in prompt
    (old,) = [f for f in view.folds(include_superseded=True) if f.id == first.id]
    assert old.superseded_by == second.id
    assert view.compact().folds == ()


def test_tldr_pins_what_it_left_out() -> None:
    messages = chat(30)
    messages[3] = {"role": "assistant", "content": "The loader is in src/io/loader.py now."}
    session = new_session(messages)
    view = tldr_view(session, ScriptedModel(default="They moved the loader."), max_messages=20)
    view.compact()
    fold = active(view, "summary")
    assert fold.data["pinned"] == ["src/io/loader.py"]
    assert fold.text.endswith(f"{PINNED_HEADER}\n- src/io/loader.py")


def test_rejected_tldr_commits_nothing() -> None:
    session = new_session(chat(30))
    model = ScriptedModel(default="Error: upstream model overloaded")
    view = tldr_view(session, model, max_messages=20)
    report = view.compact()
    assert report.failed == ("whole-history",) and report.folds == ()
    assert view.folds(include_superseded=True) == []
    assert len(model.calls) == 3


def facts_view(session: Session, model: ScriptedModel, **options: Any) -> View:
    return session.view("v", pipeline=retrieve_facts(CONCEPTS, **options), llm=model)


def test_retrieve_facts_answers_single_and_multiple_concepts() -> None:
    session = new_session(chat(30), system="You code.")
    model = ScriptedModel([{"goal": "ship version two", "files": ["a.py", "b.py", " "]}])
    view = facts_view(session, model, max_messages=20)
    report = view.compact()
    assert [f.kind for f in report.folds] == ["facts", "facts_marker"]
    facts = active(view, "facts")
    assert facts.placement == "facts"
    assert facts.data["facts"] == {"goal": "ship version two", "files": ["a.py", "b.py"]}
    assert facts.text == f"{FACTS_HEADER}\n- Goal: ship version two\n- Files:\n  - a.py\n  - b.py"
    assert model.calls[0].schema == {
        "type": "object",
        "properties": {
            "goal": {"type": "string"},
            "files": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["goal", "files"],
        "additionalProperties": False,
    }
    prompt = text_of(model.calls[0].messages[-1])
    assert "- goal (one fact): What is the user's goal?" in prompt
    assert "- files (list of facts): Which files were changed?" in prompt
    rendered = view.render()
    assert rendered[0]["content"] == "You code."
    label = f"[folded: seq {facts.start}-{facts.end}]"
    assert rendered[1] == {"role": "user", "content": f"{facts.text}\n{label}"}
    assert rendered[2] == {
        "role": "system",
        "content": "[20 earlier messages compressed into the retrieved facts above]"
        "\n[folded: seq 2-21]",
    }
    assert rendered[3:] == session.history()[-10:]
    marker = active(view, "facts_marker")
    assert (marker.start, marker.end) == (facts.start, facts.end) == (2, 21)


def test_answers_take_their_concepts_shape() -> None:
    session = new_session(chat(30))
    view = facts_view(
        session, ScriptedModel([{"goal": ["ship", "fast"], "files": "a.py"}]), max_messages=20
    )
    view.compact()
    assert active(view, "facts").data["facts"] == {"goal": "ship; fast", "files": ["a.py"]}


@pytest.mark.parametrize(
    "answer",
    [
        {"files": ["a.py"]},
        {"goal": 3, "files": []},
        {"goal": "ship", "files": [1, 2]},
        {"goal": " ", "files": []},
    ],
)
def test_unusable_answers_are_rejected_and_nothing_is_committed(answer: dict[str, Any]) -> None:
    session = new_session(chat(30))
    model = ScriptedModel(default=json.dumps(answer))
    view = facts_view(session, model, max_messages=20)
    report = view.compact()
    assert report.failed == ("retrieve-facts",)
    assert view.folds(include_superseded=True) == []
    assert len(model.calls) == 3


def test_second_cycle_updates_the_facts_from_the_new_messages() -> None:
    session = new_session(chat(30))
    model = ScriptedModel(
        [
            {"goal": "ship version two", "files": ["a.py"]},
            {"goal": "ship version three", "files": ["a.py", "c.py"]},
        ]
    )
    view = facts_view(session, model, max_messages=20)
    view.compact()
    first = active(view, "facts")
    first_marker = active(view, "facts_marker")
    session.extend(chat(15, 30))
    view.compact()
    facts, marker = active(view, "facts"), active(view, "facts_marker")
    assert (marker.start, marker.end) == (1, 35)
    assert marker.covers(first_marker) and marker.data["messages_folded"] == 35
    assert facts.tokens_before == first.tokens_after
    superseded = {f.id for f in view.folds(include_superseded=True) if f.superseded_by}
    assert superseded == {first.id, first_marker.id}
    prompt = text_of(model.calls[1].messages[-1])
    assert f"Facts retrieved earlier:\n{first.text}" in prompt
    assert "compressed into the retrieved facts" not in prompt
    assert "Note AA about" not in prompt and "Note BD about" in prompt


def test_facts_pin_what_the_answers_left_out() -> None:
    messages = chat(30)
    messages[4] = {"role": "user", "content": "Never push to main; see https://ci.example.com/run"}
    session = new_session(messages)
    model = ScriptedModel([{"goal": "ship", "files": ["https://ci.example.com/run"]}])
    view = facts_view(session, model, max_messages=20)
    view.compact()
    facts = active(view, "facts")
    (pin,) = facts.data["pinned"]
    assert pin.endswith("Never push to main; see https://ci.example.com/run")
    assert facts.text.endswith(f"{PINNED_HEADER}\n- {facts.data['pinned'][0]}")


def test_code_agent_asks_the_five_concepts() -> None:
    assert [c.id for c in CODE_AGENT_CONCEPTS] == [
        "project-structure",
        "important-achievements",
        "current-context",
        "errors-and-fixes",
        "user-requirements",
    ]
    assert CODE_AGENT_CONCEPTS[0].question == (
        "What is the project structure? List main directories, key files, and technologies used."
    )
    answer = {
        "project-structure": ["Kotlin project with Main.kt"],
        "important-achievements": ["Modified function X in A.kt"],
        "current-context": "Adding error handling to file operations",
        "errors-and-fixes": ["Fixed a compilation error by adding a type annotation"],
        "user-requirements": ["Use confirmation handlers"],
    }
    session = new_session(chat(201))
    model = ScriptedModel([answer])
    view = session.view("v", pipeline=code_agent(), llm=model)
    view.compact()
    assert model.calls[0].schema is not None
    assert list(model.calls[0].schema["properties"]) == [c.id for c in CODE_AGENT_CONCEPTS]
    prompt = text_of(model.calls[0].messages[-1])
    assert all(c.question in prompt for c in CODE_AGENT_CONCEPTS)
    facts = active(view, "facts")
    assert "- Current context: Adding error handling to file operations" in facts.text
    assert "- Errors and fixes:\n  - Fixed a compilation error" in facts.text
    assert view.render()[2:] == session.history()[-10:]


def test_concepts_are_checked() -> None:
    with pytest.raises(InvalidInput):
        Concept("x", "Why?", "several")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        Concept(" ", "Why?")
    with pytest.raises(InvalidInput):
        RetrieveFacts([])
    with pytest.raises(InvalidInput):
        RetrieveFacts([Concept("x", "Why?"), Concept("x", "How?")])


@pytest.mark.parametrize("pipeline", [whole_history(max_messages=20), code_agent(max_messages=20)])
def test_runs_with_the_offline_stand_in_when_there_is_no_model(pipeline: Pipeline) -> None:
    messages = chat(30)
    messages[6] = {"role": "user", "content": "Fix the crash in src/app/main.py please."}
    session = new_session(messages, system="You code.")
    view = session.view("v", pipeline=pipeline)
    report = view.compact()
    assert report.folds and report.failed == ()
    assert all(f.usage["model"] == "offline" for f in report.folds if f.usage is not None)
    assert view.render()[-10:] == session.history()[-10:]
    assert "src/app/main.py" in "\n".join(f.text for f in view.folds())


def test_prompt_override_and_factories() -> None:
    session = new_session(chat(30))
    model = ScriptedModel(default="Done.")
    view = tldr_view(session, model, max_messages=20, prompt="Shorten:\n{history}")
    view.compact()
    assert text_of(model.calls[0].messages[-1]).startswith(f"Shorten:\n{HISTORY_OPEN}")
    (tldr,) = whole_history(keep_last=3, name="tldr").strategies
    assert isinstance(tldr, WholeHistory) and (tldr.keep_last, tldr.name) == (3, "tldr")
    (facts,) = retrieve_facts(CONCEPTS, max_characters=50).strategies
    assert isinstance(facts, RetrieveFacts) and facts.max_characters == 50
    assert tuple(facts.concepts) == tuple(CONCEPTS)
    (agent,) = code_agent(keep_last=4).strategies
    assert isinstance(agent, RetrieveFacts)
    assert (agent.concepts, agent.keep_last) == (CODE_AGENT_CONCEPTS, 4)


def test_converges_when_the_trigger_still_fires_after_folding() -> None:
    session = new_session(chat(30))
    model = ScriptedModel(default="They planned.")
    facts_model = ScriptedModel(default=json.dumps({"goal": "ship", "files": []}))
    tldr = session.view("tldr", pipeline=Pipeline([WholeHistory(trigger=Always())]), llm=model)
    facts = session.view(
        "facts", pipeline=retrieve_facts(CONCEPTS, trigger=Always()), llm=facts_model
    )
    assert len(tldr.compact().folds) == 1
    assert len(facts.compact().folds) == 2
    assert tldr.compact().folds == facts.compact().folds == ()
    assert len(model.calls) == len(facts_model.calls) == 1


def steps(n: int, start: int = 0) -> list[dict[str, Any]]:
    """An agent's steps after its task: tool calls and their results, no user message."""
    out: list[dict[str, Any]] = []
    for k in range(start, start + n):
        call_id = f"c{tag(k)}"
        call = {"id": call_id, "type": "function", "function": {"name": "ls", "arguments": "{}"}}
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        out.append({"role": "tool", "tool_call_id": call_id, "content": f"Listing {tag(k)}."})
    return out


@pytest.mark.parametrize("preset", ["whole-history", "retrieve-facts", "code-agent"])
def test_the_latest_user_message_is_never_folded(preset: str) -> None:
    # Issue 9: these presets folded away the user's current task in agent runs.
    task = {"role": "user", "content": "Fix the failing test in the loader, please."}
    session = new_session([*chat(6), task, *steps(15)], system="You code.")
    seq = 8  # system, six chat messages, then the task
    assert session.history()[seq - 1] == task
    view = session.view("v", preset=preset, max_messages=20)
    for more in range(3):
        report = view.compact()
        assert report.folds, "each cycle folds something"
        in_place = [f for f in view.folds() if f.placement == "in_place"]
        assert not [f for f in in_place if f.start <= seq <= f.end]
        assert [f for f in in_place if f.end < seq], "what came before the task is folded"
        assert [f for f in in_place if f.start > seq], "and so are the steps after it"
        prompt = view.render()
        assert prompt.count(task) == 1
        assert prompt[-10:] == session.history()[-10:]
        session.extend(steps(8, 15 + 8 * more))
    # The side before the task holds nothing new after the first cycle: it is not folded again.
    before = [f for f in view.folds(include_superseded=True) if f.end < seq]
    assert len({(f.start, f.end) for f in before}) == 1
