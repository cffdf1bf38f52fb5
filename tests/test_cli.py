"""The command line: in-process through ``main(argv)``, and once as a real console script."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from conftest import load_rows
from fault_server import FaultServer
from test_render import agent_run, chat

from contextfold.cli import DEMO_BUDGET, main
from contextfold.core.tokens import get_counter
from contextfold.core.units import tool_unit_faults
from contextfold.strategies import DEFAULT_PRESET, describe_presets
from contextfold.strategies.base import HIGH_WATER


@pytest.fixture
def tau(tmp_path: Path) -> Path:
    """A JSONL file of real tau-bench runs, as a user would pass one."""
    path = tmp_path / "taubench_airline_dev.jsonl"
    rows = load_rows("taubench_airline_dev", limit=10)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), "utf-8")
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def write(tmp_path: Path, name: str, data: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_compact_json_list_prints_prompt_and_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "chat.json", chat(60))
    code, out, _ = run(capsys, "compact", str(path), "--budget", "1500")
    assert code == 0
    assert "You are a careful assistant." in out
    assert "answer 59:" in out
    for word in ("messages", "tokens", "folds", "time", "1,500"):
        assert word in out


def test_compact_json_has_the_report_keys_and_never_exceeds_the_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    messages = agent_run(25, output_words=150, history=4)
    path = write(tmp_path, "agent.json", {"messages": messages})
    full = get_counter().messages(messages)
    for budget in (full // 3, full // 2, int(full / HIGH_WATER) + 1):
        data = run_json(capsys, "compact", str(path), "--budget", str(budget))
        keys = {"tokens_before", "tokens_after", "messages_before", "messages_after", "folds"}
        assert keys | {"messages"} <= set(data)
        assert data["tokens_before"] == full
        assert data["messages_before"] == len(messages)
        assert data["tokens_after"] <= budget
        assert get_counter().messages(data["messages"]) == data["tokens_after"]
        assert data["messages_after"] == len(data["messages"])
        assert tool_unit_faults(data["messages"]) == []
    assert data["folds"] == [] and data["messages"] == messages
    half = run_json(capsys, "compact", str(path), "--budget", str(full // 2))
    assert half["folds"]
    for fold in half["folds"]:
        assert {
            "kind",
            "start",
            "end",
            "text",
            "data",
            "strategy",
            "tokens_before",
            "tokens_after",
            "usage",
        } <= set(fold)
        assert fold["tokens_after"] < fold["tokens_before"]


def test_compact_jsonl_with_index(tau: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = tau.read_text(encoding="utf-8").splitlines()
    row = json.loads(rows[7])
    full = get_counter().messages(row["messages"])
    data = run_json(capsys, "compact", str(tau), "--index", "7", "--budget", str(full * 2 // 3))
    assert data["conversation_id"] == row["id"]
    assert data["messages_before"] == len(row["messages"])
    assert data["tokens_before"] == full
    assert data["tokens_after"] <= full * 2 // 3
    assert data["messages"][0]["content"] == row["messages"][0]["content"]
    first = run_json(capsys, "compact", str(tau), "--budget", str(10 * full))
    assert first["conversation_id"] == json.loads(rows[0])["id"]


def test_jsonl_content_in_a_json_file_is_read_line_by_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [json.dumps({"id": f"c{i}", "messages": chat(i + 1)}) for i in range(3)]
    path = tmp_path / "rows.json"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    data = run_json(capsys, "compact", str(path), "--index", "2", "--budget", "5000")
    assert (data["conversation_id"], data["messages_before"]) == ("c2", 7)
    single = write(tmp_path, "one.json", chat(2))
    code, _, err = run(capsys, "compact", str(single), "--index", "1", "--budget", "5000")
    assert code == 2 and "--index picks a line of a JSONL file" in err


def test_out_writes_the_rendered_prompt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "chat.json", chat(30))
    out = tmp_path / "prompt.json"
    data = run_json(capsys, "compact", str(path), "--budget", "900", "--out", str(out))
    assert json.loads(out.read_text(encoding="utf-8")) == data["messages"]


def test_encoding_option_changes_the_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "chat.json", chat(10))
    o200k = run_json(capsys, "compact", str(path), "--budget", "5000")
    approx = run_json(capsys, "compact", str(path), "--budget", "5000", "--encoding", "approx")
    assert approx["encoding"] == "approx"
    assert approx["tokens_before"] == get_counter("approx").messages(chat(10))
    assert approx["tokens_before"] != o200k["tokens_before"]


def test_malformed_json_exits_2_naming_line_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "broken.json"
    path.write_text('[\n  {"role": "user", "content": "hi"},\n  {"role": "user" "content": 1}\n]')
    code, out, err = run(capsys, "compact", str(path), "--budget", "100")
    assert code == 2
    assert out == ""
    assert "line 3" in err and "column 19" in err and "broken.json" in err


def test_malformed_jsonl_line_exits_2_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = json.dumps({"id": "a", "messages": chat(1)})
    path = tmp_path / "rows.jsonl"
    path.write_text(f"{good}\n\n{good}\n{{not json\n")
    code, _, err = run(capsys, "compact", str(path), "--index", "2", "--budget", "500")
    assert code == 2
    assert "line 4" in err
    code, _, err = run(capsys, "compact", str(path), "--index", "9", "--budget", "500")
    assert code == 2 and "index" in err and "3 conversations" in err


def test_invalid_message_exits_2_naming_index_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    messages = chat(3)
    messages[4] = {"role": "robot", "content": "beep"}
    path = write(tmp_path, "bad.json", messages)
    code, _, err = run(capsys, "compact", str(path), "--budget", "500")
    assert code == 2
    assert "message 4" in err and "'role'" in err
    row = {
        "id": "x",
        "messages": [*chat(1), {"role": "tool", "tool_call_id": "nope", "content": ""}],
    }
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"id": "ok", "messages": chat(1)}) + "\n" + json.dumps(row) + "\n")
    code, _, err = run(capsys, "compact", str(path), "--index", "1", "--budget", "500")
    assert code == 2
    assert "line 2" in err and "message 3" in err and "'tool_call_id'" in err


def test_budget_smaller_than_system_and_latest_user_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "chat.json", chat(5))
    code, out, err = run(capsys, "compact", str(path), "--budget", "20")
    assert code == 2
    assert out == ""
    assert "budget of 20 tokens" in err and "latest user message" in err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["compact", "{missing}", "--budget", "100"], "cannot read"),
        (["compact", "{chat}", "--budget", "100", "--preset", "nope"], "unknown preset 'nope'"),
        (["compact", "{chat}", "--budget", "100", "--encoding", "nope"], "unknown encoding"),
        (["compact", "{chat}", "--budget", "0"], "must be more than 0"),
        (["compact", "{chat}"], "--budget"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_2(
    argv: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chat_path = write(tmp_path, "chat.json", chat(3))
    args = [a.format(missing=tmp_path / "missing.json", chat=chat_path) for a in argv]
    code, out, err = run(capsys, *args)
    assert code == 2
    assert needle in err
    assert out == ""


def test_presets_lists_each_with_its_description_and_whether_it_needs_a_model(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = run_json(capsys, "presets")
    assert rows == [{**asdict(p), "default": p.name == DEFAULT_PRESET} for p in describe_presets()]
    assert [r["name"] for r in rows if r["default"]] == ["offline"]
    code, out, _ = run(capsys, "presets")
    assert code == 0
    rows_shown = [line for line in out.splitlines() if line.startswith("│ ")]
    lines = {line.split()[1]: line for line in rows_shown if line.split()[1] != "│"}
    assert set(lines) == {r["name"] for r in rows}
    for row in rows:
        assert f"│ {'yes' if row['model'] else 'no '} " in lines[row["name"]], row["name"]
    assert "offline (default)" in lines["offline"]
    assert "[SUMMARIZED]" in out  # descriptions are text, not rich markup


def test_demo_folds_the_shipped_session(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "demo")
    assert code == 0, err
    assert "Rendered prompt (abridged)" in out
    assert "[Conversation History Summary" in out and "left out by the cut" in out
    assert f"{DEMO_BUDGET:,}" in out


def test_shipped_demo_session_is_a_long_valid_agent_run() -> None:
    from importlib.resources import files

    from contextfold.core.messages import validate_messages
    from contextfold.memory.one_shot import compact_messages

    messages = json.loads(files("contextfold").joinpath("data/demo_session.json").read_text())
    validate_messages(messages)
    assert 150 <= len(messages) <= 250
    assert 40_000 <= get_counter().messages(messages) <= 80_000
    assert any(len(m.get("tool_calls") or ()) > 1 for m in messages)
    result = compact_messages(messages, budget=DEMO_BUDGET)
    assert result.tokens_after <= DEMO_BUDGET < result.tokens_before
    # The folds make it fit, not render's cut: the older rounds become one summary that
    # keeps the agent's tool calls, and the latest exchange stays verbatim.
    assert result.omitted == 0 and result.clipped == ()
    (summary,) = [f for f in result.folds if f.kind == "summary"]
    assert "run_tests(" in summary.text
    assert result.messages[-2:] == messages[-2:]
    assert tool_unit_faults(result.messages) == []


def test_console_script_runs_as_a_subprocess(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("contextfold")
    path = write(tmp_path, "chat.json", chat(20))
    done = subprocess.run(
        [str(script), "compact", str(path), "--budget", "800", "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tokens_after"] <= 800
    failed = subprocess.run(
        [str(script), "compact", str(path), "--budget", "5"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert failed.returncode == 2
    assert "budget of 5 tokens" in failed.stderr


GARBAGE = "Sure! I can do that. " * 40


def test_compact_with_a_model_answering_garbage_says_the_rescue_folded(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(tmp_path, "conv.json", chat(30))
    with FaultServer("ok", text=GARBAGE) as server:
        spec = server.spec()
        code, _, err = run(
            capsys, "compact", str(path), "--budget", "800", "--preset", "rolling", "--model", spec
        )
    assert code == 3
    assert "no --model given" not in err
    note = " ".join(err.split()).split("note: ", 1)[1]
    assert note.startswith(f"1 job failed with {spec} (degenerate: one sentence repeated 40 times")
    assert note.endswith("their ranges were folded by the offline rescue")


def test_compact_without_a_model_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(tmp_path, "conv.json", chat(30))
    code, _, err = run(capsys, "compact", str(path), "--budget", "800", "--preset", "rolling")
    assert code == 0
    assert "note: no --model given; model strategies ran on the offline stand-in" in err
    assert "failed with" not in err
