"""Every bad input at the boundary: one row each, refused with ``InvalidInput`` naming
the index and field, the same by the RAM and the SQLite store and by the CLI (exit 2,
one line, no traceback, an existing ``--out`` file untouched), and nothing stored
changes. Adding a case is one row.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from contextfold import InvalidInput, Memory, Session, compact_messages
from contextfold.cli import main
from contextfold.core.units import NO_RESULT, tool_unit_faults
from contextfold.memory.one_shot import load_conversation
from contextfold.strategies import ObservationMasking, Pipeline
from contextfold.strategies.templates import fill

Message = dict[str, Any]
Bad = Callable[[Session], object]


def call(*ids: str) -> Message:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
        ],
    }


def result(call_id: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


def user(text: str = "go on") -> Message:
    return {"role": "user", "content": text}


def say(text: str = "done") -> Message:
    return {"role": "assistant", "content": text}


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


# The log every case starts from: seq 1..5, so a batch's first message is index 5.
LOG: list[Message] = [
    {"role": "system", "content": "You are a careful agent."},
    user("find the file"),
    call("c1"),
    result("c1"),
    say("found it"),
]
FIRST = len(LOG)

# (case, bad message; it is sent after one good message, so its index is FIRST + 1, field)
BAD_MESSAGES: list[tuple[str, Any, str | None]] = [
    ("role not hashable", {"role": ["user"], "content": "x"}, "role"),
    ("role missing", {"content": "x"}, "role"),
    ("unknown key", {**user(), "colour": "red"}, "colour"),
    ("not an object", ["user", "hi"], None),
    ("lone surrogate in content", user("a\ud800b"), "content"),
    ("lone surrogate in a text part", {"role": "user", "content": [{"type": "text", "text": "\udc00"}]}, "content[0].text"),
    ("lone surrogate in meta", {**user(), "meta": {"k": "\ud800"}}, "meta.k"),
    ("lone surrogate in a meta key", {**user(), "meta": {"\ud800": 1}}, "meta.\ud800"),
    ("lone surrogate in name", {**user(), "name": "\ud800"}, "name"),
    ("lone surrogate in arguments", {"role": "assistant", "content": None, "tool_calls": [{"id": "x", "type": "function", "function": {"name": "f", "arguments": "\ud800"}}]}, "tool_calls[0].function.arguments"),
    ("meta not JSON (object)", {**user(), "meta": {"o": object()}}, "meta.o"),
    ("meta not JSON (set)", {**user(), "meta": {"s": {1}}}, "meta.s"),
    ("meta NaN", {**user(), "meta": {"x": math.nan}}, "meta.x"),
    ("meta infinity", {**user(), "meta": {"x": [math.inf]}}, "meta.x[0]"),
    ("meta integer key", {**user(), "meta": {1: 2}}, "meta"),
    ("meta integer over 4,300 digits", {**user(), "meta": {"n": 10**5000}}, "meta.n"),
    ("meta nested 100 deep", {**user(), "meta": nested(100)}, "meta" + ".a" * 64),
    ("meta not an object", {**user(), "meta": "x"}, "meta"),
    ("empty name", {**user(), "name": ""}, "name"),
    ("name not a string", {**user(), "name": 3}, "name"),
    ("one id twice in a call", {"role": "assistant", "content": None, "tool_calls": call("x")["tool_calls"] * 2}, "tool_calls[1].id"),
    ("user part of unknown type", {"role": "user", "content": [{"type": "video"}]}, "content[0].type"),
    ("user part with an unknown key", {"role": "user", "content": [{"type": "text", "text": "x", "colour": 1}]}, "content[0].colour"),
    ("image part without image_url", {"role": "user", "content": [{"type": "image_url"}]}, "content[0].image_url"),
    ("image part without a url", {"role": "user", "content": [{"type": "image_url", "image_url": {"url": 5}}]}, "content[0].image_url.url"),
    ("audio part without a format", {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AAA"}}]}, "content[0].input_audio.format"),
    ("file part without data or id", {"role": "user", "content": [{"type": "file", "file": {"filename": "a.pdf"}}]}, "content[0].file"),
    ("refusal part from a user", {"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}, "content[0].type"),
    ("image part from an assistant", {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}, "content[0].type"),
    ("refusal not a string", {**say(), "refusal": {"why": 1}}, "refusal"),
    ("refusal from a user", {**user(), "refusal": "no"}, "refusal"),
]  # fmt: skip

# (case, batch, index of the refused message in the batch): tool results out of place.
BAD_TOOL_ORDER: list[tuple[str, list[Message], int]] = [
    ("user message between a call and its result", [call("c2"), user(), result("c2")], 2),
    ("assistant message between a call and its result", [call("c2"), say(), result("c2")], 2),
    ("a result after the next call", [call("c2"), call("c3"), result("c2")], 2),
    ("a call answered twice", [call("c2"), result("c2"), result("c2")], 2),
    ("a result for a call answered earlier in the log", [result("c1")], 0),
    ("a result nobody called", [result("zz")], 0),
    ("a result first in the batch after a plain message", [user(), result("c1")], 1),
]

# (case, what to call, field named): arguments of the public entry points.
BAD_ARGUMENTS: list[tuple[str, Bad, str]] = [
    ("extend(None)", lambda s: s.extend(None), "messages"),  # type: ignore[arg-type]
    ("extend(str)", lambda s: s.extend("abc"), "messages"),  # type: ignore[arg-type]
    ("extend(bytes)", lambda s: s.extend(b"abc"), "messages"),  # type: ignore[arg-type]
    ("extend(one message)", lambda s: s.extend(user()), "messages"),  # type: ignore[arg-type]
    ("extend(int)", lambda s: s.extend(5), "messages"),  # type: ignore[arg-type]
    ("keys as a string", lambda s: s.extend([user(), user()], keys="ab"), "keys"),
    ("keys of another length", lambda s: s.extend([user(), user()], keys=["a"]), "keys"),
    ("a key not a string", lambda s: s.extend([user()], keys=[5]), "keys[0]"),  # type: ignore[list-item]
    ("a dict idempotency key", lambda s: s.append(user(), key={"a": 1}), "key"),  # type: ignore[arg-type]
    ("an empty idempotency key", lambda s: s.append(user(), key=""), "key"),
    ("render(budget='100')", lambda s: s.view("v").render(budget="100"), "budget"),  # type: ignore[arg-type]
    ("render(budget=-1)", lambda s: s.view("v").render(budget=-1), "budget"),
    ("render(budget=0)", lambda s: s.view("v").render(budget=0), "budget"),
    ("render(budget=2**64)", lambda s: s.view("v").render(budget=2**64), "budget"),
    ("view(budget=2**31)", lambda s: s.view("v", budget=2**31), "budget"),
    ("render(budget=True)", lambda s: s.view("v").render(budget=True), "budget"),
    ("render(budget=nan)", lambda s: s.view("v").render(budget=math.nan), "budget"),  # type: ignore[arg-type]
    ("render(budget=100.0)", lambda s: s.view("v").render(budget=100.0), "budget"),  # type: ignore[arg-type]
    ("render_report(budget=-5)", lambda s: s.view("v").render_report(budget=-5), "budget"),
    ("state(budget='1')", lambda s: s.view("v").state(budget="1"), "budget"),  # type: ignore[arg-type]
    ("compact(budget=-5)", lambda s: s.view("v", preset="offline").compact(budget=-5), "budget"),
    ("view budget negative", lambda s: s.view("v", budget=-5), "budget"),
    ("view budget a bool", lambda s: s.view("v", budget=True), "budget"),
    ("view name not a string", lambda s: s.view(5), "view"),  # type: ignore[arg-type]
    ("view name a list", lambda s: s.view(["v"]), "view"),  # type: ignore[arg-type]
    ("pipeline a string", lambda s: s.view("v", pipeline="offline"), "pipeline"),  # type: ignore[arg-type]
    ("llm not a model", lambda s: s.view("v", llm=5), "llm"),  # type: ignore[arg-type]
    ("local not a bool", lambda s: s.view("v", local="yes"), "local"),  # type: ignore[arg-type]
    ("unknown view setting", lambda s: s.view("v").update(colour=1), "colour"),
    ("expected_version a string", lambda s: s.view("v").update(budget=9, expected_version="1"), "expected_version"),  # type: ignore[arg-type]
    ("prompt with a stray brace", lambda s: s.view("v", preset="rolling", prompt="Sum { up"), "pipeline.options.prompt"),
    ("prompt with a positional field", lambda s: s.view("v", preset="rolling", prompt="Sum {0}"), "pipeline.options.prompt"),
    ("session id empty", lambda s: s.memory.session(""), "session_id"),
    ("session id not a string", lambda s: s.memory.session(5), "session_id"),  # type: ignore[arg-type]
    ("system not a string", lambda s: s.memory.session("new", system=5), "system"),  # type: ignore[arg-type]
    ("system with a lone surrogate", lambda s: s.memory.session("new", system="\ud800"), "system"),
    ("session meta not JSON", lambda s: s.memory.session("new", meta={"o": object()}), "meta.o"),
    ("session meta a list", lambda s: s.memory.session("new", meta=[1]), "meta"),  # type: ignore[arg-type]
    ("unknown encoding", lambda s: s.memory.session("new", encoding="bogus"), "encoding"),
    ("encoding not a string", lambda s: s.memory.session("new", encoding=5), "encoding"),  # type: ignore[arg-type]
    ("another encoding for a session", lambda s: s.memory.session(s.id, encoding="cl100k_base"), "encoding"),
    ("Memory(store=5)", lambda s: Memory(5), "store"),  # type: ignore[arg-type]
    ("Memory(encoding='bogus')", lambda s: Memory(encoding="bogus"), "encoding"),
]  # fmt: skip


# (case, keyword arguments of compact_messages, field named): the library call behind the CLI.
BAD_COMPACT_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("messages a string", {"messages": "hi"}, "messages"),
    ("messages None", {"messages": None}, "messages"),
    ("no budget", {"budget": None}, "budget"),
    ("budget a string", {"budget": "100"}, "budget"),
    ("budget negative", {"budget": -1}, "budget"),
    ("unknown preset", {"preset": "bogus"}, "preset"),
    ("unknown encoding", {"encoding": "bogus"}, "encoding"),
    ("model not a string", {"model": 5}, "model"),
    ("progress not a function", {"progress": 5}, "progress"),
    ("a bad message", {"messages": [user(), {"role": "robot", "content": "x"}]}, "role"),
]


@pytest.fixture(params=["ram", "sqlite"])
def session(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Session]:
    memory = Memory() if request.param == "ram" else Memory(tmp_path / "log.db")
    session = memory.session("s", system=LOG[0]["content"])
    session.extend(LOG[1:])
    session.view("v", preset="offline", budget=4000).compact()
    yield session
    memory.close()


def snapshot(session: Session) -> tuple[Any, ...]:
    store = session.store
    views = {v: (session.view(v).version, session.view(v).folds()) for v in session.views()}
    return tuple(store.list_sessions()), session.history(), views


def refusal(session: Session, fn: Callable[[], object]) -> InvalidInput:
    before = snapshot(session)
    with pytest.raises(InvalidInput) as info:
        fn()
    assert snapshot(session) == before, "a refused input changed what is stored"
    return info.value


@pytest.mark.parametrize(("case", "bad", "field"), BAD_MESSAGES, ids=[r[0] for r in BAD_MESSAGES])
def test_a_bad_message_is_refused_naming_index_and_field(
    session: Session, case: str, bad: Any, field: str | None
) -> None:
    exc = refusal(session, lambda: session.extend([user("fine"), bad]))
    assert (exc.index, exc.field) == (FIRST + 1, field), case


@pytest.mark.parametrize(
    ("case", "batch", "at"), BAD_TOOL_ORDER, ids=[r[0] for r in BAD_TOOL_ORDER]
)
def test_a_result_out_of_place_is_refused(
    session: Session, case: str, batch: list[Message], at: int
) -> None:
    exc = refusal(session, lambda: session.extend(batch))
    assert (exc.index, exc.field) == (FIRST + at, "tool_call_id"), case


@pytest.mark.parametrize(("case", "fn", "field"), BAD_ARGUMENTS, ids=[r[0] for r in BAD_ARGUMENTS])
def test_a_bad_argument_is_refused_naming_the_field(
    session: Session, case: str, fn: Bad, field: str
) -> None:
    exc = refusal(session, lambda: fn(session))
    assert exc.field == field, (case, str(exc))


@pytest.mark.parametrize(
    ("case", "kwargs", "field"), BAD_COMPACT_CALLS, ids=[r[0] for r in BAD_COMPACT_CALLS]
)
def test_compact_messages_refuses_by_field(case: str, kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        compact_messages(**{"messages": [user()], "budget": 100, **kwargs})
    assert info.value.field == field, (case, str(info.value))
    assert compact_messages((m for m in [user(), say()]), budget=100).messages_before == 2


def test_load_conversation_refuses_a_path_that_is_not_one() -> None:
    with pytest.raises(InvalidInput) as info:
        load_conversation(5)  # type: ignore[arg-type]
    assert info.value.field == "path"


def test_extend_takes_any_iterable(session: Session) -> None:
    logged = session.extend((user(f"m{i}") for i in range(3)), keys=(f"k{i}" for i in range(3)))
    assert [m.seq for m in logged] == [FIRST + 1, FIRST + 2, FIRST + 3]
    assert session.extend(iter([user("m0")]), keys=iter(["k0"])) == logged[:1]
    assert session.extend(()) == []
    assert len(session.history()) == FIRST + 3


def test_results_may_come_in_later_batches(session: Session) -> None:
    session.extend([call("c2", "c3")])
    session.extend([result("c3")])
    session.append(result("c2"))
    with pytest.raises(InvalidInput):
        session.append(result("c2"))


def test_another_handle_between_a_call_and_its_result_is_seen(session: Session) -> None:
    other = session.memory.session(session.id)
    session.append(call("c2"))
    other.append(user("meanwhile"))
    exc = refusal(session, lambda: session.append(result("c2")))
    assert (exc.index, exc.field) == (FIRST + 2, "tool_call_id")
    other.append(call("c3"))
    session.append(result("c3"))  # read from the log: this handle did not append the call


@pytest.mark.parametrize(
    ("case", "batch", "missing"),
    [
        ("a call never answered, then a user message", [call("c2"), user()], ["c2"]),
        ("a call never answered, then an answer", [call("c2"), say()], ["c2"]),
        ("one of two calls answered", [call("c2", "c3"), result("c2"), user()], ["c3"]),
        ("a call answered only by a late result", [call("c2"), user(), say()], ["c2"]),
    ],
)
def test_an_unanswered_call_is_answered_at_render(
    session: Session, case: str, batch: list[Message], missing: list[str]
) -> None:
    session.extend(batch)
    history = session.history()
    view = session.view("plain")
    for budget in (None, 4000):
        prompt = view.render(budget)
        assert tool_unit_faults(prompt) == [], case
        synthetic = [m for m in prompt if m.get("content") == NO_RESULT]
        assert [m["tool_call_id"] for m in synthetic] == missing
    assert session.history() == history  # the log is never edited
    assert not any(m.get("content") == NO_RESULT for m in history)


def test_a_call_in_progress_is_left_for_its_results(session: Session) -> None:
    view = session.view("plain")
    session.append(call("c2", "c3"))
    assert not any(m.get("content") == NO_RESULT for m in view.render())
    session.append(result("c2"))
    view.render()
    # The cached prompt ends with c3 still open; the next message makes it unanswered.
    session.append(user())
    prompt = view.render()
    assert tool_unit_faults(prompt) == []
    assert [m["tool_call_id"] for m in prompt if m.get("content") == NO_RESULT] == ["c3"]


def test_a_masking_fold_of_a_partly_answered_call_renders_valid() -> None:
    session = Memory().session("s", system="sys")
    for turn in range(8):  # b is never answered; the masked unit keeps a's result only
        session.extend([user(f"q{turn}"), call(f"a{turn}", f"b{turn}")])
        session.append({**result(f"a{turn}"), "content": f"line {turn}\n" * 400})
    session.append(user("last"))
    masking = Pipeline([ObservationMasking(keep_last=1)])
    view = session.view("v", pipeline=masking, budget=4000)
    view.compact()
    masked = [f for f in view.folds() if f.kind == "masked"]
    assert masked and all(len(f.messages) == 2 for f in masked)
    prompt = view.render()
    assert tool_unit_faults(prompt) == []
    assert sum(m.get("content") == NO_RESULT for m in prompt) >= len(masked)


@pytest.mark.parametrize(
    "template",
    ["Summarize { this", "Summarize } this", "Sum {0}", "Sum {}", "Sum {x.y}", "Sum {x[0]}"],
)
def test_a_malformed_template_names_the_prompt(template: str) -> None:
    with pytest.raises(InvalidInput) as info:
        fill(template, x="text")
    assert info.value.field == "prompt"
    assert fill("Sum {x} {{as JSON}}", x="it") == "Sum it {as JSON}"


def test_an_unknown_encoding_leaves_no_session(tmp_path: Path) -> None:
    for memory in (Memory(), Memory(tmp_path / "e.db")):
        with pytest.raises(InvalidInput):
            memory.session("new", system="sys", encoding="bogus")
        assert memory.store.list_sessions() == []


def _open_new_session(path: str, barrier: Any) -> None:
    barrier.wait()
    Memory(path).session("shared", system="You are the system prompt.")


@pytest.mark.parametrize("kind", ["ram", "sqlite", "sqlite, a Memory each"])
def test_threads_opening_one_new_session_log_its_system_prompt_once(
    kind: str, tmp_path: Path
) -> None:
    for trial in range(5):
        path = tmp_path / f"{trial}.db"
        shared = Memory() if kind == "ram" else Memory(path)
        barrier = threading.Barrier(8)

        def open_it(memory: Memory, path: Path, barrier: threading.Barrier) -> None:
            if kind == "sqlite, a Memory each":
                memory = Memory(path)
            barrier.wait()
            memory.session("shared", system="You are the system prompt.")

        threads = [threading.Thread(target=open_it, args=(shared, path, barrier)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        history = shared.session("shared").history()
        assert history == [{"role": "system", "content": "You are the system prompt."}]


def test_processes_opening_one_new_session_log_its_system_prompt_once(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    path = str(tmp_path / "p.db")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_open_new_session, args=(path, barrier)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    history = Memory(path).session("shared").history()
    assert [m["role"] for m in history] == ["system"]


# -- the command line -----------------------------------------------------------------

GOOD = [user("hello"), say("hi")]
BAD_FILES: list[tuple[str, bytes, str]] = [
    ("empty file", b"", "empty"),
    ("only whitespace", b"  \n", "empty"),
    ("invalid UTF-8", b'[{"role": "user", "content": "\xff"}]', "not UTF-8"),
    ("nested 100,000 deep", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ("nested deep in JSONL", b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n{}\n", "nested too deeply"),
    ("an integer over 4,300 digits", b'[{"role": "user", "content": "x", "meta": {"n": ' + b"9" * 5000 + b"}}]", "cannot be read"),
    ("a lone surrogate", b'[{"role": "user", "content": "a\\ud800"}]', "field 'content'"),
    ("meta NaN", b'[{"role": "user", "content": "a", "meta": {"x": NaN}}]', "field 'meta.x'"),
    ("a number", b"5", "expected a list of messages"),
    ("an object without messages", b'{"turns": []}', "expected a list of messages"),
    ("no messages", b"[]", "no messages"),
    ("malformed JSON", b'[{"role": "user",', "malformed JSON"),
    ("a user message between a call and its result", json.dumps([user(), call("c"), user(), result("c")]).encode(), "message 3, field 'tool_call_id'"),
    ("a user part of unknown type", json.dumps([{"role": "user", "content": [{"type": "video"}]}]).encode(), "content[0].type"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "data", "said"), BAD_FILES, ids=[r[0] for r in BAD_FILES])
def test_a_bad_file_exits_2_in_one_line_and_leaves_out_alone(
    case: str, data: bytes, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / ("conv.jsonl" if b"\n{}" in data else "conv.json")
    source.write_bytes(data)
    out = tmp_path / "prompt.json"
    out.write_text("the previous prompt", "utf-8")
    code = main(["compact", str(source), "--budget", "100", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2, case
    assert said in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert out.read_text("utf-8") == "the previous prompt"
    assert [p.name for p in tmp_path.iterdir()] == sorted([source.name, out.name]) or {
        p.name for p in tmp_path.iterdir()
    } == {source.name, out.name}


@pytest.mark.parametrize(
    ("case", "args", "said"),
    [
        ("--out in a missing folder", ["--out", "{tmp}/no/such/dir/p.json"], "field 'out'"),
        ("--out a folder", ["--out", "{tmp}"], "field 'out'"),
        ("unknown preset", ["--preset", "bogus"], "field 'preset'"),
        ("unknown encoding", ["--encoding", "bogus"], "field 'encoding'"),
        ("unknown model", ["--model", "bogus"], "field 'model'"),
        ("negative index", ["--index", "-1"], "--index"),
    ],
)
def test_a_bad_option_exits_2_in_one_line(
    case: str, args: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "conv.json"
    source.write_text(json.dumps(GOOD), "utf-8")
    argv = ["compact", str(source), "--budget", "100", *(a.format(tmp=tmp_path) for a in args)]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, case
    assert said in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conv.json"]


def test_out_is_replaced_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "conv.json"
    source.write_text(json.dumps(GOOD), "utf-8")
    out = tmp_path / "prompt.json"
    out.write_text("the previous prompt", "utf-8")
    assert main(["compact", str(source), "--budget", "100", "--out", str(out)]) == 0
    assert json.loads(out.read_text("utf-8")) == GOOD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conv.json", "prompt.json"]


def test_the_console_script_prints_no_traceback(tmp_path: Path) -> None:
    source = tmp_path / "deep.json"
    source.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    done = subprocess.run(
        [sys.executable, "-m", "contextfold.cli", "compact", str(source), "--budget", "100"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "nested too deeply" in done.stderr
