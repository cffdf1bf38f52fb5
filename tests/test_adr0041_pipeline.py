"""ADR-0041's pipeline (tool calls, threshold, goal batch) on long coding sessions.

The floor ADR-0041 describes: once tool calls and assistant blocks are
summarized, every user message and every [SUMMARIZED] fold stays, so a long
session grows without bound. With goal batches the view stays bounded.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from conftest import load_rows
from test_goal_batch import ADR_PARAGRAPHS, KEYS, history_of
from test_tool_calls import EPISODIC, group_histories

from contextfold import Memory, View
from contextfold.core.events import Event
from contextfold.core.messages import Message
from contextfold.core.units import tool_unit_faults
from contextfold.extract.artifacts import extract_artifacts
from contextfold.strategies import Pipeline
from contextfold.strategies.goal_batch import GoalBatchCompaction
from contextfold.strategies.threshold import ThresholdSummarization
from contextfold.strategies.tool_calls import ToolCallSummarization
from contextfold.testing import ScriptedModel

TURNS = 40
BUDGET = 8000
MODULES = ["loader", "config", "cache", "router", "parser", "auth", "storage", "metrics"]
REQUESTS = [
    "refactor the {m} module so it reads settings once",
    "actually, make {m} support yaml too",
    "add validation to {m} and reject unknown keys",
    "the {m} tests are flaky, find out why",
    "rename the helpers in {m} to match the style guide",
]


def tool_call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def tool_output(rng: random.Random, name: str, module: str) -> str:
    if name == "read_file":
        body = "\n".join(f"    value = settings.get(key_{i})" for i in range(rng.randint(30, 60)))
        return f"def load_{module}(settings):\n{body}\n    return value\n"
    if name == "run_tests":
        passed = rng.randint(5, 40)
        lines = [f"tests/test_{module}.py::test_case PASSED" for _ in range(passed)]
        if rng.random() < 0.4:
            lines.append(f"tests/test_{module}.py::test_edge FAILED - KeyError: 'timeout'")
        return "\n".join(lines)
    hits = [f"src/{module}.py:{rng.randint(1, 400)}: settings.get(" for _ in range(20)]
    return "\n".join(hits)


def coding_turn(rng: random.Random, k: int) -> tuple[Message, list[list[Message]], Message]:
    """A user request, several tool units (some with parallel calls), the final answer."""
    module = MODULES[k % len(MODULES)]
    user = {"role": "user", "content": REQUESTS[k % len(REQUESTS)].format(m=module)}
    units: list[list[Message]] = []
    for u in range(rng.randint(3, 6)):
        names = rng.sample(["read_file", "run_tests", "grep"], 2 if rng.random() < 0.25 else 1)
        calls = [
            tool_call(f"call_{k}_{u}_{n}", name, {"path": f"src/{module}.py"})
            for n, name in enumerate(names)
        ]
        text = f"Checking {module}, step {u}." if rng.random() < 0.5 else None
        unit: list[Message] = [{"role": "assistant", "content": text, "tool_calls": calls}]
        unit += [
            {"role": "tool", "tool_call_id": c["id"], "content": tool_output(rng, n, module)}
            for c, n in zip(calls, names, strict=True)
        ]
        units.append(unit)
    answer = {"role": "assistant", "content": f"Done: {module} now passes its tests."}
    return user, units, answer


def coding_session(
    turns: int, seed: int = 41
) -> Iterator[tuple[Message, list[list[Message]], Message]]:
    rng = random.Random(seed)
    for k in range(turns):
        yield coding_turn(rng, k)


def model_reply(messages: Sequence[Message]) -> str:
    """A terse scripted model: keeps the first few artifacts, so the rest are pinned."""
    prompt = str(messages[-1]["content"])
    if "[GOAL BATCH]" in prompt:
        kept = extract_artifacts(history_of(messages))[:4]
        sections = dict.fromkeys(KEYS, "")
        sections["goal_arc"] = "I reworked the modules as the user asked, one turn at a time."
        sections["what_was_achieved"] = "The modules read settings once and pass their tests."
        sections["key_artifacts"] = "\n".join(kept)
        return json.dumps(sections)
    groups = group_histories(messages)
    if not groups:  # the engine's rescue asks for prose, not groups
        return "I reworked the modules one turn at a time; each now passes its tests."
    return json.dumps(
        {
            f"group_{n}": "## Strategy\nI read, grepped and tested the module.\n\n"
            "## Critical Artifacts\n" + "\n".join(extract_artifacts(history)[:4])
            for n, history in enumerate(groups, start=1)
        }
    )


@dataclass
class Run:
    view: View
    model: ScriptedModel
    events: list[Event] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    turn_end_tokens: list[int] = field(default_factory=list)
    faults: int = 0
    history: list[Message] = field(default_factory=list)


def run_session(strategies: list[Any], turns: int = TURNS) -> Run:
    """Append the session message by message, compacting before every model call."""
    session = Memory().session("s", system="You are a coding agent working in a Python repo.")
    model = ScriptedModel(default=model_reply)
    view = session.view("agent", pipeline=Pipeline(strategies), llm=model, budget=BUDGET)
    run = Run(view, model)
    view.on_event.append(run.events.append)

    def step(messages: list[Message]) -> None:
        session.extend(messages)
        run.history += copy.deepcopy(messages)
        report = view.compact()
        assert report.failed == ()
        prompt = view.render()
        run.faults += len(tool_unit_faults(prompt))
        run.tokens.append(view.state().tokens)

    for user, units, answer in coding_session(turns):
        step([user])
        for unit in units:
            step(unit)
        step([answer])
        run.turn_end_tokens.append(run.tokens[-1])
    assert session.history()[1:] == run.history
    return run


def adr_pipeline() -> list[Any]:
    return [ToolCallSummarization(), ThresholdSummarization(), GoalBatchCompaction()]


@pytest.fixture(scope="module")
def with_goal_batches() -> Run:
    return run_session(adr_pipeline())


@pytest.fixture(scope="module")
def floor_only() -> Run:
    return run_session([ToolCallSummarization(), ThresholdSummarization()])


def rescued(run: Run) -> int:
    return sum(1 for e in run.events if e.kind == "committed" and e.strategy == "rescue")


def test_without_goal_batches_the_floor_needs_the_engines_rescue(floor_only: Run) -> None:
    # Tool-call and threshold summarization alone leave every turn's user message and
    # [SUMMARIZED] folds: the view grows until the engine's rescue folds it.
    assert rescued(floor_only) > 0
    assert max(floor_only.tokens) <= BUDGET
    assert floor_only.faults == 0


def test_goal_batches_keep_the_view_bounded_as_turns_grow(
    with_goal_batches: Run, floor_only: Run
) -> None:
    run = with_goal_batches
    assert run.faults == 0
    assert max(run.tokens) <= BUDGET
    # Each tier folds in steps, so a turn may end above the threshold, not above the high water.
    assert max(run.turn_end_tokens) < 0.9 * BUDGET
    # Goal batches bound the view by themselves: the engine's rescue is never needed.
    assert rescued(run) == 0 < rescued(floor_only)
    batches = [f for f in run.view.folds() if f.kind == "goal_batch"]
    turns_in_batches = sum(f.data["turn_count"] for f in batches)
    assert all(3 <= f.data["turn_count"] <= 6 for f in batches)
    # Every turn older than the 20-message window ends up in a goal batch.
    assert turns_in_batches >= TURNS - 10
    rendered_users = [m for m in run.view.render() if m["role"] == "user"]
    assert len(rendered_users) <= 10


def test_strategies_fold_in_adr_order_and_each_tier_feeds_the_next(with_goal_batches: Run) -> None:
    committed = [e for e in with_goal_batches.events if e.kind == "committed"]
    first: dict[str, int] = {}
    for index, event in enumerate(committed):
        first.setdefault(event.strategy, index)
    assert first["tool_calls"] < first["goal_batch"]
    every = with_goal_batches.view.folds(include_superseded=True)
    by_id = {f.id: f for f in every}
    for fold in every:
        if fold.superseded_by is not None:
            assert by_id[fold.superseded_by].kind == "goal_batch"
            assert fold.data["summary_type"] in ("tool_calls", "threshold")
    for batch in (f for f in every if f.kind == "goal_batch"):
        assert batch.data["summarized"] is True and batch.data["summary_type"] == "goal_batch"
        event = next(e for e in committed if e.data["folds"] == [batch.id])
        assert event.tokens_before - event.tokens_after == batch.data["tokens_saved"] > 0


def test_the_prompts_sent_are_the_adr_texts(with_goal_batches: Run) -> None:
    calls = with_goal_batches.model.calls
    assert calls and all(c.messages[0] == {"role": "system", "content": EPISODIC} for c in calls)
    goal = [c for c in calls if "[GOAL BATCH]" in c.messages[1]["content"]]
    assert goal
    for call in goal:
        prompt = call.messages[1]["content"]
        assert all(paragraph in prompt for paragraph in ADR_PARAGRAPHS)
        assert history_of(call.messages).startswith("--- Turn 1 ---\n[user]: ")
        # Goal batches read the tier below: [SUMMARIZED] texts, never raw tool output.
        assert "[SUMMARIZED]: " in history_of(call.messages)
        assert "[tool " not in history_of(call.messages)
    tools = [c for c in calls if "tool call(s) are from your own" in c.messages[1]["content"]]
    assert tools and all("--- Operation 1 ---" in c.messages[1]["content"] for c in tools)


def test_pins_keep_what_the_terse_model_dropped(with_goal_batches: Run) -> None:
    folds = with_goal_batches.view.folds(include_superseded=True)
    pinned = [f for f in folds if f.data["pinned"]]
    assert pinned
    for fold in pinned:
        assert "Pinned (verbatim from the folded messages):" in fold.text
        assert all(f"- {item}" in fold.text for item in fold.data["pinned"])


def test_a_goal_batch_whose_answers_are_rejected_leaves_the_summaries_in_place() -> None:
    def reply(messages: Sequence[Message]) -> str:
        # Its retries (asking for the Goal Arc alone) are goal-batch calls too.
        if any("[GOAL BATCH]" in str(m["content"]) for m in messages):
            return "I'm sorry, I cannot summarize this."
        return model_reply(messages)

    session = Memory().session("s", system="You are a coding agent.")
    for user, units, answer in coding_session(12):
        session.extend([user, *(m for u in units for m in u), answer])
    view = session.view("v", pipeline=Pipeline(adr_pipeline()), llm=ScriptedModel(default=reply))
    report = view.compact()
    assert report.failed == ("goal_batch",)
    assert {f.kind for f in view.folds()} == {"summary"}
    assert tool_unit_faults(view.render()) == []


def test_real_agent_runs_through_the_whole_pipeline_offline() -> None:
    for row in load_rows("openhands_example"):
        session = Memory().session("s")
        session.extend(row["messages"])
        before = copy.deepcopy(session.history())
        answered = {m["tool_call_id"] for m in before if m["role"] == "tool"}
        view = session.view("v", pipeline=Pipeline(adr_pipeline()), budget=BUDGET)
        report = view.compact()
        assert report.failed == () and report.folds
        assert all(f.usage["model"] == "offline" for f in report.folds if f.usage is not None)
        assert report.tokens_after < report.tokens_before / 2
        prompt = view.render_report()
        assert prompt.tokens <= BUDGET
        assert tool_unit_faults(prompt.messages, answered=answered) == []
        assert session.history() == before
