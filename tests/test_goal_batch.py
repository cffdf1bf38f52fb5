"""Goal batch (ADR-0041): old complete turns folded into one six-section [GOAL BATCH]."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import pytest
from test_tool_calls import EPISODIC, group_histories, grouped, tool_unit

from contextfold import InvalidInput, Memory, Session, View
from contextfold.core.events import Event
from contextfold.core.folds import Fold
from contextfold.core.messages import Message
from contextfold.core.units import tool_unit_faults
from contextfold.extract.artifacts import extract_artifacts
from contextfold.strategies import Pipeline
from contextfold.strategies.goal_batch import SCHEMA, SECTIONS, GoalBatchCompaction
from contextfold.strategies.tool_calls import ToolCallSummarization
from contextfold.testing import ScriptedModel

ADR_PARAGRAPHS = [
    "The following is a sequence of complete turns from your own recent past. Each turn is\n"
    "a user instruction followed by your execution summary. Together they represent a goal "
    "arc —\nthe user's intent may have evolved across turns through redirections and "
    "clarifications.",
    "Write a [GOAL BATCH] summary using the six-section structure below. The user's direction\n"
    "changes are first-class content — preserve them in Human Direction. Dead ends from any\n"
    "turn in the arc belong in Dead Ends. Constraints introduced at any point in the arc\n"
    "belong in Lasting Constraints.",
    "## Goal Arc\n[What was being worked on. How the goal evolved across turns if the user "
    "redirected.]",
    "## Human Direction\n[Key instructions, corrections, constraints the user introduced "
    "mid-arc. Preserves\nthe user's actual intent as it developed.]",
    "## What Was Achieved\n[Concrete outcomes: what is now in place, what passed, what was "
    "completed.]",
    "## Dead Ends\n[Approaches tried and abandoned across the arc. First-person lessons: "
    "'I tried X — abandoned because Y.']",
    "## Lasting Constraints\n[Anything from this arc that still applies to future work.]",
    "## Key Artifacts\n[Exact file paths, function names, error strings, test names.]",
    "MUST PRESERVE: user intent and mid-arc redirections, dead ends, lasting constraints,\n"
    "key artifacts (file paths, function names, error strings, test names).\n"
    "MUST NOT INCLUDE: operational detail superseded within the arc, tool call mechanics,\n"
    "intermediate states that were overwritten.\n"
    "MUST USE: first-person throughout ('I tried', 'I found', 'I abandoned') — never "
    "'the agent'.",
    "Turns to compact:",
]
KEYS = [
    "goal_arc",
    "human_direction",
    "what_was_achieved",
    "dead_ends",
    "lasting_constraints",
    "key_artifacts",
]


def history_of(messages: Sequence[Message]) -> str:
    prompt = str(messages[-1]["content"])
    return prompt.split("<history>\n", 1)[1].rsplit("\n</history>", 1)[0]


def faithful(messages: Sequence[Message]) -> str:
    """A scripted model that keeps every artifact, so nothing is pinned."""
    if "[GOAL BATCH]" in str(messages[-1]["content"]):
        items = extract_artifacts(history_of(messages))
        sections = dict.fromkeys(KEYS, "")
        sections["goal_arc"] = "I fixed the modules one after another."
        sections["key_artifacts"] = "\n".join(items)
        return json.dumps(sections)
    return json.dumps(
        {
            f"group_{n}": "## Strategy\nI read and fixed the module.\n\n## Critical Artifacts\n"
            + "\n".join(extract_artifacts(history))
            for n, history in enumerate(group_histories(messages), start=1)
        }
    )


def coding_turn(k: int) -> list[Message]:
    """A user request, one tool unit, and the final answer that closes the turn."""
    return [
        {"role": "user", "content": f"fix the bug in src/t{k}.py"},
        *tool_unit(f"t{k}"),
        {"role": "assistant", "content": f"fixed t{k}"},
    ]


def chat_turn(k: int) -> list[Message]:
    return [
        {"role": "user", "content": f"what does t{k} do?"},
        {"role": "assistant", "content": f"t{k} parses input"},
    ]


def setup(
    turns: int, model: Any, strategy: GoalBatchCompaction | None = None
) -> tuple[Session, View, list[Event]]:
    """``turns`` coding turns; each tool unit folds as it ages, so a turn completes as it closes."""
    session = Memory().session("s", system="You are a coding agent.")
    session.extend([m for k in range(turns) for m in coding_turn(k)])
    pipeline = Pipeline(
        [
            ToolCallSummarization(batch_tokens=0, keep_recent=0, batch_size=1),
            strategy or GoalBatchCompaction(),
        ]
    )
    view = session.view("v", pipeline=pipeline, llm=model)
    events: list[Event] = []
    view.on_event.append(events.append)
    return session, view, events


def goal_batches(view: View) -> list[Fold]:
    return sorted((f for f in view.folds() if f.kind == "goal_batch"), key=lambda f: f.start)


def seq_of(session: Session, content: str) -> int:
    return next(i + 1 for i, m in enumerate(session.history()) if m.get("content") == content)


def after(prompt: list[Message], content: str) -> int:
    """Rendered messages after the one with ``content``."""
    return len(prompt) - 1 - next(i for i, m in enumerate(prompt) if m.get("content") == content)


def test_a_growing_run_fires_when_six_complete_turns_are_twenty_messages_old() -> None:
    """Changed from three: a run the next old turn extends waits to fill its batch."""
    session, view, _ = setup(12, ScriptedModel(default=faithful))
    view.compact()
    assert goal_batches(view) == []
    prompt = view.render()
    # Each closed turn renders as user, [SUMMARIZED], answer: a fold counts as one message.
    assert after(prompt, "fixed t4") >= 20 > after(prompt, "fixed t5")
    session.extend(coding_turn(12))
    view.compact()
    (batch,) = goal_batches(view)
    assert batch.data["turn_count"] == 6
    assert (batch.start, batch.end) == (
        seq_of(session, "fix the bug in src/t0.py"),
        seq_of(session, "fixed t5"),
    )
    assert batch.data["user_seqs"] == [
        seq_of(session, f"fix the bug in src/t{k}.py") for k in range(6)
    ]
    # The [SUMMARIZED] folds inside are superseded, the ones after stay.
    inside = [f for f in view.folds(include_superseded=True) if batch.start <= f.start <= batch.end]
    assert [f.superseded_by for f in inside if f.id != batch.id] == [batch.id] * 6
    prompt = view.render()
    label = f"[folded: seq {batch.start}-{batch.end}]"
    assert prompt[1] == {"role": "assistant", "content": f"{batch.text}\n{label}"}
    assert prompt[2] == {"role": "user", "content": "fix the bug in src/t6.py"}
    assert tool_unit_faults(prompt) == []


def test_at_most_six_turns_a_batch_and_a_new_run_starts_after_a_goal_batch() -> None:
    session, view, _ = setup(15, ScriptedModel(default=faithful))
    view.compact()
    (first,) = goal_batches(view)
    assert first.data["turn_count"] == 6
    assert first.end == seq_of(session, "fixed t5")
    for k in range(15, 18):
        session.extend(coding_turn(k))
        view.compact()
        assert len(goal_batches(view)) == 1  # turns 6.. are old, the run still grows
    session.extend(coding_turn(18))
    view.compact()
    first_again, second = goal_batches(view)
    assert first_again.id == first.id
    assert second.data["turn_count"] == 6
    assert (second.start, second.end) == (first.end + 1, seq_of(session, "fixed t11"))


def unanswered_turn(k: int) -> list[Message]:
    """A turn whose last call never got its result: a raw call no strategy folds."""
    call = {"id": f"lost{k}", "type": "function", "function": {"name": "run", "arguments": "{}"}}
    turn = coding_turn(k)
    return [*turn[:-1], {"role": "assistant", "content": None, "tool_calls": [call]}, turn[-1]]


def test_an_incomplete_turn_ends_a_run_and_is_never_folded() -> None:
    session = Memory().session("s", system="You are a coding agent.")
    turns = [coding_turn(0), coding_turn(1), chat_turn(2), coding_turn(3), coding_turn(4)]
    turns += [unanswered_turn(5)] + [coding_turn(k) for k in range(6, 19)]
    session.extend([m for t in turns for m in t])
    view = session.view(
        "v",
        pipeline=Pipeline(
            [
                ToolCallSummarization(batch_tokens=0, keep_recent=0),
                GoalBatchCompaction(plain_turns=False),
            ]
        ),
        llm=ScriptedModel(default=faithful),
    )
    view.compact()
    batches = goal_batches(view)
    # Runs 0-1 and 3-4 are too short: turn 2 has no [SUMMARIZED], turn 5 a raw call.
    assert [b.data["turn_count"] for b in batches] == [6]
    assert batches[0].start == seq_of(session, "fix the bug in src/t6.py")
    summarized_5 = [
        f for f in view.folds() if f.start == seq_of(session, "fix the bug in src/t5.py") + 1
    ]
    assert summarized_5 and summarized_5[0].data["summary_type"] == "tool_calls"
    prompt = view.render()
    kept = (
        "fix the bug in src/t0.py",
        "fixed t1",
        "what does t2 do?",
        "t2 parses input",
        "fixed t5",
    )
    for content in kept:
        assert any(m.get("content") == content for m in prompt)


def test_six_sections_in_order_empty_ones_omitted_and_metadata_kept() -> None:
    listed: list[str] = []

    def answer(messages: Sequence[Message]) -> str:
        if "[GOAL BATCH]" not in str(messages[-1]["content"]):
            return faithful(messages)
        listed.extend(extract_artifacts(history_of(messages)))
        return json.dumps(
            {
                "goal_arc": "I fixed t0, then t1 and t2 as the user extended the request.",
                "human_direction": "  ",
                "what_was_achieved": "## What Was Achieved\nAll three modules pass their tests.",
                "dead_ends": "",
                "lasting_constraints": "Keep the public names of every module.",
                "key_artifacts": listed,
            }
        )

    _, view, _ = setup(13, ScriptedModel(default=answer))
    view.compact()
    (batch,) = goal_batches(view)
    assert batch.data["pinned"] == []
    assert "src/t1.py" in listed and "f_t2" in listed
    assert batch.text == (
        "[GOAL BATCH]\n## Goal Arc\nI fixed t0, then t1 and t2 as the user extended the request."
        "\n\n## What Was Achieved\nAll three modules pass their tests."
        "\n\n## Lasting Constraints\nKeep the public names of every module."
        "\n\n## Key Artifacts\n" + "\n".join(f"- {a}" for a in listed)
    )
    assert list(batch.data["sections"]) == [
        "Goal Arc",
        "What Was Achieved",
        "Lasting Constraints",
        "Key Artifacts",
    ]
    assert batch.kind == "goal_batch" and batch.strategy == "goal_batch"
    label = f"[folded: seq {batch.start}-{batch.end}]"
    assert batch.messages == ({"role": "assistant", "content": f"{batch.text}\n{label}"},)
    assert batch.data["summarized"] is True
    assert batch.data["summary_type"] == "goal_batch"
    assert batch.data["turn_count"] == 6
    assert batch.data["tokens_saved"] == batch.tokens_before - batch.tokens_after > 0
    assert batch.usage is not None and batch.usage["model"] == "scripted"


def test_the_committed_event_and_a_log_line_report_turns_and_tokens(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, view, events = setup(13, ScriptedModel(default=faithful))
    with caplog.at_level(logging.INFO, logger="contextfold"):
        view.compact()
    (batch,) = goal_batches(view)
    committed = [e for e in events if e.kind == "committed" and e.strategy == "goal_batch"]
    (event,) = committed
    assert event.data["kinds"] == ["goal_batch"] and event.data["folds"] == [batch.id]
    assert (event.start, event.end) == (batch.start, batch.end)
    assert event.tokens_before == batch.tokens_before
    assert event.tokens_after == batch.tokens_after
    assert event.tokens_before - event.tokens_after == batch.data["tokens_saved"]
    assert event.usage == batch.usage
    line = (
        f"goal batch v: 6 turns compacted (seq {batch.start}..{batch.end}), "
        f"{batch.tokens_before} -> {batch.tokens_after} tokens, {batch.data['tokens_saved']} saved"
    )
    assert line in caplog.messages


def test_the_prompt_is_adr_0041s_with_the_turns_as_history() -> None:
    model = ScriptedModel(default=faithful)
    _, view, _ = setup(13, model)
    view.compact()
    (call,) = [c for c in model.calls if "[GOAL BATCH]" in str(c.messages[-1]["content"])]
    assert call.schema == SCHEMA
    assert set(SCHEMA["properties"]) == set(KEYS)
    assert all(p == {"type": "string"} for p in SCHEMA["properties"].values())
    assert call.max_tokens == 1200
    assert call.messages[0] == {"role": "system", "content": EPISODIC}
    prompt = call.messages[1]["content"]
    for paragraph in ADR_PARAGRAPHS:
        assert paragraph in prompt
    turns = history_of(call.messages)
    assert turns.startswith("--- Turn 1 ---\n[user]: fix the bug in src/t0.py\n[SUMMARIZED]: ")
    assert "\n[assistant]: fixed t0\n\n--- Turn 2 ---\n[user]: fix the bug in src/t1.py\n" in turns
    assert turns.endswith("[assistant]: fixed t5")
    assert "--- Turn 7 ---" not in turns


@pytest.mark.parametrize(
    "bad",
    [
        json.dumps(dict.fromkeys(KEYS, "")),
        "## Goal Arc\nI fixed things.",
        json.dumps({"goal_arc": {"nested": "object"}}),
    ],
)
def test_rejected_answers_fail_the_goal_batch_and_commit_nothing(bad: str) -> None:
    def answer(messages: Sequence[Message]) -> str:
        return bad if "[GOAL BATCH]" in str(messages[-1]["content"]) else faithful(messages)

    _, view, events = setup(13, ScriptedModel(default=answer))
    report = view.compact()
    assert report.failed == ("goal_batch",)
    assert goal_batches(view) == []
    assert {f.data["summary_type"] for f in view.folds()} == {"tool_calls"}
    failed = [e for e in events if e.kind == "failed"]
    assert [e.strategy for e in failed] == ["goal_batch"]
    assert "summary rejected" in failed[0].detail
    assert not any(e.kind == "committed" and e.strategy == "goal_batch" for e in events)


def test_artifacts_the_goal_batch_drops_are_pinned() -> None:
    def answer(messages: Sequence[Message]) -> str:
        if "[GOAL BATCH]" not in str(messages[-1]["content"]):
            return faithful(messages)
        return json.dumps(
            {key: "" for key, _ in SECTIONS} | {"goal_arc": "I fixed src/t0.py and src/t2.py."}
        )

    _, view, _ = setup(13, ScriptedModel(default=answer))
    view.compact()
    (batch,) = goal_batches(view)
    assert "src/t1.py" in batch.data["pinned"] and "src/t0.py" not in batch.data["pinned"]
    assert batch.text.startswith("[GOAL BATCH]\n## Goal Arc\nI fixed src/t0.py and src/t2.py.\n\n")
    assert "Pinned (verbatim from the folded messages):\n" in batch.text
    assert "\n- src/t1.py" in batch.text


def test_the_summaries_pinned_lists_are_shown_but_not_pinned_again() -> None:
    def answer(messages: Sequence[Message]) -> str:
        if "[GOAL BATCH]" not in str(messages[-1]["content"]):
            return grouped("## Strategy\nI read the module.")(messages)
        fixed = "I fixed " + ", ".join(f"src/t{k}.py" for k in range(6))
        return json.dumps({key: "" for key, _ in SECTIONS} | {"goal_arc": fixed})

    model = ScriptedModel(default=answer)
    _, view, _ = setup(13, model)
    view.compact()
    (batch,) = goal_batches(view)
    (call,) = [c for c in model.calls if "[GOAL BATCH]" in str(c.messages[-1]["content"])]
    shown = history_of(call.messages)
    assert "Pinned (verbatim from the folded messages):\n- read_file" in shown
    assert "- f_t0" in shown
    # Only what the summaries and the turns say themselves must survive the goal batch.
    assert batch.data["pinned"] == []


def test_without_a_model_the_offline_stand_in_fills_the_sections() -> None:
    _, view, _ = setup(13, None)
    view.compact()
    (batch,) = goal_batches(view)
    assert batch.usage is not None and batch.usage["model"] == "offline"
    assert batch.text.startswith("[GOAL BATCH]\n## Goal Arc\n")
    assert batch.data["turn_count"] == 6 and batch.data["sections"]


def test_parameters_change_age_count_and_batch_size() -> None:
    strategy = GoalBatchCompaction(
        min_turns_old_threshold=0, min_turns_to_compact=2, max_turns_per_batch=2
    )
    _, view, _ = setup(5, ScriptedModel(default=faithful), strategy)
    view.compact()
    # Turns 0..3 are complete (the last one's tool unit waits): two batches of two.
    assert [b.data["turn_count"] for b in goal_batches(view)] == [2, 2]


def test_bad_settings_are_refused() -> None:
    with pytest.raises(InvalidInput, match="max_turns_per_batch"):
        GoalBatchCompaction(min_turns_to_compact=4, max_turns_per_batch=3)
    with pytest.raises(InvalidInput, match="min_turns_to_compact"):
        GoalBatchCompaction(min_turns_to_compact=0)
    with pytest.raises(InvalidInput, match="turns"):
        GoalBatchCompaction(prompt="Summarize the arc.\nNo history here.")


def test_plain_chat_turns_are_complete_by_default() -> None:
    """Short chat turns the threshold step leaves raw must not become a floor."""
    session = Memory().session("s", system="You are a coding agent.")
    turns = [coding_turn(0), coding_turn(1), chat_turn(2), coding_turn(3), coding_turn(4)]
    turns += [unanswered_turn(5)] + [coding_turn(k) for k in range(6, 19)]
    session.extend([m for t in turns for m in t])
    view = session.view(
        "v",
        pipeline=Pipeline(
            [ToolCallSummarization(batch_tokens=0, keep_recent=0), GoalBatchCompaction()]
        ),
        llm=ScriptedModel(default=faithful),
    )
    view.compact()
    batches = goal_batches(view)
    assert batches[0].start == seq_of(session, "fix the bug in src/t0.py")
    assert batches[0].data["turn_count"] == 5
    assert "what does t2 do?" not in [m.get("content") for m in view.render()]
