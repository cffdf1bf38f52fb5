"""``contextfold eval``: ChatGPT exports, the progress bar, tokens per turn, ``--report``,
``--suggest``, ``--model`` and ``--judge`` (over the fake OpenAI server)."""

from __future__ import annotations

import builtins
import copy
import html
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
from fake_openai import openai_reply
from fake_providers import FakeProvider
from test_eval import demo_messages, run, trip, write_jsonl

from contextfold.core.errors import InvalidInput
from contextfold.evaluation.inputs import load_conversations
from contextfold.evaluation.judge import judged_questions, parse_verdict
from contextfold.evaluation.plots import caption_of, retention_figure, save_png, tokens_figure
from contextfold.evaluation.replay import BUDGET_TOO_SMALL
from contextfold.evaluation.suggest import suggest

EXPORT = Path(__file__).parent / "fixtures" / "chatgpt_conversations.json"


def export() -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(EXPORT.read_text("utf-8"))
    return data


# -- the ChatGPT export -------------------------------------------------------


def test_an_export_is_read_along_the_branch_the_user_saw() -> None:
    inputs = load_conversations(EXPORT)
    assert inputs.format == "ChatGPT export"
    trip_chat, code = inputs.conversations  # the third holds only a hidden system message
    assert trip_chat.title == "Lisbon trip"
    assert [m["role"] for m in trip_chat.messages] == ["user", "assistant"] * 3
    second = trip_chat.messages[2]["content"]
    assert "Casa do Largo" in second  # the edited message, not the abandoned branch
    assert all("bifanas" not in str(m["content"]) for m in trip_chat.messages)
    assert trip_chat.messages[0]["meta"] == {
        "create_time": 1714636800.0,
        "session_date_time": "2024-05-02",
    }
    call, result = code.messages[1], code.messages[2]
    assert call["tool_calls"][0]["function"]["name"] == "python"
    assert result == {
        "role": "tool",
        "tool_call_id": call["tool_calls"][0]["id"],
        "content": "0.30000000000000004 False",
        "meta": {"create_time": 1715000006.0, "session_date_time": "2024-05-06"},
    }
    assert inputs.skipped == {
        "conversations without text": 1,
        "hidden messages": 4,  # three system prompts and the custom instructions
        "messages without text": 1,
        "nodes without a message": 3,
        "non-text parts": 1,  # the hotel photo
        "thoughts content": 1,
    }
    assert len(load_conversations(EXPORT, limit=1).conversations) == 1


def test_the_export_zip_is_read_like_its_conversations_json(tmp_path: Path) -> None:
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("chat.html", "<html></html>")
        z.writestr("conversations.json", EXPORT.read_text("utf-8"))
    zipped, unzipped = load_conversations(archive), load_conversations(EXPORT)
    assert (zipped.format, zipped.skipped) == (unzipped.format, unzipped.skipped)
    read = [[(c.id, c.title, c.messages) for c in i.conversations] for i in (zipped, unzipped)]
    assert read[0] == read[1]
    assert zipped.conversations[0].source.startswith(f"{archive}, conversation ")
    empty = tmp_path / "empty.zip"
    with zipfile.ZipFile(empty, "w") as z:
        z.writestr("chat.html", "<html></html>")
    with pytest.raises(InvalidInput, match=r"no conversations\.json"):
        load_conversations(empty)
    (tmp_path / "broken.zip").write_bytes(b"not a zip")
    with pytest.raises(InvalidInput, match="not a readable zip"):
        load_conversations(tmp_path / "broken.zip")


def _break(data: list[dict[str, Any]], fault: str) -> None:
    chat = data[1]["mapping"]
    if fault == "mapping":
        data[1]["mapping"] = []
    elif fault == "current_node":
        data[1]["current_node"] = "nowhere"
    elif fault == "role":
        chat["u-4"]["message"]["author"]["role"] = "wizard"
    elif fault == "parts":
        chat["u-4"]["message"]["content"]["parts"] = "text"
    elif fault == "parent":
        chat["u-4"]["parent"] = "missing"
    elif fault == "loop":
        chat["root-2"]["parent"] = "u-5"
    elif fault == "create_time":
        chat["u-4"]["message"]["create_time"] = "yesterday"


@pytest.mark.parametrize(
    ("fault", "field"),
    [
        ("mapping", "conversations[1].mapping"),
        ("current_node", "conversations[1].current_node"),
        ("role", "conversations[1].mapping['u-4'].message.author.role"),
        ("parts", "conversations[1].mapping['u-4'].message.content.parts"),
        ("parent", "conversations[1].mapping['missing']"),
        ("loop", "conversations[1].mapping['root-2'].parent"),
        ("create_time", "conversations[1].mapping['u-4'].message.create_time"),
    ],
)
def test_a_bad_export_names_the_field_and_reports_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fault: str, field: str
) -> None:
    data = export()
    _break(data, fault)
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(InvalidInput) as caught:
        load_conversations(path)
    assert caught.value.field == field
    code, out, err = run(capsys, str(path), "--report", str(tmp_path / "report"))
    assert (code, out) == (2, "")
    assert field in err
    assert not (tmp_path / "report").exists()


def test_eval_runs_on_the_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, str(EXPORT), "--budgets", "50%", "--json")
    assert code == 0, err
    data = json.loads(out.splitlines()[-1])
    assert (data["format"], data["conversations"], data["questions"]) == ("ChatGPT export", 2, 0)
    assert data["skipped"]["hidden messages"] == 4
    assert [c["title"] for c in data["per_conversation"]] == ["Lisbon trip", "Float sum surprise"]
    assert data["session"]["title"] == "Lisbon trip"


# -- progress -----------------------------------------------------------------


def test_the_progress_bar_is_drawn_on_stderr_only_when_asked_or_on_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [trip()])
    code, _, err = run(capsys, str(path), "--budgets", "200")
    assert (code, "replaying" in err) == (0, False)  # stderr is not a terminal here
    code, out, err = run(capsys, str(path), "--budgets", "200", "--progress")
    assert (code, "replaying" in err, "replaying" in out) == (0, True, False)
    code, out, err = run(capsys, str(path), "--budgets", "200", "--progress", "--json")
    assert (code, err) == (0, "")
    json.loads(out)


# -- prompt tokens per turn ---------------------------------------------------


def test_the_longest_conversation_is_recorded_turn_by_turn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(
        tmp_path / "two.jsonl", [trip(), {"id": "demo", "messages": demo_messages()}]
    )
    code, out, err = run(capsys, str(path), "--budgets", "10%,20%", "--samples", "5", "--json")
    assert code == 0, err
    session = json.loads(out)["session"]
    assert (session["id"], session["messages"]) == ("demo", 215)
    assert session["turns"] == [43, 86, 129, 172, 215]
    full = session["full_tokens"]
    assert full == sorted(full) and full[-1] == json.loads(out)["per_conversation"][1]["tokens"]
    assert [(a["preset"], a["budget"]) for a in session["arms"]] == [
        ("offline", "10%"),
        ("offline", "20%"),
        ("keep-recent", "10%"),
        ("keep-recent", "20%"),
    ]
    for arm in session["arms"]:
        assert len(arm["tokens"]) == 5
        assert all(
            0 < t <= min(arm["budget_tokens"], f) for t, f in zip(arm["tokens"], full, strict=True)
        )


# -- --report -----------------------------------------------------------------


def test_report_writes_json_plots_and_a_self_contained_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [trip(), {"id": "demo", "messages": demo_messages()}])
    report = tmp_path / "out" / "report"
    code, out, err = run(
        capsys,
        str(path),
        "--budgets",
        "10%,300",
        "--samples",
        "4",
        "--report",
        str(report),
        "--json",
    )
    assert code == 0, err
    printed = json.loads(out)
    assert json.loads((report / "results.json").read_text("utf-8")) == printed
    assert printed["suggestion"]["preset"] in ("offline", "keep-recent")
    for png in ("retention.png", "tokens.png"):
        assert (report / png).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    page = (report / "report.html").read_text("utf-8")
    assert page.count("src='data:image/png;base64,") == 2
    assert "http://" not in page and "https://" not in page and "<link" not in page
    for text in (printed["suggestion"]["reason"].split(":")[0], "keep-recent", "retention", "300"):
        assert text in page


def test_report_without_questions_has_no_retention_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, str(EXPORT), "--budgets", "50%", "--report", str(tmp_path))
    assert code == 0, err
    assert not (tmp_path / "retention.png").exists()
    assert (tmp_path / "tokens.png").exists()
    # The console wraps long paths wherever it likes: look for the name without its breaks.
    assert "report.html" in "".join(err.split())


def test_the_plots_label_what_a_reader_compares(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Budgets in both units smallest first, retention relative to the full context, the
    presets, full context and keep-recent named, n in the title, skips in the caption."""
    path = write_jsonl(tmp_path / "t.jsonl", [trip(), {"id": "demo", "messages": demo_messages()}])
    report = tmp_path / "r"
    code, _, err = run(capsys, str(path), "--budgets", "20%,100", "--report", str(report))
    assert code == 0, err
    summary = json.loads((report / "results.json").read_text("utf-8"))

    figure = retention_figure(summary)
    ax = figure.axes[0]
    assert ax.get_title() == "Answer-recall retention by budget: 2 questions over 2 conversations"
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    mean_20 = summary["results"][0]["budget_tokens"] / 2
    assert ticks[0].startswith("100 tok\n≈") and ticks[0].endswith("%")  # 100 < 20% here
    assert ticks[1] == f"20%\n≈{mean_20:,.0f} tok"
    assert "% of each conversation's tokens, or tokens" in ax.get_xlabel()
    assert "relative to the full context = 1.0" in ax.get_ylabel()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[:3] == ["offline", "keep-recent (plain trimming)", "full context (1.0)"]
    caption = caption_of(figure)
    assert caption.startswith(
        "Skipped (budget under system prompt + last user message): at 100 1 of 2 conversations "
        "by every preset. Those are left out of the points; n: the conversations a point rests on."
    )
    save_png(figure, tmp_path / "again.png")

    figure = tokens_figure(summary, "20%")
    ax = figure.axes[0]
    budget = summary["session"]["arms"][0]["budget_tokens"]
    assert ax.get_title() == (
        f"Prompt tokens per turn at budget 20% = {budget:,} tokens:\n"
        "demo (215 messages), the longest of 2 conversations"
    )
    assert (ax.get_xlabel(), ax.get_ylabel()) == (
        "messages logged (sampled turns)",
        "prompt tokens (o200k_base)",
    )
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == [
        "full context",
        "offline",
        "keep-recent (plain trimming)",
        f"budget 20% = {budget:,} tokens",
    ]
    save_png(figure, tmp_path / "again.png")
    skipped = tokens_figure(summary, "100")
    assert caption_of(skipped).startswith("Skipped on this conversation, so not drawn: offline")
    save_png(skipped, tmp_path / "again.png")

    page = (report / "report.html").read_text("utf-8")
    assert f"<img alt='Retention vs budget. {html.escape(caption)}'" in page


def test_report_without_matplotlib_names_the_extra_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.split(".")[0] == "matplotlib":
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    path = write_jsonl(tmp_path / "t.jsonl", [trip()])
    code, out, err = run(capsys, str(path), "--report", str(tmp_path / "r"))
    assert (code, out) == (2, "")
    assert "pip install 'contextfold[eval]'" in err
    assert not (tmp_path / "r").exists()
    assert run(capsys, str(path), "--budgets", "200")[0] == 0  # the rest needs no extra


# -- --suggest ----------------------------------------------------------------


def row(preset: str, budget: str, tokens: int, **figures: Any) -> dict[str, Any]:
    base = {
        "preset": preset,
        "budget": budget,
        "budget_tokens": tokens,
        "conversations": 1,
        "skipped": {},
        "compression": 10.0,
        "render_p50_ms": 1.0,
        "failed_jobs": 0,
        "overshoot_tokens": 0,
        "retention": None,
        "qa_accuracy": None,
    }
    return {**base, **figures}


def test_suggest_takes_the_smallest_budget_keeping_the_floor_then_the_best_there() -> None:
    rows = [
        row("offline", "5%", 500, retention=0.7, compression=20.0),
        row("offline", "10%", 1000, retention=0.82, compression=9.0),
        row("extractive", "10%", 1000, retention=0.85, compression=8.0),
        row("keep-recent", "10%", 1000, retention=0.3),
        row("offline", "20%", 2000, retention=0.95),
        row("chat", "5%", 500, retention=0.9, failed_jobs=1),  # failed: never suggested
    ]
    picked = suggest({"results": rows})
    assert (picked["preset"], picked["budget"], picked["measure"]) == (
        "extractive",
        "10%",
        "answer-recall retention",
    )
    assert picked["reason"] == (
        "extractive at 10%: the smallest budget that keeps 0.8 of the full context's "
        "answer-recall retention (0.85; offline 0.82; keep-recent 0.30), 8.0x compression, "
        "render p50 1.00 ms."
    )
    assert suggest({"results": rows}) == picked  # deterministic


def test_suggest_breaks_ties_by_compression_then_latency_then_order() -> None:
    rows = [
        row("a", "10%", 1000, retention=0.9, compression=5.0),
        row("b", "10%", 1000, retention=0.9, compression=6.0, render_p50_ms=3.0),
        row("c", "10%", 1000, retention=0.9, compression=6.0, render_p50_ms=2.0),
        row("d", "10%", 1000, retention=0.9, compression=6.0, render_p50_ms=2.0),
    ]
    assert suggest({"results": rows})["preset"] == "c"


def test_suggest_below_the_floor_says_so() -> None:
    rows = [row("offline", "5%", 500, retention=0.4), row("keep-recent", "5%", 500, retention=0.1)]
    picked = suggest({"results": rows})
    assert picked["preset"] == "offline"
    assert "no arm keeps 0.8" in picked["reason"] and "(0.40)" in picked["reason"]


def test_suggest_prefers_qa_accuracy_relative_to_full_context_when_judged() -> None:
    rows = [
        row("offline", "10%", 1000, retention=0.9, qa_accuracy=0.3, full_qa_accuracy=0.5),
        row("chat", "10%", 1000, retention=0.5, qa_accuracy=0.45, full_qa_accuracy=0.5),
    ]
    picked = suggest({"results": rows})
    assert (picked["preset"], picked["measure"]) == ("chat", "QA accuracy")
    assert "(0.90; offline 0.60)" in picked["reason"]


def test_suggest_without_a_measure_picks_nothing_and_never_a_skipped_or_failed_arm() -> None:
    rows = [
        row("offline", "5%", 500, compression=20.0, overshoot_tokens=40),
        row("keep-recent", "5%", 500, compression=25.0),
    ]
    picked = suggest({"results": rows})
    assert (picked["preset"], picked["budget"], picked["measure"]) == (None, None, None)
    assert "no question with a gold answer" in picked["reason"]
    unrun = row("chat", "5%", 500, retention=1.0, conversations=0, skipped={"x": 1})
    failed = row("rolling", "5%", 500, retention=1.0, failed_jobs=1)
    kept = row(
        "offline",
        "5%",
        500,
        retention=0.5,
        skipped={"budget under system prompt + last user message": 2},
    )
    picked = suggest({"results": [unrun, failed, kept]})
    assert (picked["preset"], picked["measure"]) == ("offline", "answer-recall retention")
    assert (
        "(over 1 of 3 conversations; 2 skipped: budget under system prompt + last user message)"
        in picked["reason"]
    )
    assert suggest({"results": [unrun, failed]})["preset"] is None


def test_suggest_refuses_data_without_questions_before_replaying(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"id": "demo", "messages": demo_messages()}])
    code, out, err = run(capsys, str(path), "--suggest", "--progress")
    assert (code, out) == (2, "")
    text = " ".join(err.split())
    assert "field 'suggest'" in text and "--suggest needs questions with gold answers" in text
    assert '"questions": [{"question": ..., "answer": ...}]' in text
    assert "0/10" in err and "1/10" not in err  # refused before replaying a turn
    unkeyed = {"messages": trip()["messages"], "questions": [{"question": "Hi?", "answer": "a"}]}
    path = write_jsonl(tmp_path / "u.jsonl", [unkeyed])  # "a" is no key word: nothing to score
    assert run(capsys, str(path), "--suggest", "--budgets", "200")[0] == 2


def test_a_report_without_questions_says_why_it_suggests_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, str(EXPORT), "--budgets", "50%", "--report", str(tmp_path))
    assert code == 0, err
    assert "suggestion: none: no question with a gold answer" in " ".join(out.split())
    page = (tmp_path / "report.html").read_text("utf-8")
    assert "<b>Suggestion:</b> none: no question with a gold answer" in page


def test_suggest_is_printed_with_its_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [trip()])
    code, out, err = run(capsys, str(path), "--budgets", "200,400", "--suggest")
    assert code == 0, err
    line = " ".join(out.split()).split("suggestion: ")[1]
    assert "answer-recall retention (" in line and "x compression" in line


# -- --model and --judge over the fake OpenAI server ----------------------------


@pytest.fixture
def answers() -> Any:
    with FakeProvider("openai") as fake:
        yield fake


@pytest.fixture
def grades() -> Any:
    with FakeProvider("openai") as fake:
        yield fake


def spec(fake: FakeProvider, name: str) -> str:
    return f"openai-compatible:{fake.url}#{name}"


def test_model_strategies_run_on_the_given_model_and_every_call_is_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], answers: FakeProvider
) -> None:
    summary = (
        "Ann told of a spring trip to Zanzibar with her sister; the rest was small talk about "
        "busy work weeks, meetings, emails and the office coffee machine."
    )
    answers.add(*[openai_reply(summary, prompt_tokens=100, completion_tokens=30)] * 40)
    path = write_jsonl(tmp_path / "t.jsonl", [trip()])
    code, out, err = run(
        capsys,
        str(path),
        "--presets",
        "rolling,keep-recent",
        "--budgets",
        "300",
        "--model",
        spec(answers, "local"),
        "--json",
    )
    assert code == 0, err
    rolling, keep = json.loads(out)["results"]
    calls = len(answers.requests)
    assert calls > 0
    # keep-recent folds without a model, but at 300 tokens its last-resort rescue may ask it.
    assert rolling["model_calls"] > 0
    assert rolling["model_calls"] + keep["model_calls"] == calls
    assert rolling["model_tokens"] + keep["model_tokens"] == 130 * calls
    assert rolling["stand_in_calls"] == 0


def test_judge_needs_model_and_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [trip()])
    code, out, err = run(capsys, str(path), "--judge", "openai-compatible:http://127.0.0.1:9/v1#j")
    assert (code, out) == (2, "")
    assert "'--model'" in err


def test_judge_grades_each_arm_and_the_full_context(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], answers: FakeProvider, grades: FakeProvider
) -> None:
    row_data = trip()
    row_data["questions"] = [
        {"question": "Where did Ann travel last spring?", "answer": "Zanzibar", "category": 4},
        {"question": "Was a parrot mentioned?", "answer": None, "category": 5},
        {"question": "Which bird did Ann see yesterday?", "answer": "A quetzal", "category": 1},
        {"question": "Which city next?", "answer": "Lima", "category": 5},  # not graded
        {"question": "Third graded?", "answer": "no", "category": 2},  # over --questions 2
    ]
    path = write_jsonl(tmp_path / "t.jsonl", [row_data])
    # Arm by arm (the full context, offline, keep-recent), each arm's two answers together;
    # then the grades question by question, across the arms in that order.
    answers.add(*[openai_reply("an answer", prompt_tokens=50, completion_tokens=2)] * 6)
    verdicts = ["CORRECT", "CORRECT", "WRONG", "Correct.", "CORRECT", "I think INCORRECT"]
    grades.add(*[openai_reply(v, prompt_tokens=40, completion_tokens=1) for v in verdicts])
    code, out, err = run(
        capsys,
        str(path),
        "--budgets",
        "200",
        "--model",
        spec(answers, "local"),
        "--judge",
        spec(grades, "judge"),
        "--questions",
        "2",
        "--json",
    )
    assert code == 0, err
    data = json.loads(out)
    assert (data["qa_questions"], data["full_qa_accuracy"]) == (2, 1.0)
    offline, keep = data["results"]
    assert (offline["qa_accuracy"], keep["qa_accuracy"]) == (1.0, 0.0)
    assert (data["qa_model_calls"], data["qa_model_tokens"]) == (6, 6 * 52)
    assert (data["judge_calls"], data["judge_tokens"], data["unclear_verdicts"]) == (6, 6 * 41, 0)
    asked = answers.requests[0].body["messages"]
    assert asked[-1]["role"] == "user" and "last spring" in asked[-1]["content"]
    graded = grades.requests[0].body["messages"][-1]["content"]
    assert "Gold answer: Zanzibar" in graded and "Answer to grade: an answer" in graded
    # Each arm's prompt is its own render plus the question: the log was not changed.
    # (Requests: the full context's q1 and q2, then offline's, then keep-recent's.)
    assert len(answers.requests[2].body["messages"]) < len(answers.requests[0].body["messages"])
    # keep-recent does not recall: both questions are asked of its one final prompt;
    # offline recalls by each question, so each question gets its own render.
    assert answers.requests[4].body["messages"][:-1] == answers.requests[5].body["messages"][:-1]
    recalled = [m["content"] for m in answers.requests[2].body["messages"] if m["role"] == "system"]
    assert len(recalled) == 1 and "user: Last spring I travelled to Zanzibar" in recalled[0]


def test_verdicts_and_graded_questions() -> None:
    assert [parse_verdict(t) for t in ("CORRECT", "wrong.", "INCORRECT", "hmm")] == [
        True,
        False,
        False,
        None,
    ]
    questions = [
        {"question": str(i), "answer": "a", "category": c} for i, c in enumerate([5, 1, 4, 2])
    ]
    assert [q["question"] for q in judged_questions(questions, 2)] == ["1", "2"]
    plain = [{"question": "q", "answer": "a"}]
    assert judged_questions(copy.deepcopy(plain), 5) == plain


# -- an export whose first chat is too short for the budgets -------------------


def export_chat(title: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """``messages`` (user and assistant text) as one conversation of a ChatGPT export."""
    mapping: dict[str, Any] = {"root": {"id": "root", "message": None, "parent": None}}
    parent = "root"
    for i, m in enumerate(messages):
        node = f"{title}-{i}"
        mapping[node] = {
            "id": node,
            "parent": parent,
            "message": {
                "author": {"role": m["role"]},
                "create_time": 1716000000 + i,
                "content": {"content_type": "text", "parts": [m["content"]]},
                "recipient": "all",
            },
        }
        parent = node
    return {"title": title, "conversation_id": title, "mapping": mapping, "current_node": parent}


def short_first_export(tmp_path: Path) -> Path:
    """A tiny chat, then the fixture's two, then a longer one: as an export's zip."""
    tiny = export_chat(
        "hi", [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"}]
    )
    data = [tiny, *export(), export_chat("trip", trip()["messages"])]
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("conversations.json", json.dumps(data))
    return archive


def test_an_export_whose_first_chat_is_tiny_is_measured_on_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = short_first_export(tmp_path)
    code, out, err = run(capsys, str(archive), "--json")  # the default budgets, 5% first
    assert code == 0, err
    data = json.loads(out)
    assert data["conversations"] == 4
    for result in data["results"]:
        assert result["conversations"] >= 1
        assert result["conversations"] + sum(result["skipped"].values()) == 4
        assert result["tokens_before"] < data["tokens"]
    five = [r for r in data["results"] if r["budget"] == "5%"]
    assert all(r["skipped"]["budget under system prompt + last user message"] >= 1 for r in five)
    hi = data["per_conversation"][0]
    assert hi["title"] == "hi"
    assert {r["skipped"] for r in hi["results"]} == {
        "budget under system prompt + last user message"
    }
    trip_chat = data["per_conversation"][3]
    assert {r["skipped"] for r in trip_chat["results"]} == {None}

    code, out, err = run(capsys, str(archive), "--report", str(tmp_path / "r"))
    assert code == 0, err
    text = " ".join(out.split())
    assert "at 5% 3 of 4 conversations by every preset" in text
    page = (tmp_path / "r" / "report.html").read_text("utf-8")
    assert "skipped per budget" in page and "at 5% 3 of 4 conversations by every preset" in page


def test_suggest_refuses_when_the_conversations_with_questions_were_all_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    short = {"id": "short", "messages": trip()["messages"][:3], "questions": trip()["questions"]}
    path = write_jsonl(tmp_path / "s.jsonl", [short, {"id": "demo", "messages": demo_messages()}])
    code, out, err = run(capsys, str(path), "--budgets", "5%", "--json")
    assert code == 0, err
    offline = json.loads(out)["results"][0]
    assert (offline["conversations"], offline["retention"]) == (1, None)  # the demo alone
    code, out, err = run(capsys, str(path), "--budgets", "5%", "--suggest")
    assert (code, out) == (2, "")
    assert "--suggest needs questions with gold answers" in " ".join(err.split())


def test_a_skipped_conversation_is_neither_graded_nor_counted_in_the_arms_full_context(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], answers: FakeProvider, grades: FakeProvider
) -> None:
    short = {"id": "short", "messages": trip()["messages"][:3], "questions": trip()["questions"]}
    path = write_jsonl(tmp_path / "s.jsonl", [short, trip()])
    answers.add(*[openai_reply("an answer", prompt_tokens=50, completion_tokens=2)] * 6)
    # short: the full context twice (its arm is skipped); trip: full, arm, full, arm.
    verdicts = ["WRONG", "WRONG", "CORRECT", "CORRECT", "CORRECT", "WRONG"]
    grades.add(*[openai_reply(v, prompt_tokens=40, completion_tokens=1) for v in verdicts])
    code, out, err = run(
        capsys,
        str(path),
        "--presets",
        "keep-recent",
        "--budgets",
        "5%",
        "--model",
        spec(answers, "local"),
        "--judge",
        spec(grades, "judge"),
        "--suggest",
        "--json",
    )
    assert code == 0, err
    data = json.loads(out)
    (keep,) = data["results"]
    assert (keep["conversations"], keep["skipped"]) == (1, {BUDGET_TOO_SMALL: 1})
    assert (len(answers.requests), len(grades.requests)) == (6, 6)
    assert data["full_qa_accuracy"] == 0.5  # over both conversations
    assert (keep["qa_accuracy"], keep["full_qa_accuracy"]) == (0.5, 1.0)  # over trip alone
    assert "keeps the most (0.50)" in data["suggestion"]["reason"]  # 0.5 of 1.0, not of 0.5
