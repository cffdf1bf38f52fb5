"""Recall from the log: what a view's prompt brings back of what was folded away."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import pytest
from conftest import load_rows
from test_determinism import assert_same, under_each_seed

from contextfold import BudgetError, Fold, Memory, Session
from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message, for_model
from contextfold.core.render import Rendered
from contextfold.core.units import tool_unit_faults
from contextfold.memory.cache import PromptCache
from contextfold.memory.config import ViewConfig
from contextfold.memory.recalled import HEADER, RecallSettings
from contextfold.store import RAMStore, SQLiteStore, Store
from contextfold.store.base import SearchHit

LINE = re.compile(r"^#(\d+) (\S.*?) (user|assistant|tool)\b[^:]*: ", re.M)
DATE = {"date": "3 March, 2024"}


def said(role: str, text: str, **extra: Any) -> Message:
    return {"role": role, "content": text, "meta": DATE, **extra}


def call(name: str, arguments: str, *ids: str) -> Message:
    return {
        "role": "assistant",
        "content": None,
        "meta": DATE,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": name, "arguments": arguments}}
            for i in ids
        ],
    }


def result(call_id: str, text: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": text, "meta": DATE}


FILLER = " ".join(["the weather was mild and the meeting ran long"] * 6)


def log() -> list[Message]:
    """A system prompt, an old exchange with rare words, an old tool unit, then filler."""
    messages = [
        {"role": "system", "content": "You help."},
        said("user", "My sister Quillon adopted a greyhound named Pemberton."),  # 2
        said("assistant", "Pemberton is a lovely name."),  # 3
        call("lookup", '{"what": "zanzibar ferry"}', "c1", "c2"),  # 4
        result("c1", "The zanzibar ferry leaves at 7:15 from pier nine."),  # 5
        result("c2", "Tickets cost 35 dollars."),  # 6
        said("assistant", "The ferry leaves early."),  # 7
    ]
    for i in range(30):
        messages.append(said("user", f"turn {i}: {FILLER}"))
        messages.append(said("assistant", f"reply {i}: {FILLER}"))
    return messages


def folded(session: Session, view: str, start: int, end: int) -> Fold:
    """Fold ``start..end`` of ``view`` into one short summary."""
    summary = {"role": "user", "content": "[summary: family and travel talk]"}
    fold = Fold(
        view, start, end, "summary", summary["content"], (summary,), "test", 100,
        session.counter.message(summary),
    )  # fmt: skip
    session.store.commit_folds(
        session.id, view, [fold], session.store.head(session.id, view).fold_version
    )
    return fold


def block_of(rendered: Rendered) -> tuple[int, Message] | None:
    found = [
        (i, m)
        for i, m in enumerate(rendered.messages)
        if m["role"] == "system" and str(m.get("content", "")).startswith(HEADER)
    ]
    assert len(found) <= 1
    return found[0] if found else None


def seqs_in(rendered: Rendered) -> list[int]:
    found = block_of(rendered)
    if found is None:
        return []
    return [int(m.group(1)) for m in LINE.finditer(str(found[1]["content"]))]


@pytest.fixture
def session() -> Session:
    chat = Memory().session("s")
    chat.extend(log())
    return chat


def test_recalled_block_sits_after_the_folds_before_the_recent_messages(session: Session) -> None:
    fold = folded(session, "v", 2, 30)
    view = session.view("v", preset="disabled", recall=True)
    session.append(said("user", "What was the name of Quillon's greyhound?"))
    rendered = view.render_report()
    found = block_of(rendered)
    assert found is not None
    at, block = found
    assert rendered.messages[:at] == [{"role": "system", "content": "You help."}, fold.messages[0]]
    history = session.history()
    assert rendered.messages[at + 1 :] == [for_model(m) for m in history[30:]]
    assert rendered.recall_at == at
    assert 2 in rendered.recalled and rendered.recalled == tuple(seqs_in(rendered))
    content = str(block["content"])
    assert (
        "#2 3 March, 2024 user: My sister Quillon adopted a greyhound named Pemberton." in content
    )
    assert content.splitlines()[0] == HEADER
    assert list(rendered.recalled) == sorted(rendered.recalled)
    assert session.counter.messages(rendered.messages) == rendered.tokens


def test_the_block_stays_for_its_turn_so_each_prompt_extends_the_last(session: Session) -> None:
    folded(session, "v", 2, 30)
    view = session.view("v", preset="disabled", recall=True, budget=4000)
    session.append(said("user", "When does the zanzibar ferry leave?"))
    asked = view.render_report()
    at, _ = block_of(asked) or (None, None)
    assert at is not None and {4, 5, 6} <= set(asked.recalled)
    previous = asked.messages
    for message in (
        call("lookup", '{"what": "ferry times"}', "c9"),
        result("c9", "No timetable found."),
        said("assistant", "It leaves at 7:15."),
    ):
        session.append(message)
        rendered = view.render_report()
        assert rendered.messages[: len(previous)] == previous  # the turn's tool loop extends it
        assert rendered.recalled == asked.recalled
        assert rendered.tokens <= 4000
        previous = rendered.messages
    assert tool_unit_faults(previous) == []
    session.append(said("user", "And the name of Quillon's greyhound?"))
    nxt = view.render_report()
    # A new question changes the block, after the folds: what comes before it stays.
    assert nxt.messages[:at] == asked.messages[:at]
    assert block_of(nxt) is not None and 2 in nxt.recalled


def test_a_tool_call_is_recalled_with_all_its_results_or_not_at_all(session: Session) -> None:
    folded(session, "v", 2, 30)
    view = session.view("v", preset="disabled", recall=True)
    session.append(said("user", "When does the zanzibar ferry leave?"))
    rendered = view.render_report()
    assert {4, 5, 6} <= set(rendered.recalled)
    content = str(block_of(rendered)[1]["content"])  # type: ignore[index]
    assert '#4 3 March, 2024 assistant: lookup({"what": "zanzibar ferry"})\nlookup(' in content
    assert "#6 3 March, 2024 tool: Tickets cost 35 dollars." in content
    # With room for one plain message only, the unit goes whole: none of it is recalled.
    full = rendered.tokens
    unit_cost = session.counter.message(block_of(rendered)[1])  # type: ignore[index]
    for budget in range(full - unit_cost, full + 1, 7):
        tight = view.render_report(budget)
        assert tight.tokens <= budget
        got = set(tight.recalled)
        assert got.isdisjoint({4, 5, 6}) or {4, 5, 6} <= got, budget


def test_never_over_budget_never_a_duplicate_never_a_split_unit() -> None:
    rows = load_rows("taubench_airline_dev", limit=20) + load_rows("locomo_dev", limit=1)
    checked = recalled = 0
    for row in rows:
        session = Memory().session(row["id"])
        session.extend(row["messages"])
        history = session.history()
        answered = {m["tool_call_id"] for m in history if m["role"] == "tool"}
        latest_user = for_model([m for m in history if m["role"] == "user"][-1])
        full = session.view("probe").render_report().tokens
        for share in (0.08, 0.15, 0.25, 0.4, 0.6, 0.9):
            budget = int(full * share)
            view = session.view(f"offline-{share}", preset="offline", budget=budget)
            try:
                view.compact()
                rendered = view.render_report()
            except BudgetError:  # the system prompt and the latest user message alone are over
                continue
            prompt = rendered.messages
            assert rendered.tokens <= budget
            assert session.counter.messages(prompt) == rendered.tokens
            assert tool_unit_faults(prompt, answered=answered) == []
            assert latest_user in prompt
            if history[0]["role"] == "system":
                assert prompt[0] == for_model(history[0])
            assert set(rendered.recalled).isdisjoint(rendered.shown)
            assert rendered.recalled == tuple(seqs_in(rendered))
            hidden = [s for s in rendered.recalled if for_model(history[s - 1]) not in prompt]
            for seq in rendered.recalled:
                assert history[seq - 1]["role"] != "system"
                # A call a masking fold keeps beside its masked output comes back
                # with its results, which the prompt lacks.
                if seq not in hidden:
                    assert history[seq - 1].get("tool_calls") and hidden
            checked += 1
            recalled += bool(rendered.recalled)
    assert checked > 50 and recalled > 10, (checked, recalled)


def test_never_over_budget_at_any_budget(session: Session) -> None:
    folded(session, "v", 2, 40)
    view = session.view("v", preset="disabled", recall={"share": 0.5, "limit": 4})
    session.append(said("user", "Pemberton and the zanzibar ferry: what was it again?"))
    whole = view.render_report().tokens
    counts = set()
    for budget in range(60, whole + 40, 3):
        try:
            rendered = view.render_report(budget)
        except BudgetError:  # too small for the system prompt and the question
            continue
        assert rendered.tokens <= budget
        assert session.counter.messages(rendered.messages) == rendered.tokens
        assert rendered.budget == budget
        counts.add(len(rendered.recalled))
    assert len(counts) > 2  # recall grew with the room


def test_recall_respects_the_view_filter(session: Session) -> None:
    folded(session, "v", 2, 30)
    view = session.view("v", preset="disabled", recall=True, filter={"not": {"role": "tool"}})
    session.append(said("user", "When does the zanzibar ferry leave, and Pemberton?"))
    rendered = view.render_report()
    assert 2 in rendered.recalled
    # The filter hides the results, so the call's unit is hidden whole.
    assert set(rendered.recalled).isdisjoint({4, 5, 6})


def test_explicit_query_overrides_the_latest_user_message(session: Session) -> None:
    folded(session, "v", 2, 30)
    view = session.view("v", preset="disabled", recall=True)
    session.append(said("user", "When does the zanzibar ferry leave?"))
    by_latest = view.render_report()
    asked = view.render_report(query="Quillon greyhound")
    assert {4, 5} <= set(by_latest.recalled) and 5 not in asked.recalled
    assert 2 in asked.recalled
    # The query's prompt is not cached: the next render recalls by the latest message again.
    assert view.render_report() == by_latest
    with pytest.raises(InvalidInput) as bad:
        view.render_report(query=7)  # type: ignore[arg-type]
    assert bad.value.field == "query"
    off = session.view("plain", preset="keep-recent")
    with pytest.raises(InvalidInput) as refused:
        off.render_report(query="zanzibar")
    assert refused.value.field == "query"


def test_the_prompt_cache_never_serves_a_stale_recall(session: Session) -> None:
    folded(session, "v", 2, 30)
    view = session.view("v", preset="disabled", recall=True)
    session.append(said("user", "When does the zanzibar ferry leave?"))
    first = view.render_report()
    assert {4, 5, 6} <= set(first.recalled)
    session.append(said("assistant", "Let me check."))
    grown = view.render_report()  # the same question: the prompt only grows
    assert grown.messages[:-1] == first.messages and grown.recalled == first.recalled
    session.append(said("user", "And the name of Quillon's greyhound?"))
    fresh = view.render_report()
    assert 2 in fresh.recalled and fresh.recalled != first.recalled


def test_recall_is_on_for_chat_and_offline_and_off_for_the_others() -> None:
    assert ViewConfig(preset="offline").recall_settings == RecallSettings()
    assert ViewConfig(preset="chat").recall_settings == RecallSettings()
    for preset in ("keep-recent", "taskweaver", "disabled", "token-budget", "rolling"):
        assert ViewConfig(preset=preset).recall_settings is None, preset
    assert ViewConfig(preset="keep-recent", recall=True).recall_settings == RecallSettings()
    assert ViewConfig(preset="offline", recall=False).recall_settings is None
    tuned = ViewConfig(preset="offline", recall={"share": 0.2, "limit": 3})
    assert tuned.recall_settings == RecallSettings(0.2, 3)
    assert ViewConfig.from_data(tuned.to_data()) == tuned
    session = Memory().session("s")
    session.extend(log())
    session.append(said("user", "Quillon greyhound?"))
    recent = session.view("recent", preset="keep-recent", budget=1000)
    recent.compact()
    assert recent.render_report().recalled == ()
    offline = session.view("offline", preset="offline", budget=1000)
    offline.compact()
    assert 2 in offline.render_report().recalled


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"share": 1.5}, "recall.share"),
        ({"share": 0}, "recall.share"),
        ({"share": True}, "recall.share"),
        ({"limit": 0}, "recall.limit"),
        ({"limit": 2.5}, "recall.limit"),
        ({"limt": 3}, "recall.limt"),
        ("yes", "recall"),
    ],
)
def test_bad_recall_settings_name_the_field(value: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as bad:
        ViewConfig(preset="offline", recall=value)
    assert bad.value.field == field
    with pytest.raises(InvalidInput) as stored:
        ViewConfig.from_data({"preset": "chat", "recall": value})
    assert stored.value.field == field
    session = Memory().session("s")
    with pytest.raises(InvalidInput):
        session.view("v", preset="offline", recall=value)
    assert session.view("v").version == 0


@pytest.mark.parametrize("backend", ["ram", "sqlite", "postgres"])
def test_recall_works_on_every_store(backend: str, tmp_path: Path) -> None:
    if backend == "postgres":
        import pg

        from contextfold.store.postgres import PostgresStore

        pg.require_postgres()
        with pg.fresh_schema() as schema:
            store: Store = PostgresStore(pg.url(schema))
            try:
                _recalls_in(store)
            finally:
                store.close()
        return
    store = RAMStore() if backend == "ram" else SQLiteStore(tmp_path / "recall.db")
    _recalls_in(store)
    store.close()


def _recalls_in(store: Store) -> None:
    session = Memory(store).session("s")
    session.extend(log())
    folded(session, "v", 2, 30)
    view = session.view("v", preset="disabled", recall=True)
    session.append(said("user", "When does the zanzibar ferry leave?"))
    rendered = view.render_report()
    assert {4, 5, 6} <= set(rendered.recalled)
    assert Memory(store).session("s").view("v").render_report() == rendered


_SCRIPT = """
import json, sys
from contextfold import Memory
session = Memory().session("s")
rows = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8")]
session.extend(rows[0]["messages"][:300])
view = session.view("v", preset="offline", budget=1500)
view.compact()
out = [view.render_report(query=q["question"]).messages for q in rows[0]["questions"][:20]]
print(json.dumps(out, sort_keys=True))
"""


def test_recall_is_the_same_under_every_hash_seed(tmp_path: Path) -> None:
    rows = load_rows("locomo_dev", limit=1)
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(rows[0]) + "\n", encoding="utf-8")
    outputs = under_each_seed([sys.executable, "-c", _SCRIPT, str(path)])
    assert_same(outputs)
    prompts = json.loads(outputs["0"])
    assert sum(HEADER in json.dumps(p) for p in prompts) > 10


def test_the_service_stores_recall_and_renders_by_a_query() -> None:
    from fastapi.testclient import TestClient
    from server_harness import make_service

    from contextfold.server.app import create_app

    api = "/api/v1/sessions"
    service = make_service(auth=False, runner=False)
    with TestClient(create_app(service), base_url="http://127.0.0.1") as client:
        assert client.post(api, json={"id": "s"}).status_code == 201
        answer = client.post(f"{api}/s/messages", json={"messages": log()})
        assert answer.status_code in (200, 201), answer.text
        put = client.put(f"{api}/s/views/v", json={"preset": "keep-recent", "budget": 400})
        assert put.json()["config"]["recall"] is None
        put = client.put(f"{api}/s/views/v", json={"preset": "offline", "recall": True})
        assert put.json()["config"]["recall"] is True
        assert client.post(f"{api}/s/views/v/compact").status_code == 200
        out = client.get(f"{api}/s/views/v/render", params={"query": "Quillon greyhound"}).json()
        assert 2 in out["report"]["recalled"]
        assert any(HEADER in str(m.get("content")) for m in out["messages"])
        bad = client.put(f"{api}/s/views/v", json={"recall": {"share": 3}})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "recall.share"
        client.put(f"{api}/s/views/v", json={"recall": False})
        refused = client.get(f"{api}/s/views/v/render", params={"query": "Quillon"})
        assert refused.status_code == 422 and refused.json()["error"]["field"] == "query"


class CountingSearches(RAMStore):
    """A RAM store that counts its searches and its reads of a view's folds."""

    def __init__(self) -> None:
        super().__init__()
        self.searches = 0
        self.fold_reads = 0

    def folds(
        self,
        session_id: str,
        view: str,
        *,
        include_superseded: bool = False,
        known: Mapping[str, Fold] | None = None,
    ) -> list[Fold]:
        self.fold_reads += 1
        return super().folds(session_id, view, include_superseded=include_superseded, known=known)

    def search(
        self,
        session_id: str,
        query: str,
        *,
        limit: int = 20,
        before: int | None = None,
        after: int | None = None,
        roles: Collection[str] | None = None,
    ) -> list[SearchHit]:
        self.searches += 1
        return super().search(
            session_id, query, limit=limit, before=before, after=after, roles=roles
        )


def test_a_turn_searches_once_for_its_user_message_and_keeps_the_block() -> None:
    store = CountingSearches()
    chat = Memory(store).session("s")
    chat.extend(log())
    folded(chat, "v", 2, 30)
    view = chat.view("v", preset="disabled", recall=True)
    chat.append(said("user", "When does the zanzibar ferry leave?"))
    first = view.render_report()
    assert {4, 5, 6} <= set(first.recalled) and store.searches == 1
    chat.append(said("assistant", "Let me check the timetable."))
    grown = view.render_report()
    assert grown.recalled == first.recalled and store.searches == 1
    assert grown.messages[:-1] == first.messages
    view.binding.prompts = PromptCache()  # emptied (a fold landed, say): the same question
    again = view.render_report()
    assert again.recalled == first.recalled and store.searches == 2
    reads = store.fold_reads
    chat.append(said("user", "And what did Caroline adopt?"))
    asked = view.render_report()
    assert store.searches == 3
    # A new question searches on top of the prompt grown by appends: no fold is read again.
    assert store.fold_reads == reads and asked.messages[-1]["content"].startswith("And what")
