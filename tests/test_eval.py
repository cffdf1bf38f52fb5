"""``contextfold eval``: inputs, budgets, the answer-recall measure, and the command."""

from __future__ import annotations

import importlib.resources
import json
from pathlib import Path
from typing import Any

import pytest

from contextfold.cli import main
from contextfold.core.errors import InvalidInput
from contextfold.evaluation.budgets import parse_budget, parse_budgets
from contextfold.evaluation.inputs import load_conversations
from contextfold.evaluation.replay import replay, sample_turns
from contextfold.evaluation.results import skip_summary, summarize
from contextfold.evaluation.retention import answer_keys
from contextfold.memory.conversation_file import FileConversation

FILLER = [
    "Work was busy this week, lots of meetings and long emails to answer.",
    "Same here, the office coffee machine broke again and everyone complained.",
]


def trip() -> dict[str, Any]:
    """A chat whose first turn names where Ann went and whose last names the bird she saw,
    with two questions whose answers are those words."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Last spring I travelled to Zanzibar with my sister."}
    ]
    for i in range(40):
        messages.append(
            {"role": "assistant" if i % 2 == 0 else "user", "content": f"{FILLER[i % 2]} ({i})"}
        )
    messages.append({"role": "user", "content": "Yesterday I finally saw a quetzal at the zoo."})
    messages.append({"role": "assistant", "content": "What a rare sight, lucky you!"})
    return {
        "id": "trip",
        "messages": messages,
        "questions": [
            {"question": "Where did Ann travel last spring?", "answer": "Zanzibar"},
            {"question": "Which bird did Ann see yesterday?", "answer": "A quetzal"},
            {"question": "What was never said?", "answer": None},
        ],
    }


def demo_messages() -> list[dict[str, Any]]:
    text = importlib.resources.files("contextfold").joinpath("data/demo_session.json")
    messages: list[dict[str, Any]] = json.loads(text.read_text("utf-8"))
    return messages


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["eval", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- budgets ------------------------------------------------------------------


def test_budgets_are_shares_or_tokens() -> None:
    share, tokens = parse_budgets("5%, 1200")
    assert (share.label, share.for_conversation(10_000)) == ("5%", 500)
    assert (tokens.label, tokens.for_conversation(10_000)) == ("1200", 1200)
    assert parse_budget("12.5%").for_conversation(1000) == 125
    assert parse_budget("1%").for_conversation(10) == 1


@pytest.mark.parametrize("text", ["0%", "150%", "x%", "ten", "-5", "0", "5%,5%", " , "])
def test_bad_budgets_are_refused_by_field(text: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_budgets(text)
    assert caught.value.field == "budgets"


def test_sample_turns_spread_evenly_and_end_at_the_end() -> None:
    assert sample_turns(10, 3) == [4, 7, 10]
    assert sample_turns(2, 10) == [1, 2]
    assert sample_turns(215, 1) == [215]


# -- inputs -------------------------------------------------------------------


def test_json_list_object_and_jsonl_are_read(tmp_path: Path) -> None:
    row = trip()
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps(row["messages"]), encoding="utf-8")
    inputs = load_conversations(listed)
    (conversation,) = inputs.conversations
    assert (conversation.id, len(conversation.messages), conversation.questions) == ("list", 43, [])
    assert (inputs.format, inputs.skipped) == ("JSON", {})

    wrapped = tmp_path / "object.json"
    wrapped.write_text(json.dumps(row), encoding="utf-8")
    (conversation,) = load_conversations(wrapped).conversations
    assert conversation.id == "trip"
    assert [q["answer"] for q in conversation.questions] == ["Zanzibar", "A quetzal"]

    lines = write_jsonl(tmp_path / "rows.jsonl", [row, {"messages": row["messages"][:3]}, row])
    assert [c.id for c in load_conversations(lines).conversations] == ["trip", "line 2", "trip"]
    assert len(load_conversations(lines, limit=2).conversations) == 2


@pytest.mark.parametrize(
    ("second_line", "named"),
    [
        ("{not json", ["line 2", "malformed JSON"]),
        ('["a list"]', ["line 2", "message 0"]),
        ('{"id": "x"}', ["line 2", "'messages'"]),
        ('{"messages": []}', ["line 2", "'messages'", "no messages"]),
        ('{"messages": [{"role": "wizard", "content": "hi"}]}', ["line 2", "message 0"]),
        ('{"messages": [{"role": "user", "content": "hi"}], "questions": {}}', ["'questions'"]),
        (
            '{"messages": [{"role": "user", "content": "hi"}], "questions": [{"answer": "a"}]}',
            ["line 2", "'questions[0].question'"],
        ),
        (
            '{"messages": [{"role": "user", "content": "hi"}], '
            '"questions": [{"question": "q", "answer": "a"}, {"question": "q", "answer": [1]}]}',
            ["line 2", "'questions[1].answer'"],
        ),
    ],
)
def test_bad_jsonl_names_the_line_and_field(
    tmp_path: Path, second_line: str, named: list[str]
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(trip()) + "\n" + second_line + "\n", encoding="utf-8")
    with pytest.raises(InvalidInput) as caught:
        load_conversations(path)
    for part in named:
        assert part in str(caught.value)


def test_bad_json_file_names_the_place(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('[{"role": "user", "content": "hi"},\n  oops]', encoding="utf-8")
    with pytest.raises(InvalidInput, match="line 2, column 3"):
        load_conversations(path)
    path.write_text('{"messages": "hello"}', encoding="utf-8")
    with pytest.raises(InvalidInput, match="'messages'"):
        load_conversations(path)


# -- the measure --------------------------------------------------------------


def test_key_words_are_the_rare_answer_words_the_question_does_not_give() -> None:
    row = trip()
    keys = answer_keys(row["messages"], row["questions"][:2])
    assert keys == [{"zanzibar"}, {"quetzal"}]  # "a" is a stopword
    common = {"question": "What broke?", "answer": "the coffee machine"}
    assert answer_keys(row["messages"], [common]) == []  # said 20 times: not rare


def test_retention_counts_the_answer_kept_and_not_the_one_dropped() -> None:
    row = trip()
    conversation = FileConversation(row["id"], row["messages"], "trip", row["questions"][:2])
    result = replay(conversation, ["keep-recent"], parse_budgets("200"), samples=4)
    (arm,) = result.arms
    assert result.full_recalls == [1.0, 1.0]
    assert arm.recalls == [0.0, 1.0]  # Zanzibar trimmed away, the quetzal kept
    assert 0 < arm.tokens_after <= 200
    (row_summary,) = summarize([result])["results"]
    assert row_summary["retention"] == pytest.approx(0.5)
    assert row_summary["compression"] == pytest.approx(result.tokens / arm.tokens_after)
    assert row_summary["renders"] == 4


def test_a_recalling_view_is_scored_with_each_question_as_its_query() -> None:
    """More rare facts than a fold of 300 tokens holds: offline recalls the asked one."""
    foods = [f"{c}{d}berry" for c in "bcdfghjklm" for d in "aeiou"][:40]
    messages: list[dict[str, Any]] = []
    for i, food in enumerate(foods):
        messages.append({"role": "user", "content": f"On trip {i + 1} I tasted {food} pie."})
        messages.append({"role": "assistant", "content": f"{FILLER[i % 2]} ({i})"})
    questions = [
        {"question": f"Which pie did I taste on trip {n}?", "answer": foods[n - 1]}
        for n in (3, 17, 29)
    ]
    conversation = FileConversation("pies", messages, "pies", questions)
    result = replay(conversation, ["offline", "keep-recent"], parse_budgets("300"), samples=2)
    offline, keep = result.arms
    assert keep.recalls == [0.0, 0.0, 0.0]
    assert offline.recalls == [1.0, 1.0, 1.0]
    assert 0 < offline.tokens_after <= 300


# -- the command --------------------------------------------------------------


def test_eval_json_shape_over_jsonl_with_questions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [trip(), {"id": "demo", "messages": demo_messages()}]
    path = write_jsonl(tmp_path / "mine.jsonl", rows)
    code, out, err = run(
        capsys, str(path), "--presets", "offline,keep-recent", "--budgets", "10%,300", "--json"
    )
    assert code == 0, err
    assert err == ""  # no progress bar with --json
    data = json.loads(out)
    assert data["conversations"] == 2
    assert data["questions"] == 2
    assert data["presets"] == ["offline", "keep-recent"]
    assert data["budgets"] == ["10%", "300"]
    assert [(r["preset"], r["budget"]) for r in data["results"]] == [
        ("offline", "10%"),
        ("offline", "300"),
        ("keep-recent", "10%"),
        ("keep-recent", "300"),
    ]
    for result in data["results"]:
        assert result["tokens_before"] == data["tokens"]
        assert 0 < result["tokens_after"] < result["tokens_before"]
        assert result["model_calls"] == 0 and result["model_tokens"] == 0
        assert 0 <= result["render_p50_ms"] <= result["render_p99_ms"]
        assert result["renders"] == 20  # 10 sampled turns x 2 conversations
        assert 0 <= result["retention"] <= 1
    for conversation in data["per_conversation"]:
        for result in conversation["results"]:
            budget = result["budget_tokens"]
            assert result["tokens_after"] <= budget
            if result["budget"] == "10%":
                assert budget == int(conversation["tokens"] * 0.1)
    assert data["per_conversation"][1]["results"][0]["retention"] is None  # demo: no questions


def test_eval_table_on_the_demo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "demo.json"
    path.write_text(json.dumps(demo_messages()), encoding="utf-8")
    code, out, err = run(capsys, str(path), "--budgets", "10%", "--samples", "3")
    assert code == 0, err
    text = " ".join(out.split())
    for words in ("offline", "keep-recent", "10%", "1 conversations", "215 messages"):
        assert words in text
    assert "Retention was not measured: no question with a gold answer" in text
    assert "retention " not in text.split("Retention was not")[0]  # no column of dashes


def test_eval_errors_exit_2_naming_the_fault(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(tmp_path / "x.jsonl", [trip(), {"messages": "nope"}])
    code, _, err = run(capsys, str(path))
    assert code == 2
    assert "line 2" in err and "'messages'" in err
    code, _, err = run(capsys, str(path), "--presets", "offline,nonesuch")
    assert (code, "unknown preset 'nonesuch'" in err) == (2, True)
    code, _, err = run(capsys, str(path), "--budgets", "5%,abc")
    assert (code, "'abc'" in err) == (2, True)
    code, _, err = run(capsys, str(tmp_path / "missing.json"))
    assert (code, "cannot read" in err) == (2, True)
    assert run(capsys, str(path), "--limit", "0")[0] == 2


def test_a_budget_below_the_system_prompt_skips_the_conversation_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(
        tmp_path / "two.jsonl", [trip(), {"id": "demo", "messages": demo_messages()}]
    )
    code, out, err = run(capsys, str(path), "--budgets", "10%,10,100", "--json")
    assert code == 0, err
    data = json.loads(out)
    by_arm = {(r["preset"], r["budget"]): r for r in data["results"]}
    # 10 tokens hold neither the demo's system prompt nor trip's latest user message.
    assert by_arm["offline", "10"]["skipped"] == {
        "budget under system prompt + last user message": 2
    }
    assert by_arm["offline", "10"]["conversations"] == 0
    assert by_arm["offline", "10"]["retention"] is None
    assert by_arm["offline", "10"]["render_p50_ms"] is None
    # 100 tokens hold trip's messages but not the demo's system prompt (230 tokens).
    assert by_arm["offline", "100"]["skipped"] == {
        "budget under system prompt + last user message": 1
    }
    assert by_arm["offline", "100"]["conversations"] == 1
    trip_tokens = data["per_conversation"][0]["tokens"]
    assert by_arm["offline", "100"]["tokens_before"] == trip_tokens
    assert (by_arm["offline", "10%"]["skipped"], by_arm["offline", "10%"]["conversations"]) == (
        {},
        2,
    )
    demo = data["per_conversation"][1]["results"]
    assert [r["skipped"] for r in demo if r["preset"] == "offline"] == [
        None,
        "budget under system prompt + last user message",
        "budget under system prompt + last user message",
    ]

    code, out, err = run(capsys, str(path), "--budgets", "10%,10,100")
    assert code == 0, err
    text = " ".join(out.split())
    assert " skip " in text.split("prompt")[0]  # a column of the table
    assert "offline 10 2 - - - -" in text  # nothing measured: no figures, not zeros
    assert (
        "Skipped (budget under system prompt + last user message): at 10 2 of 2 conversations "
        "by every preset; at 100 1 of 2 conversations by every preset." in text
    )


def test_when_nothing_can_be_measured_the_run_fails_saying_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "demo.json"
    path.write_text(json.dumps(demo_messages()), encoding="utf-8")
    code, out, err = run(capsys, str(path), "--presets", "offline", "--budgets", "10,20")
    assert (code, out) == (2, "")
    assert "nothing could be measured" in err
    assert "skipped all 1 conversations (budget under system prompt + last user message)" in err
    assert "--budgets" in err


def test_skips_are_told_per_budget_and_per_preset_when_they_differ() -> None:
    def row(preset: str, budget: str, skipped: dict[str, int]) -> dict[str, Any]:
        return {"preset": preset, "budget": budget, "skipped": skipped}

    summary = {
        "conversations": 5,
        "budgets": ["5%", "10%", "20%"],
        "results": [
            row("offline", "5%", {"a": 1, "b": 2}),
            row("keep-recent", "5%", {"a": 1, "b": 2}),
            row("offline", "10%", {"a": 1}),
            row("keep-recent", "10%", {}),
            row("offline", "20%", {}),
            row("keep-recent", "20%", {}),
        ],
    }
    assert skip_summary(summary) == (
        "Skipped: at 5% 3 of 5 conversations by every preset (a: 1, b: 2); "
        "at 10% offline 1 (a) of 5 conversations."
    )
    summary["results"][0]["skipped"] = {"a": 3}
    summary["results"][1]["skipped"] = {"a": 2}
    assert skip_summary(summary) == (
        "Skipped (a): at 5% offline 3, keep-recent 2 of 5 conversations; "
        "at 10% offline 1 of 5 conversations."
    )
    summary["results"] = [row("offline", "5%", {})]
    assert skip_summary(summary) == ""
