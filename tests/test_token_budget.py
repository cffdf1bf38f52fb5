from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import NATO

from contextfold import Memory, Session, View
from contextfold.core.errors import InvalidInput
from contextfold.core.events import Event
from contextfold.core.folds import Fold
from contextfold.core.messages import Message, text_of
from contextfold.strategies import Always, Pipeline
from contextfold.strategies.checked import PINNED_HEADER
from contextfold.strategies.token_budget import (
    DATA_HEADER,
    SUMMARY_HEADER,
    TokenBudget,
    data_text,
    merge_important_data,
    summary_words,
    token_budget,
    within_tokens,
)
from contextfold.strategies.transcript import HISTORY_CLOSE, HISTORY_OPEN
from contextfold.testing import ScriptedModel

WORDS = NATO[:10]
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def tag(i: int) -> str:
    """A number-free label, so the filler holds no must-keep items."""
    return LETTERS[i // 26 % 26] + LETTERS[i % 26]


def pair(i: int, words: int = 200) -> list[dict[str, Any]]:
    body = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(words))
    return [
        {"role": "user", "content": f"Message {tag(i)}: {body}"},
        {"role": "assistant", "content": f"Response {tag(i)}: {body}"},
    ]


class Responder:
    """Answers each cycle's one prompt with ``data`` and ``summary`` in one JSON object; keeps prompts."""

    def __init__(
        self, data: dict[str, Any] | None = None, summary: str = "They talked at length."
    ) -> None:
        self.data = data if data is not None else {"important_facts": ["the sky is blue"]}
        self.summary = summary
        self.prompts: list[str] = []

    def __call__(self, messages: Sequence[Message]) -> str:
        self.prompts.append(text_of(messages[-1]))
        return json.dumps({**self.data, "conversation_summary": self.summary})


def setup(
    messages: list[dict[str, Any]], responder: Responder | None = None, **options: Any
) -> tuple[Session, View, Responder]:
    responder = responder or Responder()
    session = Memory().session("s", system="You are a helpful assistant.")
    session.extend(messages)
    view = session.view(
        "v",
        pipeline=Pipeline([TokenBudget(**options)]),
        llm=ScriptedModel(default=responder),
    )
    return session, view, responder


def grow_past(view: View, session: Session, start: int, limit: int = 3000) -> int:
    """Append pairs from ``start`` until the view is over ``limit`` tokens; the next index."""
    i = start
    while view.state().tokens <= limit:
        session.extend(pair(i))
        i += 1
    return i


def active(view: View, kind: str) -> Fold:
    (fold,) = [f for f in view.folds() if f.kind == kind]
    return fold


def test_fires_above_the_threshold_and_not_at_or_below_it() -> None:
    session, view, responder = setup([])
    i = 0
    while True:
        state = view.state()
        assert state.tokens == session.counter.messages(session.history())
        nxt = pair(i)
        if state.tokens + sum(session.counter.message(m) for m in nxt) > 3000:
            break
        session.extend(nxt)
        i += 1
    assert view.compact().folds == ()
    assert responder.prompts == []
    session.extend(pair(i))
    assert view.state().tokens > 3000
    kinds = sorted(f.kind for f in view.compact().folds)
    assert kinds == ["important_data", "summary"]
    assert len(responder.prompts) == 1


def test_threshold_and_keep_window_are_options() -> None:
    session, view, _ = setup([m for i in range(4) for m in pair(i, 40)])
    assert view.compact().folds == ()
    small = session.view(
        "small",
        pipeline=token_budget(threshold_tokens=200, keep_tokens=150),
        llm=ScriptedModel(default=Responder()),
    )
    (summary,) = [f for f in small.compact().folds if f.kind == "summary"]
    kept = session.history()[summary.end :]
    assert sum(session.counter.message(m) for m in kept) <= 150


def test_keep_window_holds_the_newest_whole_units_within_keep_tokens() -> None:
    session, view, _ = setup([m for i in range(20) for m in pair(i)], threshold_tokens=6000)
    state = view.state()
    assert state.low_mark(6000) - (state.tokens - sum(e.tokens for e in state.entries)) > 2500
    view.compact()
    summary = active(view, "summary")
    history = session.history()
    kept = history[summary.end :]
    kept_tokens = sum(session.counter.message(m) for m in kept)
    assert kept_tokens <= 2500
    assert kept_tokens + session.counter.message(history[summary.end - 1]) > 2500
    assert summary.start == 2


def test_keep_window_shrinks_to_what_the_low_mark_leaves() -> None:
    session, view, _ = setup([m for i in range(20) for m in pair(i)])
    before = view.state()
    room = before.low_mark(3000) - (before.tokens - sum(e.tokens for e in before.entries))
    assert room < 2500
    view.compact()
    summary = active(view, "summary")
    history = session.history()
    kept_tokens = sum(session.counter.message(m) for m in history[summary.end :])
    assert kept_tokens <= room < kept_tokens + session.counter.message(history[summary.end - 1])
    assert view.state().tokens <= before.low_mark(3000)


def test_keep_window_never_splits_a_tool_unit() -> None:
    call = {
        "id": "call_a",
        "type": "function",
        "function": {"name": "write", "arguments": json.dumps({"text": "lorem " * 600})},
    }
    tail: list[dict[str, Any]] = [
        {"role": "user", "content": "Write the report."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_a", "content": "ipsum " * 2000},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "Thanks."},
        {"role": "assistant", "content": "You are welcome."},
    ]
    session, view, _ = setup([m for i in range(4) for m in pair(i)] + tail, threshold_tokens=4500)
    assert view.state().tokens > 4500
    history = session.history()
    result_and_after = sum(session.counter.message(m) for m in history[-4:])
    assert result_and_after <= 2500 < result_and_after + session.counter.message(history[-5])
    view.compact()
    summary = active(view, "summary")
    kept = session.history()[summary.end :]
    assert kept == tail[-3:]
    rendered = view.render()
    assert not any(m["role"] == "tool" for m in rendered)


def test_keep_window_always_holds_the_latest_user_message() -> None:
    question = {"role": "user", "content": "Please read this: " + "zulu " * 3000}
    answer = {"role": "assistant", "content": "Reading it now."}
    session, view, _ = setup([m for i in range(6) for m in pair(i)] + [question, answer])
    view.compact()
    summary = active(view, "summary")
    assert summary.end == len(session.history()) - 2
    assert view.render()[-2:] == [question, answer]


def test_render_order_is_system_important_data_summary_recent() -> None:
    session, view, _ = setup([m for i in range(20) for m in pair(i)])
    view.compact()
    summary = active(view, "summary")
    rendered = view.render()
    assert rendered[0] == {"role": "system", "content": "You are a helpful assistant."}
    assert rendered[1]["content"].startswith(DATA_HEADER)
    assert "the sky is blue" in rendered[1]["content"]
    label = f"[folded: seq {summary.start}-{summary.end}]"
    assert rendered[2]["content"] == f"{SUMMARY_HEADER}\nThey talked at length.\n{label}"
    assert rendered[3:] == session.history()[summary.end :]


def test_fold_shapes() -> None:
    session, view, _ = setup([m for i in range(20) for m in pair(i)])
    view.compact()
    summary, data = active(view, "summary"), active(view, "important_data")
    assert (summary.placement, data.placement) == ("in_place", "facts")
    assert summary.strategy == data.strategy == "token-budget"
    assert (data.start, data.end) == (summary.start, summary.end)
    assert data.data["important_data"] == {"important_facts": ["the sky is blue"]}
    assert data.tokens_before == 0
    assert data.tokens_after == session.counter.message(data.messages[0])
    assert data.data["items_dropped"] == 0
    assert summary.tokens_before == sum(
        session.counter.message(m) for m in session.history()[summary.start - 1 : summary.end]
    )
    assert summary.tokens_after == session.counter.message(summary.messages[0])
    assert summary.usage is not None and summary.usage["model"] == "scripted"
    assert summary.usage["calls"] == 1
    assert data.usage is None


@pytest.mark.parametrize(
    ("version", "words"),
    [(1, (100, 150)), (2, (200, 250)), (3, (300, 350)), (4, (400, 450)), (5, (500, 750))],
)
def test_summary_words_grow_with_the_version(version: int, words: tuple[int, int]) -> None:
    assert summary_words(version) == words


def test_summary_words_are_capped_and_start_at_one() -> None:
    assert summary_words(12) == (500, 750)
    with pytest.raises(InvalidInput):
        summary_words(0)


def test_each_cycle_asks_for_its_version_word_target() -> None:
    session, view, responder = setup([])
    i = 0
    for cycle in range(1, 7):
        i = grow_past(view, session, i)
        view.compact()
        low, high = summary_words(cycle)
        assert f"Word count target: {low}-{high} words." in responder.prompts[-1]
        summary = active(view, "summary")
        assert summary.data["summary_version"] == cycle
        assert summary.data["target_words"] == [low, high]
    assert "Word count target: 500-750 words." in responder.prompts[-2]
    assert len(responder.prompts) == 6


def test_merge_joins_objects_and_keeps_both_sides() -> None:
    previous = {"user_preferences": {"theme": "dark"}, "source_urls": ["url1"]}
    new = {"user_preferences": {"font": "arial"}, "source_urls": ["url2"]}
    assert merge_important_data(previous, new) == {
        "user_preferences": {"theme": "dark", "font": "arial"},
        "source_urls": ["url1", "url2"],
    }


def test_merge_deduplicates_lists_in_first_seen_order() -> None:
    merged = merge_important_data(
        {"entities": ["Ada", "Bram", "Ada"]}, {"entities": ["Cleo", "Bram", "Ada", "Dov"]}
    )
    assert merged == {"entities": ["Ada", "Bram", "Cleo", "Dov"]}
    objects = merge_important_data(
        {"key_decisions": [{"what": "x", "why": "y"}]},
        {"key_decisions": [{"why": "y", "what": "x"}, {"what": "z"}]},
    )
    assert objects == {"key_decisions": [{"what": "x", "why": "y"}, {"what": "z"}]}


def test_merge_recurses_into_objects_and_newer_scalars_win() -> None:
    previous = {
        "user_preferences": {"theme": "dark", "tone": "formal"},
        "document_structure": {"sections": ["Intro", "Methods"], "title": "Draft"},
        "important_facts": ["X causes Y"],
    }
    new = {
        "user_preferences": {"theme": "light"},
        "document_structure": {"sections": ["Methods", "Results"], "title": None},
        "custom_fields": {"deadline": "Friday"},
    }
    before = json.dumps(previous, sort_keys=True)
    assert merge_important_data(previous, new) == {
        "user_preferences": {"theme": "light", "tone": "formal"},
        "document_structure": {"sections": ["Intro", "Methods", "Results"], "title": "Draft"},
        "important_facts": ["X causes Y"],
        "custom_fields": {"deadline": "Friday"},
    }
    assert json.dumps(previous, sort_keys=True) == before


def test_second_cycle_merges_important_data_and_supersedes_both_folds() -> None:
    responder = Responder(data={"user_preferences": {"theme": "dark"}, "source_urls": ["url1"]})
    session, view, _ = setup([m for i in range(20) for m in pair(i)], responder)
    view.compact()
    first_data, first_summary = active(view, "important_data"), active(view, "summary")
    responder.data = {"user_preferences": {"font": "arial"}, "source_urls": ["url2", "url1"]}
    grow_past(view, session, 20)
    view.compact()
    data = active(view, "important_data")
    assert data.data["important_data"] == {
        "user_preferences": {"theme": "dark", "font": "arial"},
        "source_urls": ["url1", "url2"],
    }
    assert data.tokens_before == first_data.tokens_after
    assert active(view, "summary").covers(first_summary)
    old = {f.id: f for f in view.folds(include_superseded=True)}
    assert old[first_data.id].superseded_by is not None
    assert old[first_summary.id].superseded_by is not None


def test_cycle_record_is_kept_in_both_folds() -> None:
    session, view, _ = setup([m for i in range(20) for m in pair(i)])
    began = datetime.now(UTC)
    view.compact()
    summary, data = active(view, "summary"), active(view, "important_data")
    first_count = summary.end - summary.start + 1
    for fold in (summary, data):
        assert fold.data["summary_version"] == 1
        assert fold.data["messages_summarized_count"] == first_count
        assert fold.data["last_keep_window_index"] == summary.end + 1
        stamp = datetime.fromisoformat(fold.data["last_summarized_at"])
        assert began - timedelta(seconds=1) <= stamp <= datetime.now(UTC)
    grow_past(view, session, 20)
    view.compact()
    second = active(view, "summary")
    assert second.data["summary_version"] == 2
    assert second.data["messages_summarized_count"] == second.end - 1
    assert second.data["messages_summarized_count"] > first_count
    assert second.data["last_keep_window_index"] == second.end + 1
    assert active(view, "important_data").data["summary_version"] == 2


def test_second_cycle_sends_the_previous_summary_and_only_the_new_messages() -> None:
    responder = Responder(summary="First summary: they compared the alpha and bravo plans.")
    session, view, _ = setup([m for i in range(20) for m in pair(i)], responder)
    view.compact()
    first = active(view, "summary")
    responder.summary = "Second summary."
    grow_past(view, session, 20)
    view.compact()
    second = active(view, "summary")
    history = session.history()
    new = history[first.end : second.end]
    old = history[first.start - 1 : first.end]
    prompt = responder.prompts[-1]
    previous_block = f"{HISTORY_OPEN}\nFirst summary: they compared the alpha and bravo plans.\n"
    assert f"Previous summary (if exists): {previous_block}{HISTORY_CLOSE}" in prompt
    assert prompt.count("First summary") == 1
    assert all(m["content"] in prompt for m in new)
    assert not any(m["content"] in prompt for m in old)
    assert "this is the first summary" in responder.prompts[0]


def test_rejected_answers_drop_the_job_and_commit_nothing() -> None:
    session = Memory().session("s", system="You are a helpful assistant.")
    session.extend([m for i in range(20) for m in pair(i)])
    events: list[Event] = []
    bad = ScriptedModel(default='{"key_decisions": ["none"]}')
    view = session.view("v", pipeline=token_budget(), llm=bad)
    view.on_event.append(events.append)
    report = view.compact()
    assert report.folds == () and report.failed == ("token-budget",)
    assert view.folds(include_superseded=True) == []
    assert [e.kind for e in events].count("failed") == 1
    assert len(bad.calls) == 3


def test_an_answer_without_a_summary_loses_its_data_too_and_keeps_earlier_folds() -> None:
    responder = Responder()
    session, view, _ = setup([m for i in range(20) for m in pair(i)], responder)
    view.compact()
    before = view.folds()
    grow_past(view, session, 20)
    model = ScriptedModel(
        [{"entities": ["Zed"]}, {"entities": ["Zed"], "conversation_summary": ""}, ""]
    )
    session.view(view.name, llm=model)
    report = view.compact()
    assert report.failed == ("token-budget",)
    assert len(model.calls) == 3
    assert view.folds() == before


def test_an_extraction_of_the_wrong_shape_is_asked_again() -> None:
    model = ScriptedModel(
        [
            {"key_decisions": "use Postgres", "conversation_summary": "They chose a database."},
            {"key_decisions": ["use Postgres"], "conversation_summary": "They chose a database."},
        ]
    )
    session = Memory().session("s")
    session.extend([m for i in range(20) for m in pair(i)])
    view = session.view("v", pipeline=token_budget(), llm=model)
    view.compact()
    data = active(view, "important_data")
    assert data.data["important_data"] == {"key_decisions": ["use Postgres"]}
    summary = active(view, "summary")
    assert summary.usage is not None and summary.usage["calls"] == 2
    assert summary.data["conversation_summary"] == "They chose a database."
    assert len(model.calls) == 2
    assert model.calls[0].schema is not None
    assert set(model.calls[0].schema["properties"]) == {
        "user_preferences",
        "key_decisions",
        "important_facts",
        "source_urls",
        "document_structure",
        "entities",
        "custom_fields",
        "conversation_summary",
    }


def test_unknown_keys_go_to_custom_fields_and_empty_data_makes_no_facts_fold() -> None:
    responder = Responder(data={"budget": "ten thousand", "entities": []})
    _, view, _ = setup([m for i in range(20) for m in pair(i)], responder)
    view.compact()
    assert active(view, "important_data").data["important_data"] == {
        "entities": [],
        "custom_fields": {"budget": "ten thousand"},
    }
    assert '"entities"' not in active(view, "important_data").text
    responder_empty = Responder(data={"entities": [], "user_preferences": {}})
    _, empty, _ = setup([m for i in range(20) for m in pair(i)], responder_empty)
    empty.compact()
    assert [f.kind for f in empty.folds()] == ["summary"]
    assert empty.render()[1]["content"].startswith(SUMMARY_HEADER)


def test_missing_must_keep_items_are_pinned_unless_the_important_data_has_them() -> None:
    messages = [m for i in range(20) for m in pair(i)]
    messages[2] = {"role": "user", "content": "The config lives in src/app/settings.py for now."}
    messages[5] = {"role": "assistant", "content": "See https://docs.example.com/setup for it."}
    responder = Responder(data={"source_urls": ["https://docs.example.com/setup"]})
    _, view, _ = setup(messages, responder)
    view.compact()
    summary = active(view, "summary")
    assert summary.data["pinned"] == ["src/app/settings.py"]
    assert summary.text.endswith(f"{PINNED_HEADER}\n- src/app/settings.py")
    assert summary.data["conversation_summary"] == summary.text.removeprefix(SUMMARY_HEADER + "\n")


def test_prompt_overrides_are_used() -> None:
    responder = Responder()
    session, _, _ = setup([m for i in range(20) for m in pair(i)])
    view = session.view(
        "custom",
        pipeline=token_budget(
            prompt="Say it in {target_words} words.\n{previous_summary}\n{new_messages}"
        ),
        llm=ScriptedModel(default=responder),
    )
    view.compact()
    (prompt,) = responder.prompts
    assert prompt.startswith(
        f"Say it in 100-150 words.\nnone (this is the first summary)\n{HISTORY_OPEN}\n"
    )


def test_runs_with_the_offline_stand_in_when_there_is_no_model() -> None:
    session = Memory().session("s", system="Be brief.")
    session.extend([m for i in range(20) for m in pair(i)])
    session.extend(
        [{"role": "user", "content": "Keep src/app/settings.py in mind."}, *pair(30)[1:]]
    )
    view = session.view("v", pipeline=token_budget())
    report = view.compact()
    assert sorted(f.kind for f in report.folds) == ["important_data", "summary"]
    summary = active(view, "summary")
    assert summary.usage is not None and summary.usage["model"] == "offline"
    rendered = view.render()
    assert rendered[1]["content"].startswith(DATA_HEADER)
    assert rendered[2]["content"].startswith(SUMMARY_HEADER)
    assert view.state().tokens < report.tokens_before


def test_factory_passes_options() -> None:
    pipeline = token_budget(threshold_tokens=5000, keep_tokens=1000, name="tb")
    (strategy,) = pipeline.strategies
    assert isinstance(strategy, TokenBudget)
    assert (strategy.threshold_tokens, strategy.keep_tokens, strategy.name) == (5000, 1000, "tb")
    assert pipeline.name == "token-budget"


def test_converges_when_the_trigger_still_fires_after_folding() -> None:
    responder = Responder()
    _, view, _ = setup([m for i in range(20) for m in pair(i)], responder, trigger=Always())
    assert len(view.compact().folds) == 2
    assert view.compact().folds == ()
    assert len(responder.prompts) == 1


def test_committed_event_counts_the_one_call_once() -> None:
    from contextfold import Memory
    from contextfold.llm.offline import OfflineModel
    from contextfold.strategies import Pipeline
    from contextfold.strategies.token_budget import TokenBudget

    session = Memory().session("s", system="You help plan trips.")
    for i in range(40):
        session.append({"role": "user", "content": f"Day {i}: we visit museum {i} in Lisbon. " * 8})
        session.append({"role": "assistant", "content": f"Noted day {i}, museum {i}. " * 8})
    view = session.view("v", pipeline=Pipeline([TokenBudget()]), llm=OfflineModel())
    events: list[Any] = []
    view.on_event.append(events.append)
    view.compact()
    committed = [e for e in events if e.kind == "committed"]
    assert committed
    folds = view.folds()
    assert committed[-1].usage["calls"] == sum(f.usage["calls"] for f in folds if f.usage)
    assert [e.usage["calls"] for e in committed] == [1] * len(committed)


def test_after_a_cycle_the_next_waits_for_ten_tau_bench_sized_messages() -> None:
    session, view, responder = setup([])
    i = grow_past(view, session, 0)
    view.compact()
    state = view.state()
    assert state.tokens <= state.low_mark(3000)
    added = 0
    while len(responder.prompts) == 1:
        message = pair(i, 64)[i % 2]
        assert session.counter.message(message) <= 100
        session.append(message)
        added += 1
        i += 1
        view.compact()
    assert added >= 10
    assert view.state().tokens <= state.low_mark(3000)


def test_with_a_budget_it_fires_at_its_high_water_and_folds_to_its_low_water() -> None:
    session = Memory().session("s", system="You are a helpful assistant.")
    responder = Responder()
    view = session.view(
        "v", pipeline=token_budget(), budget=8000, llm=ScriptedModel(default=responder)
    )
    high = view.state().high_mark(8000)
    step = max(sum(session.counter.message(m) for m in pair(k)) for k in range(40))
    i = grow_past(view, session, 0, limit=3000)
    view.compact()
    assert responder.prompts == []
    i = grow_past(view, session, i, limit=high - 2 * step)  # stops short of the high mark
    view.compact()
    assert responder.prompts == []
    grow_past(view, session, i, limit=high)
    view.compact()
    assert len(responder.prompts) == 1
    assert view.state().tokens <= view.state().low_mark(8000)


def test_an_explicit_threshold_wins_over_the_budget() -> None:
    strategy = TokenBudget(threshold_tokens=3000)
    _, view, _ = setup([m for i in range(20) for m in pair(i)])
    state = view.state(budget=8000)
    assert strategy.levels(state) == (3000, state.low_mark(3000))
    assert TokenBudget().levels(state) == (state.high_mark(8000), state.low_mark(8000))
    assert TokenBudget().levels(view.state()) == (3000, state.low_mark(3000))


def test_merged_data_keeps_within_its_tokens_dropping_the_oldest_items_first() -> None:
    counter = Memory().session("s").counter
    data = {
        "user_preferences": {"theme": "dark"},
        "entities": [f"entity {tag(i)}" for i in range(60)],
        "source_urls": ["https://a.example", "https://b.example"],
    }
    kept, dropped = within_tokens(data, 120, counter)
    assert counter.text(data_text(kept)) <= 120
    assert kept["user_preferences"] == {"theme": "dark"}
    assert kept["source_urls"] == data["source_urls"]
    assert kept["entities"] == data["entities"][dropped:]
    assert dropped > 0
    assert within_tokens(data, 10_000, counter) == (data, 0)


def test_the_facts_fold_stays_within_data_tokens_over_cycles() -> None:
    responder = Responder()
    session, view, _ = setup([], responder, data_tokens=150)
    i = 0
    for cycle in range(6):
        responder.data = {"entities": [f"person {tag(cycle * 10 + k)}" for k in range(10)]}
        i = grow_past(view, session, i)
        view.compact()
    data = active(view, "important_data")
    assert session.counter.text(data.text) <= 150
    assert data.data["items_dropped"] > 0
    assert data.data["important_data"]["entities"][-1] == f"person {tag(59)}"


def test_the_previous_summary_is_read_without_its_pins_which_carry_over() -> None:
    messages = [m for i in range(20) for m in pair(i)]
    messages[2] = {"role": "user", "content": "The config lives in src/app/settings.py for now."}
    responder = Responder(data={})
    session, view, _ = setup(messages, responder)
    view.compact()
    assert active(view, "summary").data["pinned"] == ["src/app/settings.py"]
    grow_past(view, session, 20)
    view.compact()
    assert "src/app/settings.py" not in responder.prompts[-1]
    summary = active(view, "summary")
    assert summary.data["pinned"] == ["src/app/settings.py"]
    assert summary.text.endswith(f"{PINNED_HEADER}\n- src/app/settings.py")


def test_pins_share_the_summary_token_cap() -> None:
    messages = [m for i in range(20) for m in pair(i)]
    for k in range(0, 40, 2):
        messages[k] = {"role": "user", "content": f"Keep /srv/data/archive/{tag(k)}/file_{k}.csv"}
    responder = Responder(data={}, summary=" ".join(f"Listed {NATO[n % 26]}." for n in range(60)))
    session, view, _ = setup(messages, responder)
    view.compact()
    summary = active(view, "summary")
    body = summary.data["conversation_summary"].split(PINNED_HEADER)[0]
    pins = summary.text.split(PINNED_HEADER)[1]
    assert session.counter.text(body) + session.counter.text(pins) <= 2 * 150 + 10
    folded = [
        text_of(m).removeprefix("Keep ")
        for m in session.history()[summary.start - 1 : summary.end]
        if text_of(m).startswith("Keep ")
    ]
    pinned = summary.data["pinned"]
    assert 0 < len(pinned) < len(folded)
    assert pinned == folded[-len(pinned) :]
