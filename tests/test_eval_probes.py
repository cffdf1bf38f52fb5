"""``contextfold eval --probes``: probes made from the folded part, graded offline or by a judge
over a scripted OpenAI-compatible server, and a run that survives its models (failures
counted, ``--results`` to resume, the audit, the judge's agreement, ``--timeout``)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import load_rows
from fake_openai import openai_reply
from fake_providers import FakeProvider, Reply, Request, error_reply
from fault_server import FaultServer

from contextfold.cli import main
from contextfold.core.messages import text_of
from contextfold.evaluation.asking import BASE_TIMEOUT_S, READ_RATE, call_seconds
from contextfold.evaluation.budgets import parse_budgets
from contextfold.evaluation.inputs import load_conversations
from contextfold.evaluation.probes import PROBE_TYPES, exact_match, make_probes
from contextfold.evaluation.report import agreement_notes, probe_notes, probe_rows
from contextfold.evaluation.run import EvalSettings, evaluate
from contextfold.evaluation.scores import agreement, wilson

FILLER = [
    "Work was busy this week, lots of meetings and long emails to answer.",
    "Same here, the office coffee machine broke again and everyone complained.",
]


def project_chat() -> list[dict[str, Any]]:
    """A chat whose early part holds one of each probe type, then small talk, then an end."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful coding assistant."},
        {
            "role": "user",
            "content": "The login page crashes for Priya since the deploy on 2024-03-14.",
        },
        {
            "role": "assistant",
            "content": "I found the cause in src/auth/session_store.py where the token expires. "
            "We decided to keep sessions in Redis instead of Memcached because Redis persists "
            "them across restarts.",
        },
        {"role": "user", "content": "Please also bump the timeout in config/gateway.yaml."},
        {
            "role": "assistant",
            "content": "Done. Next I'll rerun the flaky suite tests/test_login_flow.py.",
        },
    ]
    for i in range(30):
        messages.append(
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"{FILLER[i % 2]} ({i})"}
        )
    messages.append({"role": "user", "content": "Thanks, anything else for today?"})
    messages.append({"role": "assistant", "content": "No, that is all for today."})
    return messages


def write_chat(tmp_path: Path, messages: list[dict[str, Any]] | None = None) -> Path:
    path = tmp_path / "chat.jsonl"
    row = {"id": "project", "messages": messages or project_chat()}
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code = main(["eval", *argv])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    data: dict[str, Any] = json.loads(captured.out)
    return data


def spec(fake: FakeProvider | FaultServer, name: str) -> str:
    return f"openai-compatible:{fake.url}#{name}"


PROBING = ("--presets", "offline", "--budgets", "300", "--samples", "2", "--probes", "4")


# -- making probes -------------------------------------------------------------------


def test_each_type_is_made_from_the_folded_part_of_a_chat_only() -> None:
    messages = project_chat()
    folded = 5
    probes = make_probes(messages, folded, 8)
    assert {p.type for p in probes} == set(PROBE_TYPES)
    early = "\n".join(text_of(m) for m in messages[:folded])
    for probe in probes:
        assert all(i < folded for i in probe.sources)
        assert probe.gold in early or probe.type == "continuation"
        assert exact_match(probe.keys, early)
    by_type = {p.type: p for p in probes}
    assert "src/auth/session_store.py" in {p.gold for p in probes if p.type == "artifact"}
    assert "config/gateway.yaml" in "\n".join(p.gold for p in probes if p.type == "artifact")
    assert "Redis" in by_type["decision"].gold
    assert "gateway.yaml" in by_type["continuation"].gold
    assert "rerun the flaky suite" in by_type["continuation"].gold
    assert make_probes(messages, 0, 8) == [] and make_probes(messages, folded, 0) == []
    # A code is an artifact, whole; never a name's fragment of it.
    booked = [{"role": "user", "content": "My booking for the trip to Oslo is YAX4DR, thanks."}]
    found = {(p.type, p.gold) for p in make_probes(booked, 1, 8)}
    assert ("artifact", "YAX4DR") in found and ("recall", "Oslo") in found
    assert all(gold != "YAX" for _, gold in found)


def test_probes_are_made_from_an_agent_run_and_balanced_over_types() -> None:
    (row,) = load_rows("taubench_airline_dev", 1)
    messages = row["messages"]
    folded = len(messages) // 2
    probes = make_probes(messages, folded, 8)
    assert len(probes) == 8
    types = [p.type for p in probes]
    assert "artifact" in types and "continuation" in types
    # Balanced: no type takes more than its share while another still has probes.
    everything = make_probes(messages, folded, 1000)
    for kind in PROBE_TYPES:
        available = sum(p.type == kind for p in everything)
        assert types.count(kind) == min(available, max(types.count(k) for k in PROBE_TYPES))
    early = "\n".join(text_of(m) for m in messages[:folded])
    assert all(max(p.sources) < folded and exact_match(p.keys, early) for p in probes)
    assert make_probes(messages, folded, 8) == probes  # deterministic


# -- offline grades ----------------------------------------------------------------------


def test_offline_probe_scores_favour_a_preset_that_keeps_facts_over_plain_trimming(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = load_rows("taubench_airline_dev", 2)
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    data = run(capsys, str(path), "--budgets", "2000", "--samples", "1", "--probes", "8", "--json")
    assert data["presets"] == ["offline", "keep-recent"]  # the baseline is added
    full, offline, keep = data["probes"]["arms"]
    assert (full["arm"], offline["arm"], keep["arm"]) == (
        "full",
        "offline@2000",
        "keep-recent@2000",
    )
    assert data["probes"]["made"] == full["all"]["n"] > 0
    assert full["all"]["score"] == 1.0  # every gold is in the whole conversation
    assert offline["all"]["score"] > keep["all"]["score"]
    low, high = wilson(keep["all"]["correct"], keep["all"]["n"]) or (0.0, 0.0)
    assert (keep["all"]["low"], keep["all"]["high"]) == (round(low, 4), round(high, 4))
    entries = [e for e in data["audit"] if e["arm"] == "keep-recent@2000"]
    assert sum(e["verdict"] for e in entries) == keep["all"]["correct"]
    assert all(e["answer"] is None and e["calls"] == 0 for e in entries)  # no model, no cost


def test_the_probe_table_is_printed_under_the_results_and_drawn_in_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report"
    code = main(["eval", str(write_chat(tmp_path)), *PROBING, "--report", str(report)])
    out = capsys.readouterr().out
    assert code == 0
    assert "probes" in out and "keep-recent@300" in out and "continuation" in out
    assert "graded by exact match in the prompt" in " ".join(out.split())
    page = (report / "report.html").read_text("utf-8")
    assert (report / "probes.png").stat().st_size > 0
    assert "<h2>Probes</h2>" in page and "Probe scores per type" in page


def test_wilson_interval() -> None:
    assert wilson(0, 0) is None
    low, high = wilson(5, 10) or (0.0, 0.0)
    assert low == pytest.approx(0.2366, abs=1e-4) and high == pytest.approx(0.7634, abs=1e-4)
    assert wilson(10, 10) == (pytest.approx(0.7225, abs=1e-4), pytest.approx(1.0))


# -- asked and judged -----------------------------------------------------------------


def answering(text: str = "I do not know") -> Any:
    def reply(request: Request) -> Reply:
        return openai_reply(text, prompt_tokens=100, completion_tokens=4)

    return reply


def test_probes_are_asked_arm_by_arm_then_graded_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_chat(tmp_path)
    with FakeProvider("openai") as answers, FakeProvider("openai") as grades:
        answers.answer("POST", "/v1/chat/completions", answering())
        grades.answer("POST", "/v1/chat/completions", lambda r: openai_reply("CORRECT"))
        data = run(
            capsys,
            str(path),
            *PROBING,
            "--model",
            spec(answers, "small"),
            "--judge",
            spec(grades, "judge"),
            "--json",
        )
        asked = [r.body["messages"] for r in answers.requests]
        judged = [r.body["messages"][-1]["content"] for r in grades.requests]
    made = data["probes"]["made"]
    arms = ["full", "offline@300", "keep-recent@300"]
    assert made == 4 and len(asked) == len(judged) == 3 * made
    # One arm's answers one after another: the prompt before the probe is the arm's.
    assert asked[0][:-1] == asked[made - 1][:-1] == [dict(m) for m in project_chat()]
    assert len(asked[made][:-1]) < len(asked[0][:-1])
    # Grades of one probe across arms together; the judge reads the source from the full log.
    entries = {e["id"]: e for e in data["audit"]}
    first = next(e for e in data["audit"] if e["arm"] == "full")
    assert first["question"] in judged[0] and first["question"] in judged[2]
    source = project_chat()[first["sources"][0]]["content"]
    assert all(source in text for text in judged[:3])
    assert len(entries) == 3 * made
    entry = entries[f"1:project/keep-recent@300/{first['item']}"]
    assert entry["answer"] == "I do not know" and entry["judge_raw"] == "CORRECT"
    assert entry["verdict"] is True and entry["exact"] is False and entry["error"] is None
    assert entry["prompt_tokens"] > 0 and entry["calls"] == 1 and entry["tokens"] == 104
    assert [a["arm"] for a in data["probes"]["arms"]] == arms
    assert all(a["all"]["score"] == 1.0 for a in data["probes"]["arms"])
    # The judge said CORRECT to answers without the gold's key words: agreement measured.
    exact = data["agreement"]["exact"]
    assert exact == {
        "n": 3 * made,
        "agreement": 0.0,
        "judge_correct_other_wrong": 3 * made,
        "judge_wrong_other_correct": 0,
    }
    offline = data["results"][0]
    assert (offline["answer_calls"], offline["grade_calls"], offline["failed"]) == (made, made, {})
    assert offline["answer_tokens"] == 104 * made
    # What the table's notes say a user's run cost, and how far the judge is to be trusted.
    assert f"offline@300 {made}+{made} calls" in probe_notes(data)
    assert f"with exact match 0.00 on {3 * made} answers" in agreement_notes(data)
    header, rows = probe_rows(data)
    assert header[0] == "arm" and [r[0] for r in rows] == arms
    assert rows[0][-1] == "1.00\n0.51-1.00"  # all 4 correct: 4/(4 + 1.96²) the lower bound


def test_agreement_counts_both_disagreements_and_hand_grades() -> None:
    def entry(key: str, verdict: bool | None, exact: bool | None) -> dict[str, Any]:
        return {"id": key, "verdict": verdict, "exact": exact, "judge_raw": "x"}

    audit = [
        entry("a", True, True),
        entry("b", True, False),
        entry("c", False, True),
        entry("d", False, False),
        entry("e", True, None),  # a long gold: exact match does not apply
        entry("f", None, True),  # the grade failed
    ]
    found = agreement(audit, {"a": True, "b": False, "e": False})
    assert found["exact"] == {
        "n": 4,
        "agreement": 0.5,
        "judge_correct_other_wrong": 1,
        "judge_wrong_other_correct": 1,
    }
    assert found["hand"] == {
        "n": 3,
        "agreement": 1 / 3,
        "judge_correct_other_wrong": 2,
        "judge_wrong_other_correct": 0,
    }
    assert found["exact_vs_hand"]["n"] == 2 and found["exact_vs_hand"]["agreement"] == 1.0


def test_a_failed_grade_is_counted_not_fatal_on_the_question_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    row = {
        "id": "trip",
        "messages": project_chat(),
        "questions": [{"question": "Who could not log in?", "answer": "Priya"}],
    }
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    with FakeProvider("openai") as answers, FakeProvider("openai") as grades:
        answers.answer("POST", "/v1/chat/completions", answering("Priya"))
        grades.add(
            openai_reply("CORRECT"), error_reply("openai", 500, "down"), openai_reply("WRONG")
        )
        data = run(
            capsys,
            str(path),
            "--budgets",
            "300",
            "--samples",
            "2",
            "--model",
            spec(answers, "small"),
            "--judge",
            spec(grades, "judge"),
            "--json",
        )
        assert len(grades.requests) == 3  # made once: the failure is not retried
    assert "probes" not in data  # the conversation has questions: no probes by default
    offline, keep = data["results"]
    assert offline["failed"] == {"HTTP 500": 1} and offline["qa_accuracy"] is None
    assert keep["failed"] == {} and keep["qa_accuracy"] == 0.0
    assert data["full_qa_accuracy"] == 1.0
    failed = [e for e in data["audit"] if e["error"]]
    assert len(failed) == 1 and failed[0]["reason"] == "HTTP 500"
    assert failed[0]["answer"] == "Priya" and failed[0]["verdict"] is None
    assert failed[0]["exact"] is True  # a short gold: exact match applies
    assert data["agreement"]["exact"]["n"] == 2


def stable(summary: Any) -> Any:
    """``summary`` without what differs between two runs of the same work: wall and render
    times, where the results were written, and the scripted servers' ports."""
    varying = {"seconds", "render_p50_ms", "render_p99_ms", "results_file", "resumed"}
    varying |= {"model", "judge"}
    if isinstance(summary, dict):
        return {k: stable(v) for k, v in summary.items() if k not in varying}
    if isinstance(summary, list):
        return [stable(v) for v in summary]
    return summary


def test_a_run_whose_model_stops_answering_resumes_with_only_the_missing_calls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_chat(tmp_path)
    results = tmp_path / "results.jsonl"

    def evaluate(answers: FakeProvider, grades: FakeProvider, *extra: str) -> dict[str, Any]:
        return run(
            capsys,
            str(path),
            *PROBING,
            "--model",
            spec(answers, "small"),
            "--judge",
            spec(grades, "judge"),
            "--json",
            *extra,
        )

    def verdicts(request: Request) -> Reply:
        # The judge's verdict follows the answer, so every run grades alike.
        said = request.body["messages"][-1]["content"]
        return openai_reply("CORRECT" if "Answer to grade: Redis" in said else "WRONG")

    with FakeProvider("openai") as answers, FakeProvider("openai") as grades:
        answers.answer("POST", "/v1/chat/completions", answering("Redis"))
        grades.answer("POST", "/v1/chat/completions", verdicts)
        whole = evaluate(answers, grades, "--results", str(tmp_path / "whole.jsonl"))
        total = len(answers.requests)

    with FakeProvider("openai") as answers, FakeProvider("openai") as grades:
        answers.add(*[openai_reply("Redis", prompt_tokens=100, completion_tokens=4)] * 5)
        answers.add(*[Reply(drop=True)] * total)  # then the server stops answering
        grades.answer("POST", "/v1/chat/completions", verdicts)
        stopped = evaluate(answers, grades, "--results", str(results))
        graded_first = len(grades.requests)
    failed = sum(sum(r["failed"].values()) for r in stopped["results"])
    failed += sum(stopped["full"]["failed"].values())
    assert failed == total - 5 and graded_first == 5
    assert {e["reason"] for e in stopped["audit"] if e["error"]} == {"connection"}

    with FakeProvider("openai") as answers, FakeProvider("openai") as grades:
        answers.answer("POST", "/v1/chat/completions", answering("Redis"))
        grades.answer("POST", "/v1/chat/completions", verdicts)
        resumed = evaluate(answers, grades, "--results", str(results))
        assert len(answers.requests) == total - 5
        assert len(grades.requests) == total - 5
    assert resumed["resumed"] > 0
    assert stable(resumed) == stable(whole)
    # A third run asks nothing: every answer and grade is read back.
    with FakeProvider("openai") as answers, FakeProvider("openai") as grades:
        again = evaluate(answers, grades, "--results", str(results))
        assert answers.requests == [] and grades.requests == []
    assert stable(again) == stable(whole)
    kinds = [json.loads(line)["kind"] for line in results.read_text("utf-8").splitlines()]
    assert kinds[0] == "run" and "replay" in kinds and "grade" in kinds


def test_a_results_file_of_other_settings_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_chat(tmp_path)
    results = tmp_path / "r.jsonl"
    run(capsys, str(path), *PROBING, "--results", str(results), "--json")
    code = main(["eval", str(path), *PROBING[:-1], "2", "--results", str(results), "--json"])
    err = capsys.readouterr().err
    assert code == 2 and "'results'" in err


def test_timeout_reaches_the_http_call_and_a_sized_timeout_grows_with_the_prompt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert call_seconds(0, None) == BASE_TIMEOUT_S
    assert call_seconds(10_000, None) == BASE_TIMEOUT_S + 10_000 / READ_RATE
    assert call_seconds(10_000, 7.5) == 7.5
    path = write_chat(tmp_path)
    with FaultServer("hang") as model, FakeProvider("openai") as grades:
        started = time.monotonic()
        data = run(
            capsys,
            str(path),
            *PROBING[:-1],
            "1",
            "--model",
            spec(model, "slow"),
            "--judge",
            spec(grades, "judge"),
            "--timeout",
            "0.3",
            "--json",
        )
        seconds = time.monotonic() - started
        assert model.requests == 3  # one a arm, none retried
    assert grades.requests == []
    assert seconds < 3 * (0.3 + 1.0) + 3
    errors = [e for e in data["audit"] if e["error"]]
    assert len(errors) == 3 and {e["reason"] for e in errors} == {"timeout"}
    assert all("0.3" in e["error"] for e in errors)
    assert all(0.25 < e["seconds"] < 1.5 for e in errors)
    assert data["probes"]["arms"][0]["failed"] == 1


def test_a_killed_run_resumes_from_its_results_file(tmp_path: Path) -> None:
    row = {
        "id": "trip",
        "messages": project_chat(),
        "questions": [
            {"question": "Who could not log in?", "answer": "Priya"},
            {"question": "Where are sessions kept?", "answer": "Redis"},
        ],
    }
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    results = tmp_path / "results.jsonl"
    inputs = load_conversations(path)

    def settings(answers: FakeProvider, grades: FakeProvider) -> EvalSettings:
        return EvalSettings(
            presets=["offline"],
            budgets=parse_budgets("300"),
            samples=2,
            model=spec(answers, "small"),
            judge=spec(grades, "judge"),
            results=results,
        )

    class Killed(BaseException):
        """What a kill (SIGINT, SIGTERM) does to the run: it stops between two calls."""

    steps = 0

    def kill_after_the_first_question() -> None:
        nonlocal steps
        steps += 1
        if steps == 3:  # two sampled turns, then the first question
            raise Killed

    with FakeProvider("openai") as answers, FakeProvider("openai") as grades:
        answers.answer("POST", "/v1/chat/completions", answering("Priya"))
        grades.answer("POST", "/v1/chat/completions", lambda r: openai_reply("CORRECT"))
        with pytest.raises(Killed):
            evaluate(
                inputs,
                settings(answers, grades),
                path=str(path),
                on_step=kill_after_the_first_question,
            )
        first = len(answers.requests)
        graded = list(grades.requests)
    # Every answer comes first, arm by arm; the kill came once the first question was graded.
    assert first == 4 and len(graded) == 2
    with FakeProvider("openai") as answers, FakeProvider("openai") as grades:
        answers.answer("POST", "/v1/chat/completions", answering("Priya"))
        grades.answer("POST", "/v1/chat/completions", lambda r: openai_reply("CORRECT"))
        summary = evaluate(inputs, settings(answers, grades), path=str(path))
        regraded = [r.body["messages"][-1]["content"] for r in grades.requests]
    assert answers.requests == []  # every answer was read back
    assert len(regraded) == 2 and all("Where are sessions kept?" in g for g in regraded)
    assert summary["qa_questions"] == 2 and summary["qa_model_calls"] == 4
