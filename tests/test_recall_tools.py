"""The recall tools a model calls: search the log, expand a fold, list the folds.

Every store is exercised where the store is involved (RAM, SQLite, PostgreSQL
through ``tests/pg.py``): the tools read through the session's store, and a
session of another tenant beside it in the same store must stay out of reach.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pg
import pytest

from contextfold import InvalidInput, Memory, Session
from contextfold.core.folds import labelled, unlabelled
from contextfold.core.messages import Message, for_model, text_of
from contextfold.core.units import tool_unit_faults
from contextfold.memory.recall_tools import EXPAND, FOLDS, SEARCH, RecallTools, tool_definitions
from contextfold.store.search import CANDIDATES
from contextfold.strategies.masking import ObservationMasking
from contextfold.strategies.pipeline import Pipeline

WORDS = [
    "walrus",
    "heron",
    "quokka",
    "marmot",
    "ibis",
    "tapir",
    "okapi",
    "narwhal",
    "pangolin",
    "axolotl",
    "capybara",
    "wombat",
]


def round_of(i: int, word: str, tag: str = "") -> list[Message]:
    """A user asking about ``word``, a tool call reading its file, and an answer."""
    call = f"call{tag}{i}"
    return [
        {"role": "user", "content": f"Round {i}: please check the {word} module{tag}."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call,
                    "type": "function",
                    "function": {"name": "read_file", "arguments": json.dumps({"path": word})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call, "content": f"{word} source: " + "lorem ipsum " * 60},
        {"role": "assistant", "content": f"The {word} module looks fine{tag}."},
    ]


def build(memory: Memory, session_id: str, tag: str = "") -> Session:
    """A session of twelve rounds compacted by the offline preset, so folds cover most."""
    session = memory.session(session_id, system="You review modules.")
    for i, word in enumerate(WORDS):
        session.extend(round_of(i, word + tag, tag))
    view = session.view("default", preset="offline", budget=1500)
    view.compact()
    assert view.folds(), "the budget is small enough for the view to fold"
    return session


@pytest.fixture(params=["ram", "sqlite", "postgres"])
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Memory]:
    if request.param == "ram":
        with Memory() as opened:
            yield opened
    elif request.param == "sqlite":
        with Memory(tmp_path / "recall.db") as opened:
            yield opened
    else:
        pg.require_postgres()
        with pg.fresh_schema() as schema, Memory(pg.url(schema)) as opened:
            yield opened


def call(tools: RecallTools, name: str, **arguments: Any) -> dict[str, Any]:
    """The tool's answer, read back from the JSON text a model gets."""
    answer = tools.answer(name, json.dumps(arguments))
    assert tools.session.counter.text(answer) <= tools.max_tokens
    result: dict[str, Any] = json.loads(answer)
    return result


def raw(session: Session, start: int, end: int) -> list[Message]:
    """The logged messages ``start..end`` as a model is sent them."""
    return [for_model(m.message) for m in session.messages(after=start - 1, limit=end - start + 1)]


def in_place(session: Session) -> list[Any]:
    return [f for f in session.view("default").folds() if f.placement == "in_place"]


# -- the definitions ----------------------------------------------------------


def test_the_definitions_are_openai_function_tools() -> None:
    session = Memory().session("s")
    tools = RecallTools(session)
    assert tools.names == frozenset({SEARCH, EXPAND, FOLDS})
    definitions = tools.definitions
    assert [d["function"]["name"] for d in definitions] == [SEARCH, EXPAND, FOLDS]
    for definition in definitions:
        assert definition["type"] == "function"
        function = definition["function"]
        assert set(function) == {"name", "description", "parameters"}
        assert function["description"]
        assert function["parameters"]["type"] == "object"
        assert function["parameters"]["additionalProperties"] is False
    assert definitions[0]["function"]["parameters"]["required"] == ["query"]
    # Copies: a caller editing them changes nothing for the next.
    definitions[0]["function"]["name"] = "changed"
    assert tools.definitions[0]["function"]["name"] == SEARCH
    assert tool_definitions() == tools.definitions
    json.dumps(definitions)


def test_folds_name_their_range_in_the_prompt(memory: Memory) -> None:
    session = build(memory, "t/a")
    view = session.view("default")
    prompt = json.dumps(view.render())
    folds = in_place(session)
    assert folds
    for fold in folds:
        assert f"[folded: seq {fold.start}-{fold.end}]" in prompt
    report = view.render_report()
    assert report.tokens == session.counter.messages(report.messages)
    # Only the folds rendered are named: a summary over older folds quotes none of their labels.
    rendered = {f.id: f for f in view.folds()}
    named = set(re.findall(r"\[folded: seq \d+-\d+\]", prompt))
    assert named == {f"[folded: seq {rendered[i].start}-{rendered[i].end}]" for i in report.folds}


@pytest.mark.parametrize(
    "message",
    [
        {"role": "assistant", "content": "a summary"},
        {"role": "user", "content": [{"type": "text", "text": "a summary"}]},
        {"role": "assistant", "content": None},
    ],
)
def test_a_label_is_added_and_taken_off_whole(message: Message) -> None:
    shown = labelled(message, 12, 40)
    assert text_of(shown).endswith("[folded: seq 12-40]")
    assert message == unlabelled(shown) or message["content"] is None
    assert unlabelled(message) == message


# -- contextfold_search -------------------------------------------------------


def test_search_finds_folded_messages_with_their_fold(memory: Memory) -> None:
    session = build(memory, "t/a")
    tools = RecallTools(session)
    result = call(tools, SEARCH, query="quokka module")
    hits = result["hits"]
    assert hits, result
    best = hits[0]
    logged = {m.seq: m for m in session.messages()}
    assert "quokka" in best["snippet"].lower()
    assert "quokka" in json.dumps(logged[best["seq"]].message).lower()
    assert best["role"] == logged[best["seq"]].role
    stamp = datetime.fromtimestamp(logged[best["seq"]].created_at, UTC)
    assert best["time"] == stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
    covering = [f for f in in_place(session) if f.start <= best["seq"] <= f.end]
    if covering:
        assert best["fold"] == covering[0].id
        assert best["folded"] == [covering[0].start, covering[0].end]
    else:
        assert best["fold"] is None and best["folded"] is None
    assert any(h["fold"] is not None for h in hits), "an early round is folded"
    assert result["left_out"] == 0


def test_search_filters_by_role_and_limit(memory: Memory) -> None:
    session = build(memory, "t/a")
    tools = RecallTools(session)
    both = call(tools, SEARCH, query="walrus")["hits"]
    assert {h["role"] for h in both} >= {"user", "assistant", "tool"}
    users = call(tools, SEARCH, query="walrus", role="user")["hits"]
    assert users and all(h["role"] == "user" for h in users)
    several = call(tools, SEARCH, query="walrus", role=["tool", "assistant"])["hits"]
    assert several and {h["role"] for h in several} <= {"tool", "assistant"}
    assert len(call(tools, SEARCH, query="module", limit=2)["hits"]) == 2


def test_search_by_role_finds_it_past_the_candidates_of_other_roles(memory: Memory) -> None:
    session = memory.session("t/a")
    session.extend(
        [{"role": "assistant", "content": f"the kestrel nests, note {i}"} for i in range(3)]
    )
    session.extend([{"role": "user", "content": "kestrel sighting"}] * (CANDIDATES + 20))
    tools = RecallTools(session)
    hits = call(tools, SEARCH, query="kestrel", role="assistant", limit=5)["hits"]
    assert sorted(h["seq"] for h in hits) == [1, 2, 3]
    assert {h["role"] for h in call(tools, SEARCH, query="kestrel", limit=5)["hits"]} == {"user"}


def test_search_filters_by_time(memory: Memory) -> None:
    session = memory.session("t/a")
    session.extend(round_of(0, "glacier"))
    time.sleep(0.05)
    middle = time.time()
    time.sleep(0.05)
    session.extend(round_of(1, "glacier", "late"))
    tools = RecallTools(session)
    seqs = {h["seq"] for h in call(tools, SEARCH, query="glacier")["hits"]}
    assert seqs == set(range(1, 9))
    later = {h["seq"] for h in call(tools, SEARCH, query="glacier", after=middle)["hits"]}
    assert later == {5, 6, 7, 8}
    earlier = {h["seq"] for h in call(tools, SEARCH, query="glacier", before=middle)["hits"]}
    assert earlier == {1, 2, 3, 4}
    iso = datetime.fromtimestamp(middle, UTC).isoformat()
    assert {h["seq"] for h in call(tools, SEARCH, query="glacier", after=iso)["hits"]} == later
    naive = datetime.fromtimestamp(middle, UTC).replace(tzinfo=None).isoformat()
    assert {h["seq"] for h in call(tools, SEARCH, query="glacier", before=naive)["hits"]} == earlier
    assert call(tools, SEARCH, query="glacier", after=time.time() + 60)["hits"] == []


def test_search_keeps_what_the_view_filter_hides_out() -> None:
    session = Memory().session("s")
    session.extend(round_of(0, "lagoon"))
    session.view("users", filter={"role": "user"})
    tools = RecallTools(session, "users")
    hits = call(tools, SEARCH, query="lagoon")["hits"]
    assert [h["role"] for h in hits] == ["user"]


def test_a_long_search_answer_stays_within_max_tokens() -> None:
    session = Memory().session("s")
    for i in range(60):
        session.append({"role": "user", "content": f"fjord {i} " + "a long line of text " * 20})
    tools = RecallTools(session, max_tokens=300)
    result = call(tools, SEARCH, query="fjord", limit=50)
    assert 0 < len(result["hits"]) < 50
    assert result["left_out"] == 50 - len(result["hits"])


# -- contextfold_expand -------------------------------------------------------


def pages(tools: RecallTools, **target: Any) -> list[dict[str, Any]]:
    """Every page of an expansion, following next_cursor."""
    out = [call(tools, EXPAND, **target)]
    while out[-1]["next_cursor"] is not None:
        out.append(call(tools, EXPAND, **target, cursor=out[-1]["next_cursor"]))
        assert len(out) < 100
    return out


def without_place(shown: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in shown.items() if k not in ("seq", "time")}


def test_expand_a_fold_gives_its_raw_messages_page_by_page(memory: Memory) -> None:
    session = build(memory, "t/a")
    tools = RecallTools(session, max_tokens=600)
    fold = max(in_place(session), key=lambda f: f.end - f.start)
    got = pages(tools, id=fold.id)
    assert len(got) > 1, "the fold is longer than a page"
    assert [p["page"] for p in got] == list(range(1, len(got) + 1))
    shown = [m for p in got for m in p["messages"]]
    assert [m["seq"] for m in shown] == list(range(fold.start, fold.end + 1))
    assert [without_place(m) for m in shown] == raw(session, fold.start, fold.end)
    assert all(p["fold"] == fold.id and p["clipped"] == [] for p in got)
    for page in got:
        # Each page is a valid run of messages: no tool unit split at its edges.
        assert tool_unit_faults([without_place(m) for m in page["messages"]]) == []
    by_number = [call(tools, EXPAND, id=fold.id, page=n) for n in range(1, len(got) + 1)]
    assert by_number == got


def test_expand_a_seq_range(memory: Memory) -> None:
    session = build(memory, "t/a")
    tools = RecallTools(session)
    result = call(tools, EXPAND, start=3, end=6)
    assert [m["seq"] for m in result["messages"]] == [3, 4, 5, 6]
    assert [without_place(m) for m in result["messages"]] == raw(session, 3, 6)
    assert result["fold"] is None and result["next_cursor"] is None


def test_a_message_bigger_than_a_page_is_clipped() -> None:
    session = Memory().session("s")
    session.append({"role": "user", "content": "start"})
    session.append({"role": "user", "content": "estuary " * 3000})
    session.append({"role": "user", "content": "end"})
    tools = RecallTools(session, max_tokens=400)
    got = pages(tools, start=1, end=3)
    shown = [m for p in got for m in p["messages"]]
    assert [m["seq"] for m in shown] == [1, 2, 3]
    assert [2] in [p["clipped"] for p in got]
    big = shown[1]
    assert big["clipped_from_chars"] == len("estuary " * 3000)
    assert big["content"].startswith("estuary estuary")


def test_a_tool_unit_is_kept_whole_when_a_page_holds_it() -> None:
    session = Memory().session("s")
    for i in range(6):
        session.extend(round_of(i, WORDS[i]))
    tools = RecallTools(session, max_tokens=700)
    got = pages(tools, start=1, end=24)
    assert len(got) > 2
    for page in got[:-1]:
        last = page["messages"][-1]
        # A page never ends on a call whose results come on the next page.
        assert last["role"] != "assistant" or not last.get("tool_calls")
    assert [m["seq"] for p in got for m in p["messages"]] == list(range(1, 25))


# -- contextfold_folds --------------------------------------------------------


def test_folds_lists_the_view_folds(memory: Memory) -> None:
    session = build(memory, "t/a")
    tools = RecallTools(session)
    result = call(tools, FOLDS)
    folds = session.view("default").folds()
    listed = result["folds"]
    assert {f["id"] for f in listed} == {f.id for f in folds}
    by_id = {f.id: f for f in folds}
    for item in listed:
        fold = by_id[item["id"]]
        assert (item["start"], item["end"], item["kind"]) == (fold.start, fold.end, fold.kind)
        assert item["tokens"] == fold.tokens_before
        assert item["tokens_folded"] == fold.tokens_after
        assert "\n" not in item["summary"] and len(item["summary"]) <= 160
        if fold.kind == "summary":
            # What was said, past the summary's bracketed headers.
            assert item["summary"].startswith("user: Round"), item["summary"]
    assert result["next_cursor"] is None


def test_folds_page_within_max_tokens() -> None:
    session = Memory().session("s", system="You review modules.")
    for i in range(40):
        session.extend(round_of(i, f"w{i}"))
    session.view("default", pipeline=Pipeline([ObservationMasking(keep_last=0)]))
    session.view("default").compact()
    assert len(session.view("default").folds()) == 40
    tools = RecallTools(session, max_tokens=400)
    got = [call(tools, FOLDS)]
    while got[-1]["next_cursor"] is not None:
        got.append(call(tools, FOLDS, cursor=got[-1]["next_cursor"]))
    assert len(got) > 1
    listed = [f["id"] for p in got for f in p["folds"]]
    assert sorted(listed) == sorted(f.id for f in session.view("default").folds())


# -- mistakes -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "arguments", "field"),
    [
        (SEARCH, "{not json", "arguments"),
        (SEARCH, "[1, 2]", "arguments"),
        (SEARCH, {}, "query"),
        (SEARCH, {"query": ""}, "query"),
        (SEARCH, {"query": "the and of"}, "query"),
        (SEARCH, {"query": "x", "colour": "red"}, "colour"),
        (SEARCH, {"query": "x", "role": "robot"}, "role"),
        (SEARCH, {"query": "x", "after": "yesterday"}, "after"),
        (SEARCH, {"query": "x", "before": True}, "before"),
        (SEARCH, {"query": "x", "after": 20, "before": 10}, "before"),
        (SEARCH, {"query": "x", "limit": 0}, "limit"),
        (SEARCH, {"query": "x", "limit": 51}, "limit"),
        (SEARCH, {"query": "x", "limit": "5"}, "limit"),
        (EXPAND, {}, "start"),
        (EXPAND, {"start": 1}, "end"),
        (EXPAND, {"start": 5, "end": 2}, "end"),
        (EXPAND, {"start": 0, "end": 2}, "start"),
        (EXPAND, {"id": "no-such-fold"}, "id"),
        (EXPAND, {"id": 7}, "id"),
        (EXPAND, {"id": "x", "start": 1, "end": 2}, "id"),
        (EXPAND, {"start": 1, "end": 2, "cursor": "bogus"}, "cursor"),
        (EXPAND, {"start": 1, "end": 2, "cursor": "2:40"}, "cursor"),
        (EXPAND, {"start": 1, "end": 2, "page": 1, "cursor": "2:2"}, "page"),
        (EXPAND, {"start": 1, "end": 2, "page": 9}, "page"),
        (EXPAND, {"start": 500, "end": 600}, "start"),
        (FOLDS, {"cursor": "x"}, "cursor"),
        (FOLDS, {"id": "x"}, "id"),
    ],
)
def test_a_model_mistake_is_an_error_result_naming_the_field(
    name: str, arguments: Any, field: str
) -> None:
    session = Memory().session("s")
    session.extend(round_of(0, "delta"))
    before = session.messages()
    answer = RecallTools(session).answer(name, arguments)
    result = json.loads(answer)
    assert result["field"] == field, result
    assert result["error"]
    assert session.messages() == before


def test_an_unknown_tool_is_the_caller_s_mistake() -> None:
    tools = RecallTools(Memory().session("s"))
    with pytest.raises(InvalidInput) as raised:
        tools.answer("contextfold_delete", "{}")
    assert raised.value.field == "name"


def test_bad_settings_are_refused() -> None:
    session = Memory().session("s")
    with pytest.raises(InvalidInput) as raised:
        RecallTools(session, max_tokens=10)
    assert raised.value.field == "max_tokens"
    with pytest.raises(InvalidInput) as raised:
        RecallTools("s", max_tokens=1000)  # type: ignore[arg-type]
    assert raised.value.field == "session"


def test_arguments_may_be_a_mapping_or_empty_text() -> None:
    session = Memory().session("s")
    session.extend(round_of(0, "delta"))
    tools = RecallTools(session)
    assert json.loads(tools.answer(SEARCH, {"query": "delta"}))["hits"]
    assert json.loads(tools.answer(FOLDS, ""))["folds"] == []


# -- branches and tenants -----------------------------------------------------


def test_another_branch_is_not_shown(memory: Memory) -> None:
    session = memory.session("t/a")
    session.extend(round_of(0, "meadow"))
    fork = session.extend(round_of(1, "meadow"))[-1].seq
    side = session.append(
        {"role": "user", "content": "a regenerated answer about lupine"}, parent=4
    )
    tools = RecallTools(session)
    # The newest message's branch is the side branch: it holds 1-4 and the lupine message.
    assert {h["seq"] for h in call(tools, SEARCH, query="meadow")["hits"]} == {1, 2, 3, 4}
    assert [h["seq"] for h in call(tools, SEARCH, query="lupine")["hits"]] == [side.seq]
    main = tools.on(fork)
    assert call(main, SEARCH, query="lupine")["hits"] == []
    assert len(call(main, SEARCH, query="meadow")["hits"]) == 8
    expanded = call(tools, EXPAND, start=1, end=side.seq)
    assert [m["seq"] for m in expanded["messages"]] == [1, 2, 3, 4, side.seq]


def test_a_fold_of_another_branch_is_not_shown(memory: Memory) -> None:
    session = memory.session("t/a", system="You review modules.")
    for i, word in enumerate(WORDS[:8]):
        session.extend(round_of(i, word))
    fork = session.last_seq()
    view = session.view("default", pipeline=Pipeline([ObservationMasking(keep_last=0)]))
    session.append({"role": "user", "content": "another path"}, parent=1)
    side = session.last_seq()
    view.on(fork).compact()
    folds = view.on(fork).folds()
    assert folds
    on_fork = RecallTools(session).on(fork)
    on_side = RecallTools(session).on(side)
    assert {f["id"] for f in call(on_fork, FOLDS)["folds"]} == {f.id for f in folds}
    assert call(on_side, FOLDS)["folds"] == []
    assert call(on_side, EXPAND, id=folds[0].id)["field"] == "id"
    assert call(on_fork, EXPAND, id=folds[0].id)["messages"]


def test_another_tenant_s_session_is_out_of_reach(memory: Memory) -> None:
    ours = build(memory, "acme/a")
    theirs = build(memory, "evil/b", tag="secret")
    tools = RecallTools(ours)
    attempts = 0
    # Their fold ids name nothing here.
    for fold in theirs.view("default").folds(include_superseded=True):
        result = call(tools, EXPAND, id=fold.id)
        assert result["field"] == "id"
        attempts += 1
    # Their words find nothing here.
    for word in WORDS:
        assert call(tools, SEARCH, query=f"{word}secret")["hits"] == []
        attempts += 1
    # Their seqs name our messages here, never theirs.
    last = theirs.last_seq()
    for start in range(1, last + 1, 7):
        answer = tools.answer(EXPAND, {"start": start, "end": min(start + 6, last)})
        assert "secret" not in answer
        attempts += 1
    assert "secret" not in tools.answer(FOLDS, {})
    # And the other way round: their tools see theirs alone.
    for hit in call(RecallTools(theirs), SEARCH, query="module", limit=50)["hits"]:
        assert "secret" in json.dumps(theirs.messages(after=hit["seq"] - 1, limit=1)[0].message)
    assert attempts > 20


def test_a_recorded_conversation_s_branch_is_the_one_read(memory: Memory) -> None:
    session = memory.session("t/a", system="You review modules.")
    history: list[Message] = [{"role": "system", "content": "You review modules."}]
    history += round_of(0, "harbor")
    first = session.record([*history, {"role": "user", "content": "tell me about the kestrel"}])
    # The client regenerates: the same history, another last question.
    second = session.record([*history, {"role": "user", "content": "tell me about the plover"}])
    assert first.at != second.at
    tools = RecallTools(session)
    on_first, on_second = tools.on(first.at), tools.on(second.at)
    assert [h["seq"] for h in call(on_first, SEARCH, query="kestrel")["hits"]] == [first.at]
    assert call(on_first, SEARCH, query="plover")["hits"] == []
    assert [h["seq"] for h in call(on_second, SEARCH, query="plover")["hits"]] == [second.at]
    assert call(on_second, SEARCH, query="kestrel")["hits"] == []
    shared = {h["seq"] for h in call(on_second, SEARCH, query="harbor")["hits"]}
    assert shared == {h["seq"] for h in call(on_first, SEARCH, query="harbor")["hits"]}
    expanded = call(on_second, EXPAND, start=1, end=second.at)["messages"]
    assert [without_place(m) for m in expanded] == session.history(branch=second.at)
    assert expanded[-1]["seq"] == second.at
