"""A session's log is a tree: branches through ``Session`` and ``View``, and databases
written before branches migrated with every message unchanged."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pg
import pytest

from contextfold import InvalidInput, Memory
from contextfold.core.branches import Branch, BranchPath
from contextfold.core.log import NewMessage
from contextfold.store.postgres import migrations as pg_schema

FIXTURES = Path(__file__).parent / "fixtures"


def chat(session: Any, rounds: int, tag: str = "") -> None:
    for i in range(rounds):
        session.append({"role": "user", "content": f"question {tag}{i} " + "word " * 30})
        session.append({"role": "assistant", "content": f"answer {tag}{i} " + "text " * 30})


def texts(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m.get("content"))[:12] for m in messages]


def test_regenerate_and_edit_make_branches_each_rendered_alone() -> None:
    session = Memory().session("s", system="be brief")
    chat(session, 2)  # seqs 2..5
    regenerated = session.append({"role": "assistant", "content": "answer 1 again"}, parent=4)
    edited = session.extend(
        [{"role": "user", "content": "question 0 edited"}, {"role": "assistant", "content": "ok"}],
        parent=1,
    )
    assert (regenerated.seq, regenerated.parent) == (6, 4)
    assert [(m.seq, m.parent) for m in edited] == [(7, 1), (8, 7)]
    assert [(b.head, b.fork, b.length) for b in session.branches()] == [
        (8, 1, 3),
        (6, 4, 5),
        (5, 4, 5),
    ]
    assert all(isinstance(b, Branch) and b.last_at > 0 for b in session.branches())
    assert texts(session.history()) == ["be brief", "question 0 e", "ok"]
    assert texts(session.history(branch=6))[-1] == "answer 1 aga"
    assert texts(session.history(branch=5))[-1] == "answer 1 tex"
    view = session.view("default", budget=4000)
    assert view.render() == session.history()
    # Alternating branches never mixes them, whatever the caches hold.
    for _ in range(2):
        assert view.render(branch=6) == session.history(branch=6)
        assert view.render(branch=5) == session.history(branch=5)
        assert view.render() == session.history()
    # The whole log stays every branch's, by seq.
    assert [m.seq for m in session.messages()] == list(range(1, 9))


def test_folds_of_one_branch_leave_another_as_it_was() -> None:
    session = Memory().session("s", system="be brief")
    chat(session, 20)  # seqs 2..41
    view = session.view("default", preset="offline", budget=1500)
    view.compact()
    shared = [(f.start, f.end) for f in view.folds()]
    assert shared and all(end < 41 for _, end in shared)
    # A branch from the middle, grown past the budget and compacted on its own.
    session.append({"role": "user", "content": "a new direction"}, parent=21)
    chat(session, 15, "b")
    mine = view.compact()
    assert mine.folds and all(f.end > 41 for f in mine.folds)
    assert {(f.start, f.end) for f in view.on(41).folds()} == set(shared)
    old = view.render(branch=41)
    assert texts(old)[-1] == "answer 19 te"
    assert not any("direction" in str(m.get("content")) for m in old)
    new = view.render()
    assert texts(new)[-1] == "answer b14 t"
    assert not any(str(m.get("content")).startswith("answer 19") for m in new)


def test_a_bad_parent_or_branch_names_its_field_and_stores_nothing() -> None:
    session = Memory().session("s")
    chat(session, 1)
    for bad in (9, -1, "1", True):
        with pytest.raises(InvalidInput) as caught:
            session.append({"role": "user", "content": "x"}, parent=bad)  # type: ignore[arg-type]
        assert caught.value.field == "parent"
    with pytest.raises(InvalidInput) as history:
        session.history(branch=9)
    assert history.value.field == "branch"
    with pytest.raises(InvalidInput) as render:
        session.view("default").render(branch=9)
    assert render.value.field == "branch"
    with pytest.raises(InvalidInput) as bad_message:
        session.extend([{"role": "user", "content": "y"}, {"role": "wizard"}], parent=1)
    assert (bad_message.value.index, bad_message.value.field) == (2, "role")
    assert [m.seq for m in session.messages()] == [1, 2]


def test_a_sqlite_file_written_before_branches_migrates_with_every_message_unchanged(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    with gzip.open(FIXTURES / "single_branch.sqlite.gz") as packed, path.open("wb") as out:
        shutil.copyfileobj(packed, out)
    raw = sqlite3.connect(path)
    assert "009_branches" not in {row[0] for row in raw.execute("SELECT name FROM _migrations")}
    raw.close()
    expected = json.loads((FIXTURES / "single_branch.json").read_text())
    memory = Memory(str(path))
    for sid, kept in expected.items():
        session = memory.existing_session(sid)
        logged = session.messages()
        assert [
            {"seq": m.seq, "message": m.message, "tokens": m.tokens, "key": m.key,
             "created_at": m.created_at}
            for m in logged
        ] == kept["messages"]  # fmt: skip
        assert [m.parent for m in logged] == [m.seq - 1 for m in logged]
        assert len(session.branches()) == (1 if logged else 0)
        assert session.history() == [m["message"] for m in kept["messages"]]
        for name, folds in kept["folds"].items():
            assert [[f.id, f.start, f.end] for f in session.view(name).folds()] == folds
    chat_session = memory.existing_session("chat")
    prompt = chat_session.view("default").render()
    assert prompt[-1] == {"role": "user", "content": "last question, no answer yet"}
    assert chat_session.append({"role": "assistant", "content": "a"}, parent=33).seq == 35
    memory.close()


def test_a_postgres_schema_before_branches_migrates_with_every_message_unchanged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("psycopg")
    from contextfold.store.postgres import PostgresStore

    pg.require_postgres()
    names = [n for n, _ in pg_schema.MIGRATIONS]
    old = pg_schema.MIGRATIONS[: names.index("005_branches")]
    rows = [(seq, {"role": "user" if seq % 2 else "assistant", "content": f"m{seq}"})
            for seq in (1, 2, 3, 5, 6)]  # fmt: skip
    with pg.fresh_schema() as schema:
        with monkeypatch.context() as patch:
            patch.setattr(pg_schema, "MIGRATIONS", old)
            first = PostgresStore(pg.url(schema))
            first.create_session("s", encoding="o200k_base")
            first.create_session("empty", encoding="o200k_base")
            with pg.raw(schema) as conn:
                conn.cursor().executemany(
                    "INSERT INTO messages (session_id, seq, role, message, tokens, key, "
                    "created_at) VALUES ('s', %s, %s, %s, 3, NULL, %s)",
                    [(seq, m["role"], json.dumps(m), float(seq)) for seq, m in rows],
                )
                conn.execute("UPDATE sessions SET last_seq = 6 WHERE id = 's'")
            first.close()
        store = PostgresStore(pg.url(schema))
        assert store.applied == ["005_branches"]
        logged = store.messages("s")
        assert [(m.seq, m.message, m.created_at) for m in logged] == [
            (seq, m, float(seq)) for seq, m in rows
        ]
        # A missing row (seq 4) is no fork: the line goes on after the message before it.
        assert [m.parent for m in logged] == [0, 1, 2, 3, 5]
        assert store.head("s", "v").path == BranchPath(((1, 3), (5, 6)))
        assert store.head("empty", "v").path == BranchPath()
        added = store.append("s", [NewMessage({"role": "user", "content": "next"}, 3)])
        assert [(m.seq, m.parent) for m in added] == [(7, 6)]
        assert store.head("s", "v").path == BranchPath(((1, 3), (5, 7)))
        store.close()


def test_the_rest_api_shows_and_makes_branches() -> None:
    from fastapi.testclient import TestClient
    from server_harness import make_service

    from contextfold.server.app import create_app

    api = "/api/v1/sessions/s1"
    service = make_service(auth=False, runner=False)
    with TestClient(create_app(service), base_url="http://127.0.0.1") as client:
        assert client.post("/api/v1/sessions", json={"id": "s1"}).status_code == 201
        two = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
        assert client.post(f"{api}/messages", json={"messages": two}).status_code == 201
        again = {"messages": [{"role": "assistant", "content": "b again"}], "parent": 1}
        made = client.post(f"{api}/messages", json=again)
        assert [(m["seq"], m["parent"]) for m in made.json()["messages"]] == [(3, 1)]
        listing = client.get(f"{api}/messages").json()["messages"]
        assert [(m["seq"], m["parent"]) for m in listing] == [(1, 0), (2, 1), (3, 1)]
        old = client.get(f"{api}/messages", params={"branch": 2}).json()["messages"]
        assert [m["seq"] for m in old] == [1, 2]
        found = client.get(f"{api}/branches").json()["branches"]
        assert [(b["head"], b["fork"], b["length"]) for b in found] == [(3, 1, 2), (2, 1, 2)]
        assert client.put(f"{api}/views/default", json={"budget": 1000}).status_code == 200
        newest = client.get(f"{api}/views/default/render").json()["messages"]
        assert newest[-1]["content"] == "b again"
        first = client.get(f"{api}/views/default/render", params={"branch": 2}).json()
        assert first["messages"][-1]["content"] == "b"
        assert client.get(f"{api}/views/default/folds", params={"branch": 2}).status_code == 200
        bad = client.post(f"{api}/messages", json={**again, "parent": 9})
        assert (bad.status_code, bad.json()["error"]["field"]) == (422, "parent")
        missing = client.get(f"{api}/views/default/render", params={"branch": 9})
        assert (missing.status_code, missing.json()["error"]["field"]) == (422, "branch")
        orphan = {"messages": [{"role": "tool", "tool_call_id": "x", "content": "r"}], "parent": 1}
        refused = client.post(f"{api}/messages", json=orphan).json()["error"]
        assert (refused["index"], refused["field"]) == (0, "tool_call_id")
        assert len(client.get(f"{api}/messages").json()["messages"]) == 3


def test_a_chatgpt_export_is_imported_as_its_whole_tree() -> None:
    from contextfold.memory.conversation_file import open_conversations

    read = open_conversations(FIXTURES / "chatgpt_conversations.json")
    assert read.format == "ChatGPT export"
    lisbon = read.conversations()[0]
    session = Memory().session("lisbon")
    logged = session.extend_tree(lisbon.tree)
    assert len(logged) == len(lisbon.tree)
    found = session.branches()
    assert len(found) == 2  # an edited question, and the branch the user last saw
    # The current node's branch is the latest: history is the conversation as exported.
    assert session.history() == lisbon.messages
    older = session.history(branch=found[1].head)
    assert older[:2] == lisbon.messages[:2] and older[2] != lisbon.messages[2]  # an edit
    assert older[-1]["content"] == "Try the bifanas near Rossio."
    # A single-branch conversation is one line.
    floats = read.conversations()[1]
    line = Memory().session("floats")
    line.extend_tree(floats.tree)
    assert line.history() == floats.messages and len(line.branches()) == 1
    with pytest.raises(InvalidInput) as bad:
        line.extend_tree([(0, {"role": "user", "content": "a"}), (5, {"role": "user"})])
    assert bad.value.field == "tree[1]"
    assert line.history() == floats.messages
