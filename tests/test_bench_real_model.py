"""bench/real_model.py: it skips cleanly without llama.cpp, and its figures count what happened.

The real server is not needed here: the accounting (folds by the model,
rescue folds without it, calls, rejected answers with their text) is checked
with scripted models whose answers are known.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import load_rows

from contextfold import preset_names
from contextfold.core.errors import ModelError
from contextfold.core.messages import Message
from contextfold.testing import ScriptedModel

BENCH = Path(__file__).resolve().parents[1] / "bench"
ERROR_TEXT = "Error: upstream model overloaded, please retry later."


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module("real_model")
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture(scope="module")
def tau_run() -> list[dict[str, Any]]:
    rows = load_rows("taubench_airline_dev")
    messages: list[dict[str, Any]] = max(rows, key=lambda r: len(r["messages"]))["messages"]
    return messages


def test_without_a_llama_server_it_says_why_and_exits_0(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-python"
    done = subprocess.run(
        [sys.executable, str(BENCH / "real_model.py"), "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"CONTEXTFOLD_LLAMA_PYTHON": str(missing), "PATH": ""},
    )
    assert done.returncode == 0, done.stderr
    last = json.loads(done.stdout.strip().splitlines()[-1])
    assert last["skipped"] is True
    assert str(missing) in last["reason"]


def test_every_model_preset_is_run_once_and_no_model_free_one(bench: ModuleType) -> None:
    presets = bench.model_presets()
    runs = [name for names in presets.values() for name in names]
    assert len(runs) == len(set(runs))
    assert set(runs) | {"offline", "keep-recent", "disabled"} == set(preset_names())
    assert presets["rolling"] == ["rolling", "taskweaver"]
    assert presets["token-budget"] == ["token-budget", "chat"]


def test_error_answers_are_counted_as_rejected_with_their_text(
    bench: ModuleType, tau_run: list[dict[str, Any]]
) -> None:
    model = ScriptedModel(default=ERROR_TEXT)
    result = bench.run_preset(
        ["tool-calls"], tau_run, model, bench.forcing_budget(tau_run), seconds=60
    )
    assert result["folds"] == 0
    assert result["failed_jobs"] >= 1
    assert result["calls"] == len(model.calls)
    assert result["fallback_folds"] >= 1  # the rescue folded without the model
    assert any("error" in reason for reason in result["reasons"])
    assert result["rejected_answers"] == sum(result["reasons"].values())
    assert result["examples"][0]["answer"] == ERROR_TEXT


def test_usable_answers_become_model_folds(
    bench: ModuleType, tau_run: list[dict[str, Any]]
) -> None:
    summary = "I looked up the reservation and the user's flights."

    def reply(messages: Sequence[Message]) -> str:
        # Tool-call batches ask for one summary a group (group_1, ...); the rescue for text.
        asked = {int(n) for n in re.findall(r"group_(\d+)", json.dumps(messages))}
        if not asked:
            return summary
        return json.dumps({f"group_{n}": summary for n in sorted(asked)})

    model = ScriptedModel(default=reply)
    result = bench.run_preset(
        ["tool-calls"], tau_run, model, bench.forcing_budget(tau_run), seconds=60
    )
    assert result["folds"] >= 1
    assert result["strategy_folds"] >= 1
    assert result["failed_jobs"] == result["fallback_folds"] == 0
    assert result["reasons"] == {}
    assert (
        result["calls"] == len(model.calls) >= sum(result["jobs"].values())
    )  # a rescue may ask twice


def test_reasons_count_together_whatever_their_numbers(bench: ModuleType) -> None:
    one = bench.reason_key("answer of 2,911 characters exceeds the cap of 2600")
    two = bench.reason_key("answer of 4000 characters exceeds the cap of 1000")
    assert one == two == "answer of N characters exceeds the cap of N"
    assert bench.reason_key("answer looks like an error message: 'Error: x; y'") == (
        "answer looks like an error message: '…'"
    )


def test_retried_answers_count_their_reasons_and_calls_per_job(
    bench: ModuleType, tau_run: list[dict[str, Any]]
) -> None:
    summary = "I looked up the reservation and the user's flights."
    loop = "I looked up the reservation again. " * 30

    def reply(messages: Sequence[Message]) -> str:
        # The first answer of a job loops; its retry (a note follows it) is usable.
        retry = "That answer cannot be used" in json.dumps(messages[-1])
        return summary if retry else loop

    model = ScriptedModel(default=reply)
    result = bench.run_preset(
        ["rolling"], tau_run, model, bench.forcing_budget(tau_run), seconds=60
    )
    # Every summary costs two calls: a rescue job folds in two summaries, a rolling job in one.
    assert result["folds"] >= 1 and result["failed_jobs"] == 0
    assert result["calls"] == len(model.calls) == 2 * result["retried_then_accepted"]
    assert result["calls_per_job"]["max"] in (2, 4) and result["calls_per_job"]["mean"] >= 2
    assert result["reasons"] == {
        "degenerate: one sentence repeated N times: '…'": result["calls"] // 2
    }
    assert result["folds_within_budget"] is True


def test_a_preset_whose_model_never_folds_is_not_within_budget(
    bench: ModuleType, tau_run: list[dict[str, Any]]
) -> None:
    model = ScriptedModel(default=ERROR_TEXT)
    result = bench.run_preset(
        ["rolling"], tau_run[:12], model, bench.forcing_budget(tau_run[:12]), seconds=60
    )
    assert result["folds"] == 0 and result["folds_within_budget"] is False
    assert 1 <= result["calls_per_job"]["max"] <= 4


def test_calls_that_fail_are_failures_not_rejected_answers(
    bench: ModuleType, tau_run: list[dict[str, Any]]
) -> None:
    model = ScriptedModel(default=ModelError("local: no answer within 40.0 s"))
    result = bench.run_preset(
        ["rolling"], tau_run[:12], model, bench.forcing_budget(tau_run[:12]), seconds=60
    )
    assert result["failed_jobs"] >= 1 and result["reasons"] == {}
    assert result["rejected_answers"] == 0
    assert result["failures"] == {"call failed: local: no answer within N s": result["calls"]}
