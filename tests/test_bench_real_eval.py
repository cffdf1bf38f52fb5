"""bench/real_eval.py against a scripted OpenAI-compatible server: its figures are the answers'.

The scripted model answers a question with its gold answer when the prompt it
was given holds that answer, and says it does not know otherwise; as judge it
says CORRECT when the gold answer is in the graded answer. So the full
context answers every question, a prompt that dropped a fact misses it, and
the bench's counts can be checked against the verdicts the server gave.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from fake_openai import openai_reply
from fake_providers import FakeProvider, Reply, Request

BENCH = Path(__file__).resolve().parents[1] / "bench"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

FACTS = [
    ("What is the name of Ana's dog?", "Biscuit", "My dog is called Biscuit, he is two now."),
    ("Which city did Ben move to?", "Tallinn", "I finally moved to Tallinn last spring."),
    ("What instrument does Ana play?", "cello", "I have been practising the cello every night."),
    (
        "What did Ben bake on Sunday?",
        "rye bread",
        "On Sunday I baked rye bread for the neighbours.",
    ),
    ("Where did Ana go hiking?", "Picos de Europa", "We went hiking in the Picos de Europa."),
    ("What car does Ben drive?", "a green Skoda", "I drive a green Skoda these days."),
]
FILLER = "That sounds lovely, tell me more about how the week went and what comes next."


def chat(questions: int) -> dict[str, Any]:
    """A two-person chat stating one fact every few turns, the facts' questions with evidence."""
    messages: list[dict[str, Any]] = []
    asked = []
    for question, answer, said in FACTS[:questions]:
        for _ in range(5):
            messages.append({"role": "user", "name": "Ana", "content": FILLER})
            messages.append({"role": "assistant", "name": "Ben", "content": FILLER})
        asked.append(
            {"question": question, "answer": answer, "evidence": [len(messages)], "category": 4}
        )
        messages.append({"role": "user", "name": "Ana", "content": said})
        messages.append({"role": "assistant", "name": "Ben", "content": "Good to know!"})
    return {"messages": messages, "questions": asked}


def write_data(folder: Path) -> None:
    """LoCoMo-shaped rows (the second, of the checking half, is the one measured) and the
    agent runs of the test fixtures."""
    with (folder / "locomo_dev.jsonl").open("w", encoding="utf-8") as fh:
        for i in range(2):
            fh.write(json.dumps({"id": f"chat-{i}", **chat(len(FACTS))}) + "\n")
    for name in ("taubench_airline_dev", "openhands_example"):
        with gzip.open(FIXTURES / f"{name}.jsonl.gz", "rt", encoding="utf-8") as fh:
            (folder / f"{name}.jsonl").write_text(fh.read(), encoding="utf-8")


def text(messages: list[Mapping[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages)


class Scripted:
    """The model and the judge. Asked a question, the model repeats the prompt it was given,
    so it is right exactly when that prompt holds the gold; the judge says CORRECT when the
    gold is in the answer, and keeps its verdicts on questions and on probes apart."""

    def __init__(self) -> None:
        self.verdicts: dict[str, list[bool]] = {"question": [], "probe": []}

    def __call__(self, request: Request) -> Reply:
        messages = request.body["messages"]
        last = str(messages[-1].get("content") or "")
        gold = re.search(r"^Gold answer: (.*)$", last, re.M)
        if gold is not None:
            graded = re.search(r"Answer to grade: (.*?)\n\nThe answer is CORRECT", last, re.S)
            correct = graded is not None and gold.group(1).lower() in graded.group(1).lower()
            kind = "probe" if last.startswith("The conversation said:") else "question"
            self.verdicts[kind].append(correct)
            return openai_reply("CORRECT" if correct else "WRONG")
        if "Question: " in last:
            return openai_reply(text(messages[:-1]))
        return openai_reply("The two talked about their week.")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Scripted]:
    data = tmp_path_factory.mktemp("data")
    write_data(data)
    scripted = Scripted()
    with FakeProvider("openai") as server:
        server.answer("POST", "/v1/chat/completions", scripted)
        done = subprocess.run(
            [
                sys.executable,
                str(BENCH / "real_eval.py"),
                "--quick",
                "--json",
                "--base-url",
                f"{server.url}#scripted",
                "--questions",
                "5",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env={"CONTEXTFOLD_DATA": str(data), "PATH": str(Path(sys.executable).parent)},
        )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "[qa] done in" in done.stderr
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures, scripted


def test_the_full_context_answers_every_question_it_was_asked(
    run: tuple[dict[str, Any], Scripted],
) -> None:
    figures, _ = run
    qa = figures["qa"]
    assert qa["questions_asked"] == {"chat-1": 5}  # the measured half's row, 5 of its 6
    full = qa["per_arm"]["full"]
    assert (full["n"], full["correct"], full["accuracy"]) == (5, 5, 1.0)
    assert full["ci95"][1] == 1.0 and 0.5 < full["ci95"][0] < 0.6


def test_each_arm_counts_the_verdicts_the_judge_gave(run: tuple[dict[str, Any], Scripted]) -> None:
    figures, scripted = run
    arms = figures["qa"]["per_arm"]
    assert set(arms) >= {"full", "offline@10%", "offline@20%", "keep-recent@10%"}
    assert all(score["n"] == 5 for score in arms.values())
    verdicts = scripted.verdicts["question"]
    assert sum(score["correct"] for score in arms.values()) == sum(verdicts)
    assert len(verdicts) == 5 * len(arms)
    # Plain trimming at 10% keeps the last fact only: the earlier ones are gone.
    assert arms["keep-recent@10%"]["correct"] < arms["full"]["correct"]
    run_figures = figures["qa"]["run"]
    assert run_figures["judge_calls"] == len(verdicts)
    assert run_figures["answer_calls"] == len(verdicts)
    assert run_figures["seconds"] > 0


def test_without_a_llama_server_it_says_why_and_exits_0(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-python"
    done = subprocess.run(
        [sys.executable, str(BENCH / "real_eval.py"), "--quick", "--json"],
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


def test_probe_scores_per_arm_and_type_count_the_probe_verdicts(
    run: tuple[dict[str, Any], Scripted],
) -> None:
    figures, scripted = run
    if "probes" not in figures:
        pytest.skip(f"this contextfold eval has no --probes ({figures['missing']})")
    scores = figures["probes"]["per_arm"]
    arms = {key: score for key, score in scores.items() if "/" not in key}
    assert {"full", "keep-recent@10%", "offline@10%"} <= set(arms)
    verdicts = scripted.verdicts["probe"]
    assert sum(score["correct"] for score in arms.values()) == sum(verdicts)
    assert sum(score["n"] for score in arms.values()) == len(verdicts) > 0
    for arm, score in arms.items():
        types = [s for key, s in scores.items() if key.startswith(f"{arm}/")]
        assert sum(s["n"] for s in types) == score["n"]
        assert sum(s["correct"] for s in types) == score["correct"]
    # The full run holds every probe's gold; plain trimming at 10% holds fewer.
    assert arms["full"]["correct"] == arms["full"]["n"]
    assert arms["keep-recent@10%"]["correct"] < arms["full"]["correct"]
    assert figures["probes"]["run"]["judge_calls"] == len(verdicts)


@pytest.mark.parametrize(
    ("correct", "n", "low", "high"), [(3, 10, 0.1078, 0.6032), (0, 4, 0.0, 0.4899)]
)
def test_intervals_are_wilsons(correct: int, n: int, low: float, high: float) -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import real_eval
    finally:
        sys.path.remove(str(BENCH))
    interval = real_eval.wilson(correct, n)
    assert interval is not None
    assert math.isclose(interval[0], low, abs_tol=1e-4)
    assert math.isclose(interval[1], high, abs_tol=1e-4)
    assert real_eval.wilson(0, 0) is None


LOG = """\
Llama.generate: 4 prefix-match hit, remaining 1906 prompt tokens to eval
llama_perf_context_print:        load time =      33.24 ms
llama_perf_context_print: prompt eval time =   33887.58 ms /  1906 tokens (   17.78 ms per token)
llama_perf_context_print:        eval time =     641.12 ms /    15 runs   (   42.74 ms per token)
llama_perf_context_print:       total time =   34613.51 ms /  1921 tokens
Llama.generate: 1910 prefix-match hit, remaining 94 prompt tokens to eval
llama_perf_context_print: prompt eval time =    1112.42 ms /    94 tokens (   11.83 ms per token)
llama_perf_context_print:        eval time =     358.88 ms /     5 runs   (   71.78 ms per token)
llama_perf_context_print:       total time =    1471.30 ms /    99 tokens
"""


def test_the_server_log_gives_read_and_write_rates() -> None:
    sys.path.insert(0, str(BENCH))
    try:
        from _llama import server_speed
    finally:
        sys.path.remove(str(BENCH))
    speed = server_speed(LOG)
    assert speed["calls"] == 2
    assert speed["prompt_tokens_read"] == 1906 + 94
    assert speed["prompt_tokens_reused"] == 4 + 1910
    assert speed["tokens_written"] == 20
    assert speed["read_tokens_per_s"] == round(2000 / (33.88758 + 1.11242), 1)
    assert speed["write_tokens_per_s"] == round(20 / (0.64112 + 0.35888), 1)
