"""What a wire's messages keep rides back on the prompt's unchanged messages only, and the
proxy reads each logged message once to know it (``memory.kept``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contextfold import Memory
from contextfold.memory.kept import KeptMeta, with_kept
from contextfold.memory.session import Session

KEPT = {"items": [{"type": "reasoning", "id": "rs_1", "summary": []}]}


def _said(n: int, meta: bool) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": f"answer {n} " * 30}
    return {**message, "meta": {"responses": KEPT, "other": 1}} if meta else message


def _session(tmp_path: Path, name: str = "s") -> Session:
    session = Memory(str(tmp_path / "k.db")).session(name)
    session.extend([{"role": "system", "content": "sys"}])
    for n in range(6):
        session.extend([{"role": "user", "content": f"question {n} " * 30}, _said(n, n % 2 == 0)])
    return session


def test_unchanged_messages_get_their_kept_meta_and_nothing_else_does(tmp_path: Path) -> None:
    session = _session(tmp_path)
    view = session.view("v", preset="disabled", budget=400)  # cut, never bridged
    rendered = view.render_report(400)
    prompt = with_kept(
        rendered, KeptMeta().of(session, session.last_seq(), "responses"), "responses", 1
    )
    assert [m for m in prompt if "meta" not in m] == [
        m for m in rendered.messages if m.get("content") not in {_said(4, True)["content"]}
    ]
    assert [m["meta"] for m in prompt if "meta" in m] == [{"responses": KEPT}]
    assert prompt[-1] == rendered.messages[-1] == _said(5, False)
    # A message render clipped, or a fold in its place, is not the logged one: nothing rides.
    changed = [{**m, "content": "[clipped]"} for m in rendered.messages]
    again = type(rendered)(changed, 0, 0, (), ())
    assert (
        with_kept(again, KeptMeta().of(session, session.last_seq(), "responses"), "responses", 1)
        == changed
    )


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The seqs read from logs, as ``Session.messages`` returns them."""
    seen: list[int] = []
    real = Session.messages

    def counted(self: Session, *, after: int = 0, limit: int | None = None) -> Any:
        found = real(self, after=after, limit=limit)
        seen.extend(m.seq for m in found)
        return found

    monkeypatch.setattr(Session, "messages", counted)
    return seen


def test_each_logged_message_is_read_once_and_a_recreated_session_afresh(
    tmp_path: Path, reads: list[int]
) -> None:
    session = _session(tmp_path)
    cache = KeptMeta()
    assert sorted(cache.of(session, session.last_seq(), "responses")) == [3, 7, 11]
    session.extend([{"role": "user", "content": "more"}, _said(6, True)])
    assert sorted(cache.of(session, session.last_seq(), "responses")) == [3, 7, 11, 15]
    assert reads == list(range(1, 16))
    memory = session.memory
    memory.delete_session(session.id)
    fresh = memory.session(session.id)
    fresh.extend([{"role": "user", "content": "new"}, _said(0, False)])
    assert cache.of(fresh, fresh.last_seq(), "responses") == {}


def test_the_cache_keeps_within_its_capacity(tmp_path: Path, reads: list[int]) -> None:
    cache = KeptMeta(capacity=4)
    first, second = _session(tmp_path, "a"), _session(tmp_path, "b")
    for session in (first, first, second, first):
        assert len(cache.of(session, session.last_seq(), "responses")) == 3
    # "a" was read, kept, dropped to make room for "b", and read again.
    assert len(reads) == 3 * first.last_seq()
