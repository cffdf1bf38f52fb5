"""Waking by name: appends through any handle, in any process, reach the runner."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from contextfold import Memory, ThreadRunner
from contextfold.store.wake import LocalWake, wake_for

ROOT = Path(__file__).resolve().parent.parent
WAIT = 30.0


def turn(i: int) -> list[dict[str, str]]:
    text = " ".join(f"w{i}x{k}" for k in range(40))
    return [
        {"role": "user", "content": f"question {i}: {text}"},
        {"role": "assistant", "content": f"answer {i}: {text}."},
    ]


def wait_for(predicate, timeout: float = WAIT) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_local_wake_fans_out_by_session_and_stops() -> None:
    wake = LocalWake()
    heard: list[str] = []
    stop = wake.listen("a", heard.append)
    wake.notify("a")
    wake.notify("b")
    stop()
    wake.notify("a")
    assert heard == ["a"]


def test_handles_on_one_file_share_one_wake(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    assert Memory(db).wake is not None
    first, second = Memory(db), Memory(str(db))
    assert first.wake is second.wake
    assert wake_for(first.store) is first.wake


def test_an_append_through_a_second_handle_wakes_the_runner(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    session = Memory(db).session("s", system="sys")
    view = session.view("v", preset="offline", budget=1200)
    other = Memory(db).session("s")
    with ThreadRunner() as runner:
        runner.watch(view)
        for i in range(40):
            other.extend(turn(i))
        assert wait_for(lambda: bool(view.folds()))
        runner.wait_idle(WAIT)
    assert view.render_report().tokens <= 1200


def test_a_second_process_appending_1000_messages_advances_the_folds(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    session = Memory(db).session("s", system="sys")
    view = session.view("v", preset="offline", budget=1500)
    script = textwrap.dedent(
        f"""
        import time
        from contextfold import Memory
        session = Memory({str(db)!r}).session("s")
        for i in range(500):
            time.sleep(0.002)  # a conversation, turn by turn
            text = " ".join(f"w{{i}}x{{k}}" for k in range(40))
            session.append({{"role": "user", "content": f"question {{i}}: {{text}}"}})
            session.append({{"role": "assistant", "content": f"answer {{i}}: {{text}}."}})
        """
    )
    versions: list[int] = []
    with ThreadRunner() as runner:
        runner.watch(view)
        child = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)
        while child.poll() is None:
            assert view.render_report().tokens <= 1500
            versions.append(len(view.folds(include_superseded=True)))
            time.sleep(0.01)
        assert child.returncode == 0
        assert wait_for(lambda: session.store.last_seq("s") == 1001)
        time.sleep(0.3)
        runner.wait_idle(WAIT)
    assert versions == sorted(versions) and versions[-1] > versions[0]
    assert len(view.folds(include_superseded=True)) >= 2
    rendered = view.render_report()
    assert rendered.omitted == 0 and rendered.tokens <= 1500
    final = rendered.messages
    assert final[-1]["content"].startswith("answer 499")


def test_the_poll_reads_listened_sessions_a_page_at_a_time(tmp_path: Path) -> None:
    """Appends the poll alone can see (through the store, which announces nothing) reach
    their listeners on every page; a deleted session is skipped; one read per page."""
    from contextfold.core.log import NewMessage
    from contextfold.store.sqlite import SQLiteStore
    from contextfold.store.wake import POLL_PAGE, PollingWake

    store = SQLiteStore(tmp_path / "w.db")
    ids = [f"s{i}" for i in range(2 * POLL_PAGE + 1)]
    for sid in ids:
        store.create_session(sid, encoding="approx")
    reads: list[int] = []

    def last_seqs(page: list[str]) -> dict[str, int]:
        reads.append(len(page))
        return store.last_seqs(page)

    wake = PollingWake(last_seqs, interval_s=0.05)
    heard: set[str] = set()
    for sid in ids:
        wake.listen(sid, heard.add)
    assert wait_for(lambda: len(reads) >= 3)  # a first poll: what each session holds now
    store.delete_session(ids[1])
    for sid in (ids[0], ids[POLL_PAGE], ids[-1]):
        store.append(sid, [NewMessage({"role": "user", "content": "hi"}, 1)])
    assert wait_for(lambda: heard == {ids[0], ids[POLL_PAGE], ids[-1]})
    reads.clear()  # polls that began while the sessions were still being listened to are done
    assert wait_for(lambda: len(reads) >= 6)
    assert max(reads) == POLL_PAGE and set(reads) == {POLL_PAGE, 1}
    assert store.last_seqs([ids[0], ids[1], "nobody"]) == {ids[0]: 1}
