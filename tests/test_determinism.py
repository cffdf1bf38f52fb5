"""Offline compaction gives the same prompt and folds in every process.

Python salts string hashes per process (``PYTHONHASHSEED``), so iterating a set
of words can differ from run to run; a float sum over one then differs in its
last bits and ties between sentences break the other way. The same input must
give the same output, so each hash seed here must agree byte for byte.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import load_rows

SEEDS = ("0", "1", "2", "3")
_SCRIPT = """
import json, sys
from contextfold.core.errors import BudgetError
from contextfold.core.tokens import get_counter
from contextfold.memory.compact import compact_messages

VOLATILE = {"id", "created_at", "superseded_by"}
out = []
with open(sys.argv[1], encoding="utf-8") as fh:
    conversations = json.load(fh)
for messages in conversations:
    full = get_counter().messages(messages)
    for share in (0.6, 0.5, 0.4):
        try:
            result = compact_messages(messages, budget=int(full * share), preset="offline")
        except BudgetError:
            continue  # the system prompt and the last user message alone are over
        folds = [
            {k: v for k, v in fold.to_dict().items() if k not in VOLATILE}
            for fold in result.folds
        ]
        for fold in folds:
            if fold["usage"]:
                fold["usage"].pop("latency_s")  # wall time, not output
        out.append({"prompt": result.messages, "folds": folds})
print(json.dumps(out, sort_keys=True))
"""


def compacted(path: Path) -> dict[str, str]:
    """The script's output under each seed, the processes running side by side."""
    children = {
        seed: subprocess.Popen(
            [sys.executable, "-c", _SCRIPT, str(path)],
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


def test_offline_compaction_is_the_same_under_every_hash_seed(tmp_path: Path) -> None:
    conversations = [row["messages"] for row in load_rows("taubench_airline_dev", limit=20)]
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(conversations), encoding="utf-8")
    outputs = compacted(path)
    results = json.loads(outputs["0"])
    strategies = {fold["strategy"] for result in results for fold in result["folds"]}
    assert "extractive" in strategies
    assert sum(1 for result in results if result["folds"]) >= 2 * len(conversations)
    for seed in SEEDS[1:]:
        assert outputs[seed] == outputs["0"], f"PYTHONHASHSEED={seed} differs from 0"
