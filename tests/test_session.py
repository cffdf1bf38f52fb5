"""Sessions and views: the append-only log, idempotency, atomic batches, isolation."""

from __future__ import annotations

import contextlib
import copy
import json
from typing import Any

import pytest
from conftest import load_rows
from test_render import SYSTEM, agent_run, chat, markers, session_of

from contextfold import BudgetError, InvalidInput, Memory
from contextfold.core.messages import Message
from contextfold.core.units import tool_unit_faults, whole_units
from contextfold.strategies import DEFAULT_PRESET, Pipeline
from contextfold.strategies.keep_recent import KeepRecent
from contextfold.strategies.triggers import Always


def call(call_id: str, name: str = "search", args: str = "{}") -> Message:
    fn = {"name": name, "arguments": args}
    tool_call = {"id": call_id, "type": "function", "function": fn}
    return {"role": "assistant", "content": None, "tool_calls": [tool_call]}


def result(call_id: str, content: str = "ok") -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def test_append_and_extend_number_the_log_and_history_returns_it() -> None:
    session = Memory().session("s", system="Be brief.")
    first = session.append({"role": "user", "content": "hi"})
    rest = session.extend(
        [{"role": "assistant", "content": "hello"}, {"role": "user", "content": "?"}]
    )
    assert (first.seq, [m.seq for m in rest]) == (2, [3, 4])
    assert first.tokens == session.counter.message({"role": "user", "content": "hi"})
    assert session.history() == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "?"},
    ]


def test_reopening_a_session_does_not_append_the_system_prompt_again() -> None:
    memory = Memory()
    memory.session("s", system="Be brief.").append({"role": "user", "content": "hi"})
    again = memory.session("s", system="Be brief.")
    assert [m["role"] for m in again.history()] == ["system", "user"]


def test_idempotency_keys_make_retried_appends_no_ops() -> None:
    session = Memory().session("s")
    a = session.append({"role": "user", "content": "hi"}, key="k1")
    b = session.append({"role": "user", "content": "hi"}, key="k1")
    assert a.seq == b.seq == 1
    batch = [{"role": "assistant", "content": "hello"}, {"role": "user", "content": "more"}]
    first = session.extend(batch, keys=["k2", "k3"])
    retried = session.extend(batch, keys=["k2", "k3"])
    assert [m.seq for m in first] == [m.seq for m in retried] == [2, 3]
    assert len(session.history()) == 3
    with pytest.raises(InvalidInput) as info:
        session.extend(batch, keys=["only-one"])
    assert info.value.field == "keys"


def test_tool_result_may_answer_a_call_appended_in_an_earlier_extend() -> None:
    session = Memory().session("s")
    session.extend([{"role": "user", "content": "find it"}, call("c1")])
    session.extend([result("c1", "found")])
    with pytest.raises(InvalidInput) as info:  # answered already: a result answers its call once
        session.append(result("c1", "found again"))
    assert (info.value.index, info.value.field) == (3, "tool_call_id")
    assert [m["role"] for m in session.history()] == ["user", "assistant", "tool"]


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (result("nobody-called-this"), "tool_call_id"),
        ({"role": "robot", "content": "beep"}, "role"),
        ({"role": "user"}, "content"),
        ({"role": "user", "content": "hi", "colour": "red"}, "colour"),
        ({"role": "user", "content": 42}, "content"),
    ],
)
def test_a_bad_batch_stores_nothing_and_names_index_and_field(bad: Message, field: str) -> None:
    session = Memory().session("s", system="sys")
    session.extend([{"role": "user", "content": "hi"}, call("c1"), result("c1")])
    before = copy.deepcopy(session.history())
    batch = [{"role": "assistant", "content": "fine"}, call("c2"), result("c2"), bad]
    with pytest.raises(InvalidInput) as info:
        session.extend(batch)
    assert (info.value.index, info.value.field) == (7, field)
    assert "message 7" in str(info.value)
    assert session.history() == before
    assert session.store.last_seq(session.id) == 4
    session.append({"role": "user", "content": "still works"})
    assert session.store.last_seq(session.id) == 5


def test_views_are_isolated() -> None:
    session = session_of(chat(30))
    trimmed = session.view("trimmed", pipeline=Pipeline([KeepRecent()]))
    other = session.view("other")
    budget = trimmed.render_report().tokens // 3
    report = trimmed.compact(budget)
    assert report.folds
    assert other.folds() == []
    texts = {f.text for f in trimmed.folds()}
    assert not texts & {m["content"] for m in other.render()}
    shown = {f"{f.text}\n[folded: seq {f.start}-{f.end}]" for f in trimmed.folds()}
    assert any(m["content"] in shown for m in trimmed.render())
    assert other.render() == session.history()


@pytest.mark.parametrize("preset", ["offline", "keep-recent", "disabled"])
def test_compaction_never_changes_the_log(preset: str) -> None:
    for row in load_rows("taubench_airline_dev", limit=15) + load_rows("openhands_example"):
        session = session_of(row["messages"])
        before = copy.deepcopy(session.history())
        view = session.view("v", preset=preset)
        full = view.state().tokens
        for fraction in (0.8, 0.5, 0.3):
            # Below system prompt + latest user message it is refused, and nothing is folded.
            with contextlib.suppress(BudgetError):
                view.compact(int(full * fraction))
        assert session.history() == before
        assert json.dumps(session.history()) == json.dumps(before)


def test_keep_recent_trims_old_rounds_behind_one_marker_within_budget() -> None:
    messages = chat(40)
    session = session_of(messages)
    view = session.view("v", preset="keep-recent")
    budget = session.counter.messages(messages) // 4
    report = view.compact(budget)
    assert report.tokens_after <= budget < report.tokens_before
    (fold,) = view.folds()
    assert fold.kind == "trimmed" and fold.start == 2
    assert fold.text == f"[{fold.end - fold.start + 1} earlier messages left out]"
    prompt = view.render(budget)
    label = f"[folded: seq {fold.start}-{fold.end}]"
    assert prompt[:2] == [SYSTEM, {"role": "system", "content": f"{fold.text}\n{label}"}]
    assert prompt[2:] == messages[fold.end :]
    assert messages[-2] in prompt
    assert markers(prompt) == []


def test_keep_recent_again_at_a_smaller_budget_supersedes_its_marker() -> None:
    messages = chat(40)
    session = session_of(messages)
    view = session.view("v", preset="keep-recent")
    full = session.counter.messages(messages)
    view.compact(full // 2)
    (first,) = view.folds()
    view.compact(full // 5)
    (second,) = view.folds()
    assert second.start == first.start and second.end > first.end
    assert [f.superseded_by for f in view.folds(include_superseded=True)] == [second.id, None]
    assert sum(1 for m in view.render() if "earlier messages left out" in m["content"]) == 1
    assert view.render_report().tokens <= full // 5


def test_keep_recent_never_folds_the_latest_user_message() -> None:
    messages = agent_run(20, history=3)
    session = session_of(messages)
    view = session.view("v", preset="keep-recent")
    view.compact(session.counter.messages(messages) // 10)
    latest_user = max(i for i, m in enumerate(messages) if m["role"] == "user") + 1
    assert all(not f.start <= latest_user <= f.end for f in view.folds())
    assert messages[latest_user - 1] in view.render(session.counter.messages(messages) // 10)


def test_view_state_counts_leading_folds_like_render_does() -> None:
    messages = chat(30)
    session = session_of(messages)
    view = session.view("v", pipeline=Pipeline([KeepRecent(trigger=Always())]))
    view.compact(session.counter.messages(messages) // 2)
    state = view.state()
    assert state.entries[0].fold is not None
    assert state.tokens == view.render_report().tokens


def test_filtered_state_and_render_see_the_same_whole_units() -> None:
    messages: list[Message] = [SYSTEM, {"role": "user", "content": "go"}]
    messages += [call("a", "secret"), result("a", "classified"), call("b"), result("b")]
    messages += [{"role": "assistant", "content": "done"}]
    session = session_of(messages)

    def hide_secret_output(m: Message) -> bool:
        return m.get("content") != "classified"

    view = session.view("v", filter=hide_secret_output)
    expected = [SYSTEM, messages[1], *messages[4:]]
    assert view.render() == expected
    assert [m for e in view.state().entries for m in e.messages] == expected[1:]


def test_whole_units_resolves_reused_ids_to_the_nearest_call() -> None:
    items = [call("x"), result("x", "one"), {"role": "user", "content": "again"}]
    items += [call("x"), result("x", "two")]

    def keep(m: Message) -> bool:
        return m.get("content") != "two"

    kept = list(whole_units(reversed(items), lambda m: m, keep))[::-1]
    assert kept == items[:3]
    assert tool_unit_faults(kept) == []


def test_a_view_opened_without_a_preset_folds_with_the_default() -> None:
    session = session_of(chat(40))
    budget = session.view("plain").render_report().tokens // 3
    view = session.view("plain", budget=budget)
    assert view.config.preset == DEFAULT_PRESET == "offline"
    assert session.store.get_view(session.id, "plain").config["preset"] == "offline"
    assert view.compact().folds
    assert view.render_report().tokens <= budget and view.render_report().omitted == 0
    unstored = session.view("never-stored")
    assert (unstored.version, unstored.config.preset) == (0, DEFAULT_PRESET)
    assert unstored.compact(budget).folds


def test_a_view_that_must_only_render_says_so_with_the_disabled_preset() -> None:
    session = session_of(chat(40))
    budget = session.view("plain").render_report().tokens // 3
    view = session.view("plain", preset="disabled", budget=budget)
    assert view.compact().folds == () and view.folds() == []
    report = view.render_report()
    assert report.tokens <= budget and report.omitted > 0  # the last-resort cut


def test_unknown_preset_is_invalid_input() -> None:
    session = session_of(chat(2))
    with pytest.raises(InvalidInput) as info:
        session.view("v", preset="no-such-preset")
    assert info.value.field == "preset"


def _roles(prompt: list[dict[str, Any]]) -> list[str]:
    return [m["role"] for m in prompt]


def test_view_configuration_is_kept_until_changed() -> None:
    session = session_of(chat(10))
    configured = session.view("v", preset="keep-recent", budget=300)
    assert session.view("v").config == configured.config
    assert configured.budget == 300
    assert _roles(configured.render())[0] == "system"


def test_reconfiguring_a_view_changes_only_what_is_given() -> None:
    session = session_of(chat(10))
    only_me = lambda m: m["role"] != "assistant"  # noqa: E731
    configured = session.view("v", preset="keep-recent", budget=300, filter=only_me)
    pipeline = configured.pipeline
    again = session.view("v", budget=500)
    assert again.budget == configured.budget == 500
    assert repr(again.pipeline) == repr(pipeline)
    assert again.filter is only_me


def test_every_leading_system_message_is_the_system_prompt() -> None:
    memory = Memory()
    session = memory.session("s")
    preamble = [{"role": "system", "content": f"rule {i}"} for i in range(20)]
    session.extend([*preamble, *chat(6)[1:]])
    view = session.view("v", preset="keep-recent")
    rendered = view.render(budget=view.render_report().tokens // 2)
    assert rendered[:20] == preamble
    assert rendered[20]["role"] != "system" or "left out" in rendered[20]["content"]
    assert len(view.state().system) == 20


def test_latest_user_message_is_tracked_as_messages_arrive() -> None:
    session = Memory().session("s")
    assert session.store.last_of_role(session.id, "user") is None
    session.extend(chat(4))
    latest = session.store.last_of_role(session.id, "user")
    assert latest is not None
    assert latest.message == [m for m in session.history() if m["role"] == "user"][-1]


def test_deleted_session_is_gone_and_its_views_start_clean_when_recreated(tmp_path: Any) -> None:
    memory = Memory(str(tmp_path / "chat.db"))
    session = memory.session("s", system="old system")
    session.extend({"role": "user", "content": f"old message {i} " * 20} for i in range(30))
    view = session.view("default", preset="keep-recent", budget=200)
    before = view.render()
    assert memory.delete_session("s") is True
    assert memory.delete_session("s") is False
    assert "s" not in memory.store.list_sessions()
    again = memory.session("s", system="new system")
    again.append({"role": "user", "content": "new"})
    after = again.view("default", preset="keep-recent", budget=200).render()
    assert after != before
    assert [m["content"] for m in after] == ["new system", "new"]
    with pytest.raises(InvalidInput):
        memory.delete_session("")


def test_a_rendered_prompt_says_the_budget_it_was_fit_to_fresh_and_from_the_cache() -> None:
    session = Memory().session("s", system="sys")
    session.extend({"role": "user", "content": f"turn {i} " + "words " * 20} for i in range(10))
    view = session.view("default", preset="keep-recent", budget=300)
    assert view.render_report().budget == 300
    assert view.render_report(120).budget == 120
    session.append({"role": "assistant", "content": "short"})
    grown = view.render_report()  # extended from the cached prompt
    assert grown.budget == 300 and grown.tokens <= 300
    assert Memory().session("n").view("v").render_report().budget is None
