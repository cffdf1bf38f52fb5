"""Invariants kept where data is written, as a user meets them through ``Memory``:
one system prompt per session, a key naming one message, and no stored token
count trusted when it cannot be right."""

from __future__ import annotations

import multiprocessing
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pg
import pytest

from contextfold import Memory
from contextfold.core.errors import InvalidInput, StoreError

SPAWN = multiprocessing.get_context("spawn")


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "chat.db")
        return
    pg.require_postgres()
    with pg.fresh_schema() as schema:
        yield pg.url(schema)


def _damage_tokens(url: str, seq: int, tokens: int) -> None:
    """Set a stored count by hand, as a careless tool editing the database would."""
    if "://" not in url:
        with sqlite3.connect(url) as conn:
            conn.execute("UPDATE messages SET tokens = ? WHERE seq = ?", (tokens, seq))
        return
    with pg.raw(url.rpartition("schema=")[2]) as conn:
        conn.execute("UPDATE messages SET tokens = %s WHERE seq = %s", (tokens, seq))


@pytest.mark.parametrize("damaged", [0, 10**9])
def test_a_token_count_that_cannot_be_right_is_an_error_naming_the_seq(
    url: str, damaged: int
) -> None:
    with Memory(url) as memory:
        session = memory.session("s", system="You are brief.")
        for i in range(12):
            session.append({"role": "user", "content": f"question {i} " + "words " * 60})
            session.append({"role": "assistant", "content": f"answer {i} " + "words " * 60})
        assert session.view("plain").render(1500)
    _damage_tokens(url, 9, damaged)
    with Memory(url) as memory, pytest.raises(StoreError, match="message seq 9 of session 's'"):
        memory.session("s").view("plain").render(1500)


def test_a_session_keeps_the_system_prompt_it_was_created_with(url: str) -> None:
    with Memory(url) as memory:
        memory.session("s", system="You are brief.").append({"role": "user", "content": "hi"})
        assert memory.session("s", system="You are brief.").history()[0]["content"] == (
            "You are brief."
        )
        with pytest.raises(InvalidInput) as caught:
            memory.session("s", system="You are verbose.")
        assert caught.value.field == "system"
        memory.session("plain").append({"role": "user", "content": "hi"})
        with pytest.raises(InvalidInput, match="must be the first message"):
            memory.session("plain", system="Too late.")
        assert [m["role"] for m in memory.session("plain").history()] == ["user"]


def test_a_key_used_again_for_another_message_is_refused(url: str) -> None:
    with Memory(url) as memory:
        session = memory.session("s")
        first = session.append({"role": "user", "content": "hello"}, key="k")
        assert session.append({"role": "user", "content": "hello"}, key="k") == first
        with pytest.raises(InvalidInput) as caught:
            session.append({"role": "user", "content": "something else"}, key="k")
        assert (caught.value.index, caught.value.field) == (1, "key")
        assert session.history() == [{"role": "user", "content": "hello"}]


def open_with_system(url: str, system: str, start: Any) -> str:
    """Open session "new" with ``system`` once released; what happened."""
    with Memory(url) as memory:
        start.wait(60)
        try:
            memory.session("new", system=system)
        except InvalidInput as exc:
            return f"refused {exc.field}"
    return "opened"


def test_two_processes_creating_a_session_with_different_prompts(url: str) -> None:
    with Memory(url):
        pass  # migrated once, so the two processes race on the session alone
    for round_ in range(3):
        with SPAWN.Manager() as manager:
            start = manager.Barrier(2)
            with SPAWN.Pool(2) as pool:
                args = [(url, f"prompt {who} {round_}", start) for who in ("a", "b")]
                outcomes = pool.starmap(open_with_system, args)
        assert sorted(outcomes) == ["opened", "refused system"]
        with Memory(url) as memory:
            history = memory.session("new").history()
            assert len(history) == 1 and history[0]["role"] == "system"
            memory.delete_session("new")
