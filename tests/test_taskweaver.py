"""The TaskWeaver compaction hooks (seed 000) over contextfold views."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from conftest import NATO

import contextfold.integrations.taskweaver as tw
from contextfold import InvalidInput
from contextfold import Memory as LogMemory
from contextfold.core.messages import Message, text_of
from contextfold.integrations.taskweaver import (
    CompactedMessage,
    CompactionProvider,
    CompactionSettings,
    CompactorConfig,
    ContextCompactor,
    Memory,
    Post,
    Round,
    load_config,
    read_prompt,
)
from contextfold.store import RAMStore
from contextfold.testing import ScriptedModel

ROOT = Path(__file__).resolve().parents[1]
WAIT = 10.0


def query(i: int) -> str:
    return f"Question {NATO[i - 1]}"


def play(memory: Memory, i: int, *, state: str = "finished", code: bool = False) -> Round:
    """Round ``i`` as TaskWeaver plays it; with ``code`` the Planner asks the CodeInterpreter."""
    round = memory.create_round(query(i))
    round.add_post(Post.create(query(i), "User", "Planner"))
    if code:
        round.add_post(Post.create(f"Instruction {NATO[i - 1]}", "Planner", "CodeInterpreter"))
        round.add_post(Post.create(f"Result {NATO[i - 1]}", "CodeInterpreter", "Planner"))
    round.add_post(Post.create(f"Answer {NATO[i - 1]}", "Planner", "User"))
    round.change_round_state(state)  # type: ignore[arg-type]
    return round


def sent(model: ScriptedModel, call: int = -1) -> str:
    return text_of(model.calls[call].messages[-1])


def compactor(
    memory: Memory,
    role: str,
    model: ScriptedModel,
    config: CompactorConfig,
) -> ContextCompactor:
    c = ContextCompactor(config, model, lambda: memory.conversation.rounds)
    memory.register_compaction_provider(role, c)
    return c


class Gate:
    """A model reply that blocks until released, so a compaction is caught mid-flight."""

    def __init__(self) -> None:
        self.called = threading.Event()
        self.release = threading.Event()

    def __call__(self, messages: Sequence[Message]) -> str:
        self.called.set()
        self.release.wait(WAIT)
        return "Late summary."


def test_api_names_and_signatures_are_the_seeds() -> None:
    assert tw.__all__ == sorted(tw.__all__, key=lambda n: (not n[0].isupper(), n))
    for name in tw.__all__:
        assert getattr(tw, name) is not None
    params: dict[Callable[..., object], list[str]] = {
        Memory.create_round: ["self", "user_query"],
        Memory.on_round_added: ["self", "callback"],
        Memory.register_compaction_provider: ["self", "role", "provider"],
        Memory.get_role_rounds: ["self", "role", "include_failure_rounds"],
        ContextCompactor.__init__: ["self", "config", "llm_api", "rounds_getter", "role", "budget"],
        ContextCompactor.notify_rounds_changed: ["self", "total_rounds"],
        ContextCompactor.get_compaction: ["self"],
        ContextCompactor.start: ["self"],
    }
    for fn, names in params.items():
        assert list(inspect.signature(fn).parameters) == names, fn
    assert (
        inspect.signature(Memory.get_role_rounds).parameters["include_failure_rounds"].default
        is False
    )
    assert CompactorConfig() == CompactorConfig(
        threshold=10, retain_recent=3, prompt_template_path=""
    )
    assert CompactedMessage(start_index=1, end_index=7, summary="s").end_index == 7
    c = ContextCompactor(CompactorConfig(), ScriptedModel(), list, role="Planner", budget=900)
    assert isinstance(c, CompactionProvider)
    assert (c.view.name, c.view.budget) == ("Planner", 900)
    assert c.stop() is True  # never started


def test_to_system_message_is_the_seeds_format() -> None:
    message = CompactedMessage(1, 12, "Loaded the data.\nPlotted it.")
    assert message.to_system_message() == (
        "[Conversation History Summary (Rounds 1-12)]\nLoaded the data.\nPlotted it."
    )


def test_rounds_are_logged_and_callbacks_hear_the_round_count() -> None:
    memory = Memory("s")
    heard: list[int] = []

    def broken(total: int) -> None:
        raise RuntimeError("listener bug")

    memory.on_round_added(broken)
    memory.on_round_added(heard.append)
    first = play(memory, 1, code=True)
    play(memory, 2)
    assert heard == [1, 2]
    assert [r.user_query for r in memory.conversation.rounds] == [query(1), query(2)]
    history = memory.session.history()
    assert history[0] == {
        "role": "user",
        "content": query(1),
        "meta": {"round_id": first.id, "round": 1, "state": "created"},
    }
    # The User post is the round's query: it is not logged a second time.
    assert [(m["role"], m.get("name")) for m in history[:4]] == [
        ("user", None),
        ("assistant", "Planner"),
        ("assistant", "CodeInterpreter"),
        ("assistant", "Planner"),
    ]
    assert history[2]["meta"] == {
        "round_id": first.id,
        "round": 1,
        "post": 2,
        "send_to": "Planner",
        "state": "created",
    }
    assert history[4]["meta"]["round"] == 2


def test_posts_that_would_break_the_round_structure_are_refused() -> None:
    memory = Memory("s")
    old = play(memory, 1)
    current = memory.create_round(query(2))
    current.add_post(Post.create(query(2), "User", "Planner"))
    logged = len(memory.session.history())
    with pytest.raises(InvalidInput) as late:
        old.add_post(Post.create("late", "Planner", "User"))
    assert late.value.field == "round"
    with pytest.raises(InvalidInput) as second:
        current.add_post(Post.create("and another thing", "User", "Planner"))
    assert second.value.field == "send_from"
    with pytest.raises(InvalidInput) as state:
        current.change_round_state("done")  # type: ignore[arg-type]
    assert state.value.field == "state"
    assert len(old.post_list) == 2 and len(current.post_list) == 1
    assert len(memory.session.history()) == logged


def test_get_role_rounds_filters_posts_and_leaves_failed_rounds_out() -> None:
    memory = Memory("s")
    play(memory, 1, code=True)
    play(memory, 2, code=True, state="failed")
    play(memory, 3)
    rounds, compaction = memory.get_role_rounds("CodeInterpreter")
    assert compaction is None
    assert [r.user_query for r in rounds] == [query(1), query(3)]
    assert [[p.message for p in r.post_list] for r in rounds] == [
        ["Instruction alpha", "Result alpha"],
        [],
    ]
    planner, _ = memory.get_role_rounds("Planner", include_failure_rounds=True)
    assert [r.state for r in planner] == ["finished", "failed", "finished"]
    assert [len(r.post_list) for r in planner] == [4, 4, 2]
    planner[0].post_list[0].message = "edited copy"
    planner[0].post_list.clear()
    assert memory.conversation.rounds[0].post_list[0].message == query(1)
    assert len(memory.conversation.rounds[0].post_list) == 4


def test_seed_timeline_one_compacted_message_replaced_each_cycle() -> None:
    memory = Memory("s")
    for i in range(1, 11):
        play(memory, i)
    model = ScriptedModel(["Summary seven.", "Summary twelve.", "Summary seventeen."])
    c = compactor(memory, "Planner", model, CompactorConfig(threshold=7, retain_recent=3))
    c.start()
    try:
        # State 1: rounds 1..10 -> CompactedMessage(1..7), agent sees it + 8, 9, 10.
        assert c.wait_idle(WAIT)
        assert c.get_compaction() == CompactedMessage(1, 7, "Summary seven.")
        first = sent(model, 0)
        assert "Round 1: Question alpha" in first and "Round 7: Question golf" in first
        assert "Round 8" not in first and "Previous Summary" not in first
        assert "  [assistant Planner -> User]: Answer golf" in first
        rounds, compaction = memory.get_role_rounds("Planner")
        assert compaction is not None
        assert [r.user_query for r in rounds[compaction.end_index :]] == [
            query(8),
            query(9),
            query(10),
        ]
        # State 2: rounds 1..15 -> previous summary + rounds 8..12 -> CompactedMessage(1..12).
        for i in range(11, 16):
            play(memory, i)
        assert c.wait_idle(WAIT)
        assert len(model.calls) == 2
        second = sent(model, 1)
        assert "[Previous Summary (Rounds 1-7)]:\nSummary seven." in second
        assert "Round 8: Question hotel" in second and "Round 12: Question lima" in second
        assert "Round 7" not in second and "Round 13" not in second
        assert c.get_compaction() == CompactedMessage(1, 12, "Summary twelve.")
        # State 3: rounds 1..20 -> CompactedMessage(1..17), agent sees it + 18, 19, 20.
        for i in range(16, 21):
            play(memory, i)
        assert c.wait_idle(WAIT)
        assert "[Previous Summary (Rounds 1-12)]:\nSummary twelve." in sent(model, 2)
        assert "Round 13: Question mike" in sent(model, 2)
        rounds, compaction = memory.get_role_rounds("Planner")
        assert compaction == CompactedMessage(1, 17, "Summary seventeen.")
        assert [r.user_query for r in rounds[compaction.end_index :]] == [
            query(18),
            query(19),
            query(20),
        ]
        assert len(c.view.folds()) == 1  # replaced, not accumulated
        assert len(c.view.folds(include_superseded=True)) == 3
    finally:
        c.stop()


def test_compaction_runs_in_the_background_and_never_blocks() -> None:
    memory = Memory("s")
    gate = Gate()
    c = compactor(memory, "Planner", ScriptedModel(default=gate), CompactorConfig(2, 1))
    c.start()
    try:
        for i in range(1, 4):
            play(memory, i)
        assert gate.called.wait(WAIT)
        began = time.perf_counter()
        for i in range(4, 9):
            play(memory, i)
        rounds, compaction = memory.get_role_rounds("Planner")
        assert time.perf_counter() - began < 0.5
        assert compaction is None and c.get_compaction() is None
        assert len(rounds) == 8
        gate.release.set()
        assert c.wait_idle(WAIT)
        compaction = c.get_compaction()
        assert compaction is not None and compaction.summary == "Late summary."
        assert compaction.end_index == 7  # caught up with the rounds added meanwhile
    finally:
        gate.release.set()
        c.stop()


def test_stop_is_prompt_and_an_abandoned_compaction_never_commits() -> None:
    memory = Memory("s")
    gate = Gate()
    c = compactor(memory, "Planner", ScriptedModel(default=gate), CompactorConfig(1, 0))
    c.start()
    for i in range(1, 4):
        play(memory, i)
    assert gate.called.wait(WAIT)
    began = time.perf_counter()
    assert c.stop() is False  # a job was running and is abandoned
    assert time.perf_counter() - began < 0.5
    gate.release.set()
    time.sleep(0.2)
    assert c.get_compaction() is None
    assert c.view.folds(include_superseded=True) == []
    assert len(memory.conversation.rounds) == 3


def test_per_agent_views_are_isolated_and_raw_rounds_untouched(tmp_path: Path) -> None:
    planner_prompt = tmp_path / "planner.txt"
    planner_prompt.write_text("PLANNER PROMPT\n{content}\n", encoding="utf-8")
    code_prompt = tmp_path / "code.yaml"
    code_prompt.write_text("content: |\n  CODE PROMPT\n\n  {content}\n", encoding="utf-8")
    memory = Memory("s")
    planner_model = ScriptedModel(default="Planner summary.")
    code_model = ScriptedModel(default="Code summary.")
    planner = compactor(
        memory, "Planner", planner_model, CompactorConfig(3, 1, str(planner_prompt))
    )
    coder = compactor(
        memory, "CodeInterpreter", code_model, CompactorConfig(3, 1, str(code_prompt))
    )
    for i in range(1, 6):
        play(memory, i, code=True)
    snapshot = [r.to_dict() for r in memory.conversation.rounds]
    objects = list(memory.conversation.rounds)
    history = memory.session.history()
    planner.start()
    coder.start()
    try:
        assert planner.wait_idle(WAIT) and coder.wait_idle(WAIT)
        assert sent(planner_model).startswith("PLANNER PROMPT\n<history>\nRound 1: Question alpha")
        assert "Answer alpha" in sent(planner_model)
        assert sent(code_model).startswith("CODE PROMPT\n\n<history>\nRound 1: Question alpha")
        assert "Result alpha" in sent(code_model) and "Answer" not in sent(code_model)
        for role, text in (("Planner", "Planner summary."), ("CodeInterpreter", "Code summary.")):
            compaction = memory.get_role_rounds(role)[1]
            assert compaction is not None and compaction.end_index == 4
            assert compaction.summary.startswith(text)  # then the pinned role names
        assert (planner.view.session, planner.view.name) == (memory.session, "Planner")
        assert (coder.view.session, coder.view.name) == (memory.session, "CodeInterpreter")
        planner_ids = {f.id for f in planner.view.folds(include_superseded=True)}
        coder_ids = {f.id for f in coder.view.folds(include_superseded=True)}
        assert planner_ids and coder_ids and not planner_ids & coder_ids
        assert [r.to_dict() for r in memory.conversation.rounds] == snapshot
        assert all(a is b for a, b in zip(memory.conversation.rounds, objects, strict=True))
        assert memory.session.history() == history
    finally:
        planner.stop()
        coder.stop()


def test_failed_rounds_are_hidden_from_the_summary_and_indices_still_line_up() -> None:
    memory = Memory("s")
    model = ScriptedModel(default="Summary.")
    c = compactor(memory, "Planner", model, CompactorConfig(3, 1))
    for i in range(1, 6):
        play(memory, i, state="failed" if i == 2 else "finished")
    c.start()
    try:
        assert c.wait_idle(WAIT)
        assert "bravo" not in sent(model)
        assert "Round 3: Question delta" in sent(model)  # numbers count the rounds the agent sees
        rounds, compaction = memory.get_role_rounds("Planner")
        assert compaction == CompactedMessage(1, 3, "Summary.")
        assert [r.user_query for r in rounds[compaction.end_index :]] == [query(5)]
        everything, counted = memory.get_role_rounds("Planner", include_failure_rounds=True)
        assert counted == CompactedMessage(1, 4, "Summary.")
        assert [r.user_query for r in everything[counted.end_index :]] == [query(5)]
    finally:
        c.stop()


def test_standalone_compactor_logs_the_rounds_it_is_given() -> None:
    rounds: list[Round] = []

    def add(i: int) -> None:
        round = Round.create(query(i))
        rounds.append(round)
        c.notify_rounds_changed(len(rounds))
        round.add_post(Post.create(query(i), "User", "Planner"))
        round.add_post(Post.create(f"Instruction {NATO[i - 1]}", "Planner", "CodeInterpreter"))
        round.add_post(Post.create(f"Answer {NATO[i - 1]}", "Planner", "User"))

    model = ScriptedModel(default="Standalone summary.")
    getter: Callable[[], list[Round]] = lambda: rounds  # noqa: E731
    c = ContextCompactor(CompactorConfig(3, 1), model, getter)
    add(1)
    add(2)
    c.start()
    try:
        for i in range(3, 6):
            add(i)
            assert c.wait_idle(WAIT)
        assert c.get_compaction() == CompactedMessage(1, 3, "Standalone summary.")
        prompt = sent(model)
        assert "Round 3: Question charlie" in prompt and "Round 4" not in prompt
        # No role: every post is read, as the seed's compactor reads them.
        assert "[assistant Planner -> CodeInterpreter]: Instruction alpha" in prompt
        assert "[assistant Planner -> User]: Answer alpha" in prompt
        assert c.view.name == "compactor" and len(c.log.session.history()) == 5 * 3 - 2
    finally:
        c.stop()


def test_a_compactor_started_before_registering_follows_the_memory() -> None:
    memory = Memory("s")
    model = ScriptedModel(default="Bound summary.")
    c = ContextCompactor(
        CompactorConfig(2, 1), model, lambda: memory.conversation.rounds, role="Planner"
    )
    c.start()
    memory.register_compaction_provider("Planner", c)
    try:
        for i in range(1, 5):
            play(memory, i)
            assert c.wait_idle(WAIT)
        assert c.view.session is memory.session
        assert memory.get_role_rounds("Planner")[1] == CompactedMessage(1, 2, "Bound summary.")
    finally:
        c.stop()


def test_config_from_json_and_toml(tmp_path: Path) -> None:
    (tmp_path / "prompts").mkdir()
    for name in ("planner.txt", "code.txt"):
        (tmp_path / "prompts" / name).write_text("Summarize:\n{content}\n", encoding="utf-8")
    json_file = tmp_path / "taskweaver_config.json"
    json_file.write_text(
        '{"llm.api_key": "ignored", "compaction.enabled": false, "compaction.threshold": 7,'
        ' "compaction.retain_recent": 2, "planner.compaction_prompt_path": "prompts/planner.txt",'
        ' "code_interpreter.compaction_prompt_path": "prompts/code.txt"}',
        encoding="utf-8",
    )
    settings = load_config(json_file)
    assert (settings.enabled, settings.threshold, settings.retain_recent) == (False, 7, 2)
    assert settings.compactor_config("Planner") == CompactorConfig(
        7, 2, str(tmp_path / "prompts" / "planner.txt")
    )
    assert settings.compactor_config("CodeInterpreter").prompt_template_path == str(
        tmp_path / "prompts" / "code.txt"
    )
    assert settings.compactor_config("Reviewer") == CompactorConfig(7, 2, "")
    toml_file = tmp_path / "config.toml"
    toml_file.write_text(
        '[compaction]\nthreshold = 5\n\n[planner]\ncompaction_prompt_path = "prompts/planner.txt"\n'
        '\n[code_interpreter]\n"compaction_prompt_path" = "prompts/code.txt"\n',
        encoding="utf-8",
    )
    toml = load_config(toml_file)
    assert (toml.enabled, toml.threshold, toml.retain_recent) == (True, 5, 3)
    assert toml.prompt_path("code_interpreter") == str(tmp_path / "prompts" / "code.txt")
    flat = tmp_path / "flat.toml"
    flat.write_text('"compaction.retain_recent" = 4\n', encoding="utf-8")
    assert load_config(flat) == CompactionSettings(retain_recent=4)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('{"compaction.treshold": 7}', "compaction.treshold"),
        ('{"compaction.threshold": "7"}', "compaction.threshold"),
        ('{"compaction.retain_recent": -1}', "compaction.retain_recent"),
        ('{"compaction.enabled": "yes"}', "compaction.enabled"),
        ('{"planner.compaction_prompt": "p.txt"}', "planner.compaction_prompt"),
        ('{"planner.compaction_prompt_path": "missing.txt"}', "planner.compaction_prompt_path"),
        ('{"planner.compaction_prompt_path": 3}', "planner.compaction_prompt_path"),
        ('{"compaction.threshold": 7,}', "path"),
        ("[1, 2]", "path"),
    ],
)
def test_bad_config_is_refused_naming_the_key(tmp_path: Path, text: str, field: str) -> None:
    file = tmp_path / "config.json"
    file.write_text(text, encoding="utf-8")
    with pytest.raises(InvalidInput) as err:
        load_config(file)
    assert err.value.field == field


def test_config_file_must_exist_and_be_json_or_toml(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as missing:
        load_config(tmp_path / "none.json")
    assert missing.value.field == "path"
    (tmp_path / "config.yaml").write_text("compaction.threshold: 3\n", encoding="utf-8")
    with pytest.raises(InvalidInput, match=r"\.json or \.toml"):
        load_config(tmp_path / "config.yaml")


def test_compactor_config_and_prompt_files_are_checked_up_front(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as negative:
        CompactorConfig(threshold=-1)
    assert negative.value.field == "threshold"
    seed = tmp_path / "planner_compaction_prompt.yaml"
    seed.write_text(
        "content: |\n  Summarize for a task planning agent.\n\n  {content}\nother: x\n",
        encoding="utf-8",
    )
    assert read_prompt(seed) == "Summarize for a task planning agent.\n\n{content}\n"
    no_field = tmp_path / "plain.txt"
    no_field.write_text("Summarize this.", encoding="utf-8")
    braces = tmp_path / "braces.txt"
    braces.write_text('Answer as {"summary": ...}\n{content}', encoding="utf-8")
    no_block = tmp_path / "flat.yaml"
    no_block.write_text("content: Summarize {content}\n", encoding="utf-8")
    for path in (no_field, braces, no_block, tmp_path / "missing.txt"):
        with pytest.raises(InvalidInput) as err:
            ContextCompactor(CompactorConfig(prompt_template_path=str(path)), None, list)
        assert err.value.field == "prompt_template_path"


def test_the_role_picks_the_built_in_prompt() -> None:
    memory = Memory("s")
    planner_model = ScriptedModel(default="P.")
    code_model = ScriptedModel(default="C.")
    planner = compactor(memory, "Planner", planner_model, CompactorConfig(1, 0))
    coder = compactor(memory, "CodeInterpreter", code_model, CompactorConfig(1, 0))
    for i in range(1, 4):
        play(memory, i, code=True)
    planner.start()
    coder.start()
    try:
        assert planner.wait_idle(WAIT) and coder.wait_idle(WAIT)
        assert "for a task planning agent" in sent(planner_model)
        assert "for a code execution agent" in sent(code_model)
    finally:
        planner.stop()
        coder.stop()


def test_memory_stores(tmp_path: Path) -> None:
    db = tmp_path / "tw.db"
    memory = Memory("s", store=db)
    play(memory, 1)
    memory.close()
    with LogMemory(db) as reopened_db:
        assert [m["role"] for m in reopened_db.session("s").history()] == ["user", "assistant"]
    store = RAMStore()
    first = Memory("s", store=store)
    play(first, 1)
    with pytest.raises(InvalidInput) as reopened:
        Memory("s", store=store)
    assert reopened.value.field == "session_id"
    with pytest.raises(InvalidInput) as bad:
        first.create_round(None)  # type: ignore[arg-type]
    assert bad.value.field == "user_query"
    assert len(first.conversation.rounds) == 1


def test_the_example_runs_offline_and_compacts_in_the_background() -> None:
    script = ROOT / "examples" / "taskweaver_agents.py"
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(script), "--latency", "0.05", "--pace", "0.02"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert time.perf_counter() - began < 25  # under load; the latency is 0.05 s a call
    out = done.stdout
    assert "compaction on, threshold 6, retain_recent 3; model offline" in out
    assert "round  6 failed" in out and "round 15 finished" in out
    for role in ("Planner", "CodeInterpreter"):
        assert re.search(rf"\[background\] {role} compaction now covers rounds 1-\d+", out)
        # When the last cycle was planned depends on the threads; what it leaves does not.
        final = re.search(
            rf"^{role}: \d+ msgs, (\d+) tok \((\d+) tok without compaction\); "
            r"(\d+) of 14 rounds verbatim$",
            out,
            re.M,
        )
        assert final is not None, out
        assert int(final[1]) < int(final[2])
        assert 3 <= int(final[3]) <= 6
    assert "  [Conversation History Summary (Rounds 1-" in out
    assert "15 rounds (1 failed), 59 posts, unchanged by compaction" in out
