"""Pins: what a view's pin rules select comes back verbatim after its folds
(``contextfold.memory.pin_rules``, ``contextfold.memory.pins``), and a call still
waiting for its results is never folded (``strategies.base.job_for``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_log import FILLER, RULES, SYSTEM, agent_log, call, reads, todo
from fastapi.testclient import TestClient
from server_harness import make_service

from contextfold import InvalidInput, Memory, Session, View
from contextfold.core.messages import Message
from contextfold.core.render import Rendered
from contextfold.core.tokens import get_counter
from contextfold.formats.anthropic import to_anthropic
from contextfold.formats.checks import prompt_faults
from contextfold.memory.bridge import standing
from contextfold.memory.filters import compile_filter
from contextfold.server.app import create_app
from contextfold.strategies.masking import ObservationMasking
from contextfold.strategies.pipeline import Pipeline


def session(memory: Memory | None = None, log: list[Message] | None = None) -> Session:
    opened = (memory or Memory()).session("s1", system=SYSTEM)
    if opened.last_seq() == 1:
        opened.extend(agent_log() if log is None else log)
    return opened


def folded(view: View) -> Rendered:
    view.compact()
    assert any(f.kind != "masked" for f in view.folds()), "the test needs a summary"
    return view.render_report()


def contents(prompt: Rendered) -> list[str]:
    return [str(m.get("content")) for m in prompt.messages]


def after_folds(prompt: Rendered) -> list[Message]:
    """The messages right after the last fold's."""
    last = max(i for i, m in enumerate(prompt.messages) if "Folded" in str(m.get("content")))
    return prompt.messages[last + 1 :]


def assert_valid(prompt: Rendered) -> None:
    """Every provider takes it, and its count is exact."""
    assert prompt.tokens == get_counter().messages(prompt.messages)
    assert prompt_faults(prompt.messages, "openai") == []
    system, turns = to_anthropic(prompt.messages)
    assert prompt_faults(turns, "anthropic", system=system) == []


def test_only_the_latest_todo_list_comes_back_right_after_the_fold_verbatim() -> None:
    s = session()
    prompt = folded(s.view("default", preset="offline", budget=1200, pins=["todo"]))
    logged = {m.seq: m.message for m in s.messages()}
    latest = [seq for seq, m in logged.items() if "todo3" in json.dumps(m)]
    assert prompt.pinned == tuple(latest)
    assert after_folds(prompt)[:2] == [logged[seq] for seq in latest]
    calls = [c for m in prompt.messages for c in m.get("tool_calls") or ()]
    assert [c["id"] for c in calls if c["function"]["name"] == "todo_write"] == ["todo3"]
    assert prompt.tokens <= 1200
    assert_valid(prompt)


def test_a_rule_file_read_early_survives_the_fold() -> None:
    s = session()
    bare = folded(s.view("bare", preset="offline", budget=1200))
    assert RULES not in contents(bare)
    prompt = folded(s.view("ruled", preset="offline", budget=1200, pins=["rules"]))
    assert RULES in contents(prompt)
    assert prompt.pinned[:2] == (3, 4)  # the Read call and its result, whole
    assert_valid(prompt)


def test_all_mode_brings_back_every_message_selected() -> None:
    s = session()
    rule = {"filter": {"tool": "todo_write"}, "mode": "all"}
    prompt = folded(s.view("default", preset="offline", budget=1200, pins=[rule]))
    shown = [c for c in contents(prompt) if c.startswith("todo list")]
    assert shown == [f"todo list {v} saved" for v in range(4)]
    assert_valid(prompt)


def test_latest_by_key_keeps_one_pin_per_file() -> None:
    log: list[Message] = [{"role": "user", "content": "Tidy the docs."}]
    for n, path in enumerate(["a.md", "b.md", "a.md"]):
        log += call(f"e{n}", "Edit", {"path": path}, f"{path} edited, pass {n}")
        log += reads(n * 10, 5)
    s = session(log=log)
    rule = {"filter": {"tool": "Edit"}, "key": "path"}
    prompt = folded(s.view("default", preset="offline", budget=700, pins=[rule]))
    edits = [c for c in contents(prompt) if c.endswith(("pass 0", "pass 1", "pass 2"))]
    assert edits == ["b.md edited, pass 1", "a.md edited, pass 2"]


def test_beyond_the_room_the_oldest_pins_are_left_out_and_a_marker_says_how_many() -> None:
    s = session()
    rule = {"filter": {"tool": "todo_write"}, "mode": "all"}
    view = s.view("default", preset="offline", budget=1200, pins=[rule], pins_share=0.1)
    prompt = folded(view)
    shown = [c for c in contents(prompt) if c.startswith("todo list")]
    assert 0 < len(shown) < 4
    assert shown == [f"todo list {v} saved" for v in range(4 - len(shown), 4)]
    left = 4 - len(shown)
    marker = f"[contextfold: {left} older pin{'s' if left > 1 else ''} left out to fit their room]"
    assert marker in contents(prompt)
    assert prompt.tokens <= 1200
    assert_valid(prompt)


def test_a_pin_still_in_the_raw_tail_is_not_repeated() -> None:
    s = session(log=agent_log(versions=1))
    view = s.view("default", preset="offline", budget=50_000, pins=["todo"])
    prompt = view.render_report()
    assert not view.folds() and prompt.pinned == ()
    assert sum(c == "todo list 0 saved" for c in contents(prompt)) == 1


def test_a_new_version_appended_replaces_the_pinned_one() -> None:
    s = session()
    view = s.view("default", preset="offline", budget=1200, pins=["todo"])
    assert "todo list 3 saved" in contents(folded(view))
    s.extend(todo(4))
    prompt = view.render_report()
    assert [c for c in contents(prompt) if c.startswith("todo list")] == ["todo list 4 saved"]
    assert prompt.pinned == ()


def test_pins_come_back_beside_provisional_folds() -> None:
    s = session()
    view = s.view("default", preset="offline", budget=4000, pins=["todo", "rules"])
    prompt = view.render_report(budget=1200)
    assert standing(prompt.folds), "the render is bridged"
    assert "todo list 3 saved" in contents(prompt) and RULES in contents(prompt)
    assert prompt.tokens <= 1200
    assert_valid(prompt)


def test_another_process_renders_the_same_pinned_prompt(tmp_path: Path) -> None:
    path = str(tmp_path / "pins.db")
    s = session(Memory(path))
    first = folded(s.view("default", preset="offline", budget=1200, pins=["todo", "rules"]))
    script = (
        "import json, sys; from contextfold import Memory; "
        "p = Memory(sys.argv[1]).session('s1').view('default').render_report(); "
        "print(json.dumps([p.messages, p.pinned]))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", script, path], capture_output=True, text=True, env=env, check=True
    )
    assert json.loads(out.stdout) == [first.messages, list(first.pinned)]


@pytest.fixture(params=["ram", "sqlite", "postgres"])
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Memory]:
    if request.param == "ram":
        yield Memory()
    elif request.param == "sqlite":
        yield Memory(str(tmp_path / "pins.db"))
    else:
        from pg import fresh_schema, require_postgres, url

        require_postgres()
        with fresh_schema() as schema:
            yield Memory(url(schema))


def test_pins_are_stored_and_read_back(memory: Memory) -> None:
    rule = {"filter": {"content": "DECISION:"}, "mode": "all"}
    memory.session("s1").view("v", pins=["todo", rule], pins_share=0.3)
    config = memory.session("s1").view("v").config
    assert list(config.pins) == ["todo", rule] and config.pins_share == 0.3
    stored = memory.session("s1").view_record("v")
    assert stored is not None and stored.config["pins"] == ["todo", rule]


@pytest.mark.parametrize(
    ("pins", "field"),
    [
        ("todo", "pins"),
        (["todo", "nope"], "pins[1]"),
        ([7], "pins[0]"),
        ([{"mode": "all"}], "pins[0].filter"),
        ([{"filter": {"tool": []}}], "pins[0].filter.tool"),
        ([{"filter": {"colour": "red"}}], "pins[0].filter.colour"),
        ([{"filter": {"role": "user"}, "mode": "newest"}], "pins[0].mode"),
        ([{"filter": {"role": "user"}, "key": "colour"}], "pins[0].key"),
        ([{"filter": {"role": "user"}, "mode": "all", "key": "tool"}], "pins[0].key"),
        ([{"filter": {"role": "user"}, "why": 1}], "pins[0].why"),
    ],
)
def test_bad_pins_are_refused_naming_the_field(pins: Any, field: str) -> None:
    view = Memory().session("s1").view("v", pins=["rules"])
    with pytest.raises(InvalidInput) as raised:
        view.update(pins=pins)
    assert raised.value.field == field
    assert view.config.pins == ("rules",)


@pytest.mark.parametrize("share", [0, 1, 1.5, True, "0.2"])
def test_a_bad_pins_share_is_refused_naming_it(share: Any) -> None:
    with pytest.raises(InvalidInput) as raised:
        Memory().session("s1").view("v", pins_share=share)
    assert raised.value.field == "pins_share"


def test_pins_over_http() -> None:
    service = make_service(auth=False, runner=False)
    with TestClient(create_app(service), base_url="http://127.0.0.1") as client:
        url = "/api/v1/sessions/s1/views/v"
        client.post("/api/v1/sessions", json={"id": "s1", "system": SYSTEM})
        put = client.put(url, json={"pins": ["todo", "rules"], "pins_share": 0.2})
        assert put.status_code == 200, put.text
        got = client.get(url).json()["config"]
        assert got["pins"] == ["todo", "rules"] and got["pins_share"] == 0.2
        bad = client.put(url, json={"pins": [{"filter": {"tool": "x"}, "mode": "newest"}]})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "pins[0].mode"
        assert client.put(url, json={"pins_share": 2.0}).status_code == 422
        assert client.get(url).json()["config"]["pins"] == ["todo", "rules"]
        logged = client.post("/api/v1/sessions/s1/messages", json={"messages": agent_log()})
        assert logged.status_code in (200, 201), logged.text
        assert client.put(url, json={"preset": "offline", "budget": 1200}).status_code == 200
        assert client.post(f"{url}/compact").status_code == 200
        rendered = client.get(f"{url}/render").json()
        pinned = rendered["report"]["pinned"]
        assert pinned and [m["content"] for m in rendered["messages"]].count(RULES) == 1
        seqs = [m["seq"] for m in client.get("/api/v1/sessions/s1/messages").json()["messages"]]
        assert set(pinned) <= set(seqs)


def pending_log() -> list[Message]:
    """Reads, then two calls at once: one answered, one (an approval) still waiting."""
    log: list[Message] = [{"role": "user", "content": "Deploy once the tests pass."}]
    log += reads(0, 6)
    both = call("run", "run_tests", {}, None)[0]
    both["tool_calls"].append(
        {"id": "ok", "type": "function", "function": {"name": "approve", "arguments": "{}"}}
    )
    return [*log, both, {"role": "tool", "tool_call_id": "run", "content": FILLER * 3}]


@pytest.mark.parametrize("folding", ["offline", "masking"])
def test_a_call_still_waiting_for_results_is_never_folded(folding: str) -> None:
    s = session(log=pending_log())
    if folding == "offline":
        view = s.view("default", preset="offline", budget=700)
    else:
        masking = ObservationMasking(keep_last=0, min_keep=0)
        view = s.view("default", pipeline=Pipeline([masking]), budget=700)
    view.compact()
    waiting = s.last_seq() - 1
    assert view.folds() and not any(f.end >= waiting for f in view.folds())
    s.append({"role": "tool", "tool_call_id": "ok", "content": "approved"})
    prompt = view.render_report()
    assert prompt.messages[-1]["content"] == "approved"
    assert_valid(prompt)


def test_the_bridge_never_folds_a_call_still_waiting_for_results() -> None:
    s = session(log=pending_log())
    view = s.view("default", preset="offline", budget=8000)
    prompt = view.render_report(budget=700)
    waiting = s.last_seq() - 1
    assert standing(prompt.folds), "the render is bridged"
    assert all(end < waiting for _, _, end in standing(prompt.folds))
    assert prompt.messages[-2].get("tool_calls") and prompt.messages[-1]["tool_call_id"] == "run"


@pytest.mark.parametrize("preset", ["offline", "tool-calls", "rolling"])
def test_pins_beside_folds_of_every_role_are_valid_for_every_provider(preset: str) -> None:
    # Folds render as user (offline), assistant (tool-calls) and system (rolling) messages.
    s = session()
    prompt = folded(s.view("default", preset=preset, budget=1200, pins=["todo", "rules"]))
    assert RULES in contents(prompt) and "todo list 3 saved" in contents(prompt)
    assert_valid(prompt)


def test_pins_go_after_the_folds_and_before_the_recall_block() -> None:
    s = session()
    view = s.view("default", preset="offline", budget=1200, pins=["todo"], recall=True)
    view.compact()
    prompt = view.render_report(query="revision")
    texts = contents(prompt)
    block = next(i for i, t in enumerate(texts) if t.startswith("[contextfold: recalled"))
    pinned = texts.index("todo list 3 saved")
    fold = max(i for i, t in enumerate(texts) if t.startswith("[Folded"))
    assert fold < pinned < block
    assert_valid(prompt)


def test_the_filter_keys_pins_use_see_tool_calls_and_their_text() -> None:
    [read, result] = call("c1", "Read", {"file_path": "/repo/AGENTS.md"}, "be kind")
    named = {**result, "name": "Read"}
    by_tool = compile_filter({"tool": ["Read", "Write"]})
    assert by_tool(read) and by_tool(named) and not by_tool(result)
    by_text = compile_filter({"content": "AGENTS.md"})
    assert by_text(read) and not by_text(result)
    assert compile_filter({"content": "be kind"})(result)


def test_the_plan_preset_pins_the_latest_plan() -> None:
    log: list[Message] = [{"role": "user", "content": "Plan the migration, then do it."}]
    log += call("p0", "ExitPlanMode", {"plan": "1. back up 2. migrate"}, "plan approved")
    log += reads(0, 5)
    log += [
        {
            "role": "assistant",
            "content": "Revised plan: migrate, then back up.",
            "meta": {"kind": "plan"},
        }
    ]
    log += reads(10, 14)
    s = session(log=log)
    prompt = folded(s.view("default", preset="offline", budget=1000, pins=["plan"]))
    assert "Revised plan: migrate, then back up." in contents(prompt)
    assert "plan approved" not in contents(prompt)
    assert_valid(prompt)
