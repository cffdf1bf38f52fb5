"""Offline compaction gives the same prompt and folds in every process.

Python salts string hashes per process (``PYTHONHASHSEED``), so iterating a set
of words can differ from run to run; a float sum over one then differs in its
last bits and ties between sentences break the other way. The same input must
give the same output, so each hash seed here must agree byte for byte: the
library's result, an incremental view's folds, and what the command line prints.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.resources import files
from pathlib import Path
from typing import Any

from conftest import DATA, load_rows

SEEDS = ("0", "1", "12345", "random")
_SCRIPT = """
import json, sys
from contextfold import Memory
from contextfold.core.errors import BudgetError
from contextfold.core.tokens import get_counter
from contextfold.memory.one_shot import compact_messages

VOLATILE = {"id", "created_at", "superseded_by"}


def plain(fold):
    out = {k: v for k, v in fold.to_dict().items() if k not in VOLATILE}
    if out["usage"]:
        out["usage"].pop("latency_s")  # wall time, not output
    return out


def at_turns(messages, steps):
    # Cut points at user messages, so no tool unit is split between appends.
    turns = [i for i, m in enumerate(messages) if m["role"] == "user"]
    cuts = sorted({turns[len(turns) * k // steps] for k in range(1, steps)} | {len(messages)})
    return [messages[a:b] for a, b in zip([0, *cuts], cuts)]


out = []
with open(sys.argv[1], encoding="utf-8") as fh:
    job = json.load(fh)
for messages in job["conversations"]:
    full = get_counter().messages(messages)
    for share in job["shares"]:
        try:
            result = compact_messages(messages, budget=int(full * share), preset="offline")
        except BudgetError:
            continue  # the system prompt and the last user message alone are over
        folds = [plain(fold) for fold in result.folds]
        out.append({"prompt": result.messages, "folds": folds})
    if job["steps"]:
        session = Memory().session("s")
        view = session.view("v", preset="offline", budget=int(full * job["shares"][0]))
        for chunk in at_turns(messages, job["steps"]):
            session.extend(chunk)
            view.compact()
            folds = [plain(f) for f in view.folds(include_superseded=True)]
            out.append({"prompt": view.render(), "folds": folds})
print(json.dumps(out, sort_keys=True))
"""


def under_each_seed(args: list[str]) -> dict[str, str]:
    """The standard output of ``args`` under each hash seed, the processes side by side."""
    children = {
        seed: subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        for seed in SEEDS
    }
    outputs = {}
    for seed, child in children.items():
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
        outputs[seed] = out
    return outputs


def compacted(tmp_path: Path, job: dict[str, Any]) -> dict[str, str]:
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job), encoding="utf-8")
    return under_each_seed([sys.executable, "-c", _SCRIPT, str(path)])


def assert_same(outputs: dict[str, str]) -> None:
    for seed in SEEDS[1:]:
        assert outputs[seed] == outputs[SEEDS[0]], f"PYTHONHASHSEED={seed} differs from 0"


def demo_messages() -> list[dict[str, Any]]:
    text = files("contextfold").joinpath("data/demo_session.json").read_text("utf-8")
    messages: list[dict[str, Any]] = json.loads(text)
    return messages


def test_offline_compaction_is_the_same_under_every_hash_seed(tmp_path: Path) -> None:
    conversations = [row["messages"] for row in load_rows("taubench_airline_dev", limit=20)]
    job = {"conversations": conversations, "shares": [0.6, 0.5, 0.4], "steps": 0}
    outputs = compacted(tmp_path, job)
    results = json.loads(outputs["0"])
    strategies = {fold["strategy"] for result in results for fold in result["folds"]}
    assert "extractive" in strategies
    assert sum(1 for result in results if result["folds"]) >= 2 * len(conversations)
    assert_same(outputs)


def test_demo_and_locomo_fold_the_same_under_every_hash_seed(tmp_path: Path) -> None:
    """The demo session, and LoCoMo dev's first conversations when the shared data is there.

    Each is compacted at several budgets at once, and replayed turn by turn into
    one view compacted after each turn, so refolds of earlier folds count too.
    """
    conversations = [demo_messages()]
    locomo = DATA / "locomo_dev.jsonl"
    if locomo.exists():
        conversations += [row["messages"] for row in load_rows("locomo_dev", limit=2)]
    job = {"conversations": conversations, "shares": [0.1, 0.05, 0.2, 0.6], "steps": 4}
    outputs = compacted(tmp_path, job)
    results = json.loads(outputs["0"])
    assert len(results) == len(conversations) * 8
    strategies = {fold["strategy"] for result in results for fold in result["folds"]}
    assert {"extractive", "masking"} <= strategies
    refolds = [f for r in results for f in r["folds"] if f["strategy"] == "extractive"]
    assert len({(f["start"], f["end"]) for f in refolds}) > len(conversations)
    assert_same(outputs)


def test_cli_demo_and_compact_print_the_same_under_every_hash_seed(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "contextfold.cli"]
    demo = under_each_seed([*cli, "demo"])
    assert "Rendered prompt" in demo["0"]
    # The wall time is the one row that may differ.
    assert_same({seed: re.sub(r"time .*", "", out) for seed, out in demo.items()})
    path = tmp_path / "demo.json"
    path.write_text(json.dumps(demo_messages()), encoding="utf-8")
    compact = under_each_seed([*cli, "compact", str(path), "--budget", "4000", "--json"])
    for seed, out in compact.items():
        result = json.loads(out)
        del result["seconds"]  # wall time, not output
        compact[seed] = json.dumps(result, sort_keys=True)
    assert json.loads(compact["0"])["folds"]
    assert_same(compact)
