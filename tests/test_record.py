"""Session.record: a client's whole conversation, resent on every call, logged once."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from contextfold import InvalidInput, Memory


def _turns(n: int) -> list[dict[str, object]]:
    out: list[dict[str, object]] = [{"role": "system", "content": "You help."}]
    for i in range(n):
        out.append({"role": "user", "content": f"question {i}"})
        call = {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        out.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"result {i}"})
        out.append({"role": "assistant", "content": f"answer {i}"})
    return out


def _seen(messages: list[dict[str, object]]) -> list[tuple[object, object]]:
    return [(m["role"], m.get("content")) for m in messages]


def test_a_conversation_resent_every_turn_is_logged_once() -> None:
    session = Memory().session("s")
    conversation = _turns(6)
    for end in range(1, len(conversation) + 1):
        first = session.record(conversation[:end])
        again = session.record(conversation[:end])
        assert again.logged == [] and again.at == first.at == end
    assert _seen(session.history()) == _seen(conversation)


def test_a_regenerate_and_an_edit_start_branches_and_change_nothing_logged() -> None:
    session = Memory().session("s")
    conversation = _turns(3)
    whole = session.record(conversation)
    regenerated = [*conversation[:-1], {"role": "assistant", "content": "another answer"}]
    other = session.record(regenerated)
    assert other.matched == len(conversation) - 1 and len(other.logged) == 1
    edited = [*conversation[:2], {"role": "user", "content": "edited"}]
    third = session.record(edited)
    assert third.matched == 2
    assert _seen(session.history(branch=whole.at)) == _seen(conversation)
    assert _seen(session.history(branch=other.at)) == _seen(regenerated)
    assert _seen(session.history(branch=third.at)) == _seen(edited)
    assert session.last_seq() == len(conversation) + 2


def test_a_conversation_without_the_system_prompt_is_matched_after_it() -> None:
    session = Memory().session("s", system="Server-side rules.")
    conversation = _turns(2)[1:]
    session.record(conversation)
    again = session.record(conversation)
    assert again.logged == [] and again.skipped == 1
    assert session.last_seq() == 1 + len(conversation)


def test_threads_recording_the_same_conversation_log_it_once() -> None:
    session = Memory().session("s")
    conversation = _turns(20)
    barrier = threading.Barrier(4)

    def run() -> None:
        barrier.wait()
        for end in range(1, len(conversation) + 1, 3):
            session.record(conversation[:end])
        session.record(conversation)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert _seen(session.history()) == _seen(conversation)
    assert session.last_seq() == len(conversation)


def test_processes_recording_the_same_conversation_log_it_once(tmp_path: Path) -> None:
    url = str(tmp_path / "log.db")
    Memory(url).session("s")
    code = (
        "import sys, json\n"
        "from contextfold import Memory\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_record import _turns\n"
        "s = Memory(sys.argv[1]).session('s')\n"
        "c = _turns(15)\n"
        "for end in range(1, len(c) + 1, 2):\n"
        "    s.record(c[:end])\n"
        "s.record(c)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, url]) for _ in range(3)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    session = Memory(url).session("s")
    assert _seen(session.history()) == _seen(_turns(15))


def test_bad_input_names_its_place_in_the_conversation_and_stores_nothing() -> None:
    session = Memory().session("s")
    conversation = _turns(2)
    session.record(conversation)
    with pytest.raises(InvalidInput) as bad:
        session.record([*conversation, {"role": "robot", "content": "x"}])
    assert bad.value.index == len(conversation) and bad.value.field == "role"
    with pytest.raises(InvalidInput) as odd:
        session.record([*conversation, "hello"])  # type: ignore[list-item]
    assert odd.value.index == len(conversation)
    with pytest.raises(InvalidInput) as whole:
        session.record("hello")  # type: ignore[arg-type]
    assert whole.value.field == "messages"
    with pytest.raises(InvalidInput) as late:
        session.record(conversation, after=99)
    assert late.value.field == "after"
    extra = [{"role": "user", "content": str(i)} for i in range(3)]
    with pytest.raises(InvalidInput) as many:
        session.record([*conversation, *extra], most=2)
    assert many.value.field == "messages"
    assert session.last_seq() == len(conversation)


def test_the_recorded_branch_renders_what_the_conversation_holds() -> None:
    session = Memory().session("s")
    conversation = _turns(2)
    first = session.record(conversation)
    other = session.record([*conversation[:-1], {"role": "assistant", "content": "retry"}])
    view = session.view(budget=10_000)
    assert _seen(view.render(branch=first.at)) == _seen(conversation)
    assert view.render(branch=other.at)[-1]["content"] == "retry"
    continued = session.record([{"role": "user", "content": "more"}], after=first.at)
    assert _seen(session.history(branch=continued.at)) == _seen(
        [*conversation, {"role": "user", "content": "more"}]
    )
