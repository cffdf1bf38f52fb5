"""Render: order, budget, whole tool units, markers, clipping and read cost."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from conftest import load_rows

from contextfold import BudgetError, Fold, Memory, Session
from contextfold.core.log import LoggedMessage
from contextfold.core.messages import Message
from contextfold.core.tokens import REPLY_PRIMING
from contextfold.core.units import tool_unit_faults
from contextfold.memory.reading import PAGE
from contextfold.store import RAMStore

SYSTEM = {"role": "system", "content": "You are a careful assistant."}
MARKER = re.compile(r"^\[contextfold: (\d+) earlier messages? left out to fit the token budget\]$")


def session_of(messages: list[Message], store: Any = None, encoding: str = "o200k_base") -> Session:
    memory = Memory(store if store is not None else RAMStore(), encoding=encoding)
    session = memory.session("s")
    session.extend(messages)
    return session


def chat(rounds: int, words: int = 40) -> list[Message]:
    """A system prompt and ``rounds`` user/assistant pairs with distinct texts."""
    out: list[Message] = [SYSTEM]
    for r in range(rounds):
        out.append({"role": "user", "content": f"question {r}: " + " ".join(["why"] * words)})
        out.append(
            {"role": "assistant", "content": f"answer {r}: " + " ".join(["because"] * words)}
        )
    return out


def agent_run(units: int, output_words: int = 200, *, history: int = 0) -> list[Message]:
    """``history`` chat rounds, then one user request and ``units`` tool calls with results."""
    out = chat(history)
    out.append({"role": "user", "content": "fix the failing test in tests/test_io.py"})
    for u in range(units):
        call = {
            "id": f"call_{u}",
            "type": "function",
            "function": {"name": "read_file", "arguments": f'{{"path": "src/mod_{u}.py"}}'},
        }
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        out.append(
            {"role": "tool", "tool_call_id": f"call_{u}", "content": f"line {u} " * output_words}
        )
    return out


def markers(prompt: list[Message]) -> list[tuple[int, int]]:
    """(index, count) of every render marker in ``prompt``."""
    found = []
    for i, m in enumerate(prompt):
        match = MARKER.match(m["content"]) if isinstance(m.get("content"), str) else None
        if m["role"] == "system" and match:
            found.append((i, int(match.group(1))))
    return found


def required_tokens(session: Session) -> int:
    """System prompt + latest user message, counted independently of render."""
    history = session.history()
    counter = session.counter
    users = [m for m in history if m["role"] == "user"]
    system = [m for m in history[:1] if m["role"] == "system"]
    latest = counter.message(users[-1]) if users else 0
    return REPLY_PRIMING + sum(counter.message(m) for m in system) + latest


def test_tool_unit_faults_finds_every_kind_of_split() -> None:
    call = {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    calls = {"role": "assistant", "content": None, "tool_calls": [call]}
    result = {"role": "tool", "tool_call_id": "a", "content": "ok"}
    user = {"role": "user", "content": "hi"}
    assert tool_unit_faults([SYSTEM, user, calls, result, user]) == []
    assert tool_unit_faults([SYSTEM, result, user]) == [1]
    assert tool_unit_faults([SYSTEM, calls, user, result]) == [1, 3]
    assert tool_unit_faults([SYSTEM, user, calls]) == [2]
    assert tool_unit_faults([SYSTEM, user, calls], answered=[]) == []


def test_system_prompt_comes_first_at_every_budget() -> None:
    session = session_of(chat(30))
    view = session.view("default")
    full = view.render_report().tokens
    for budget in (required_tokens(session), full // 3, full // 2, full, None):
        prompt = view.render(budget)
        assert prompt[0] == SYSTEM
        assert sum(1 for m in prompt if m == SYSTEM) == 1


def test_folds_and_raw_messages_render_in_log_order() -> None:
    messages = chat(5)
    session = session_of(messages)
    view = session.view("default", preset="disabled")  # hand-made folds, no recall on top
    summary = {"role": "user", "content": "[summary of rounds 1-2]"}
    cost = session.counter.message(summary)
    fold = Fold("default", 2, 5, "summary", summary["content"], (summary,), "test", 100, cost)
    session.store.commit_folds(session.id, "default", [fold], 0)
    assert view.render() == [SYSTEM, summary, *messages[5:]]


def test_facts_fold_renders_once_right_after_the_system_prompt() -> None:
    messages = chat(5)
    session = session_of(messages)
    facts_msg = {"role": "system", "content": "Facts: the user's name is Ada."}
    facts = Fold(
        "default",
        2,
        7,
        "facts",
        facts_msg["content"],
        (facts_msg,),
        "test",
        50,
        session.counter.message(facts_msg),
        "facts",
    )
    summary = {"role": "user", "content": "[summary of round 1]"}
    cost = session.counter.message(summary)
    fold = Fold("default", 2, 3, "summary", summary["content"], (summary,), "test", 60, cost)
    session.store.commit_folds(session.id, "default", [facts, fold], 0)
    report = session.view("default", preset="disabled").render_report()
    assert report.messages == [SYSTEM, facts_msg, summary, *messages[3:]]
    assert set(report.folds) == {facts.id, fold.id}


# The rows in four shares, one test each, so that the workers share the slowest test's rows.
SHARES = 4


@pytest.mark.parametrize("share", range(SHARES))
@pytest.mark.parametrize("preset", ["disabled", "offline", "keep-recent"])
def test_render_keeps_every_invariant_on_real_data(preset: str, share: int) -> None:
    rows = load_rows("taubench_airline_dev", limit=40) + load_rows("openhands_example")
    checked = 0
    for row in rows[share::SHARES]:
        session = session_of(row["messages"])
        history = copy.deepcopy(session.history())
        answered = {m["tool_call_id"] for m in history if m["role"] == "tool"}
        latest_user = [m for m in history if m["role"] == "user"][-1]
        required = required_tokens(session)
        full = session.view("probe").render_report().tokens
        budgets = {required, required + 1, required + 40, full, full - 1}
        budgets |= {int(full * f) for f in (0.2, 0.35, 0.5, 0.75, 0.9)}
        for budget in sorted(budgets):
            view = session.view(f"{preset}-{budget}", preset=preset)
            if budget < required:
                with pytest.raises(BudgetError):
                    view.render_report(budget)
                continue
            view.compact(budget)
            report = view.render_report(budget)
            prompt = report.messages
            assert report.tokens <= budget, (row["id"], budget)
            assert session.counter.messages(prompt) == report.tokens
            assert tool_unit_faults(prompt, answered=answered) == [], (row["id"], budget)
            assert prompt[0] == {k: v for k, v in history[0].items() if k != "meta"}
            assert {k: v for k, v in latest_user.items() if k != "meta"} in prompt
            assert len(markers(prompt)) <= 2
            # Recall may take room from the oldest raw messages (memory.recall).
            if view.state(budget).tokens <= budget and not report.recalled:
                assert (report.omitted, report.clipped) == (0, ())
            checked += 1
        assert session.history() == history
    assert checked > 300 // SHARES


def test_one_marker_counts_the_old_messages_left_out() -> None:
    messages = chat(40)
    session = session_of(messages)
    view = session.view("default", preset="disabled")
    per_round = session.counter.messages(messages[1:3]) - REPLY_PRIMING
    budget = required_tokens(session) + 6 * per_round
    prompt = view.render(budget)
    found = markers(prompt)
    assert len(found) == 1
    index, count = found[0]
    assert index == 1
    shown = prompt[2:]
    assert count == len(messages) - 1 - len(shown)
    assert shown == messages[-len(shown) :]
    assert sum(1 for m in prompt if m["role"] == "system") == 2


def test_marker_counts_stay_right_around_a_pinned_latest_user() -> None:
    messages = agent_run(30, history=10)
    session = session_of(messages)
    user_index = 21
    assert messages[user_index]["role"] == "user"
    report = session.view("default", preset="disabled").render_report(
        required_tokens(session) + 1200
    )
    prompt = report.messages
    found = markers(prompt)
    assert [i for i, _ in found] == [1, 3]
    assert prompt[2] == messages[user_index]
    before, after = found[0][1], found[1][1]
    assert before == user_index - 1
    tail = prompt[4:]
    first_seq = len(messages) - len(tail) + 1
    for seq, got in enumerate(tail, start=first_seq):
        want = messages[seq - 1]
        if seq in report.clipped:
            assert got["content"].startswith(want["content"][:100])
            assert "[contextfold: clipped," in got["content"]
        else:
            assert got == want
    assert report.clipped in ((), (first_seq + 1,))
    assert after == len(messages) - user_index - 1 - len(tail)
    assert report.omitted == before + after
    assert tool_unit_faults(prompt) == []


def test_exact_budget_renders_everything_and_one_less_cuts() -> None:
    messages = chat(12)
    session = session_of(messages)
    view = session.view("default", preset="disabled")
    full = session.counter.messages(messages)
    assert view.render(full) == messages
    smaller = view.render_report(full - 1)
    assert smaller.tokens <= full - 1
    assert smaller.omitted > 0
    assert len(markers(smaller.messages)) == 1


def test_budget_error_below_system_plus_latest_user() -> None:
    session = session_of(chat(8))
    view = session.view("default")
    required = required_tokens(session)
    with pytest.raises(BudgetError) as info:
        view.render(required - 1)
    assert info.value.required == required
    report = view.render_report(required)
    assert report.tokens <= required
    assert report.messages == [SYSTEM, session.history()[-2]]


def test_message_larger_than_what_is_left_is_clipped_and_kept_whole_in_the_log() -> None:
    messages = agent_run(3, output_words=300)
    messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "big", "type": "function", "function": {"name": "cat", "arguments": "{}"}}
            ],
        }
    )
    huge = "Traceback line with /src/app/module.py:120 in handler\n" * 3000
    messages.append({"role": "tool", "tool_call_id": "big", "content": huge})
    session = session_of(messages)
    view = session.view("default")
    report = view.render_report(4000)
    assert report.tokens <= 4000
    assert report.clipped == (len(messages),)
    clipped = report.messages[-1]
    assert clipped["tool_call_id"] == "big"
    assert huge.startswith(clipped["content"].split("\n[contextfold: clipped")[0])
    assert "[contextfold: clipped," in clipped["content"]
    assert "the log keeps it whole" in clipped["content"]
    assert tool_unit_faults(report.messages) == []
    assert session.history()[-1]["content"] == huge
    assert session.history() == messages


class CountingStore(RAMStore):
    """A memory store that counts the log messages render reads."""

    def __init__(self) -> None:
        super().__init__()
        self.read_before = 0
        self.read_range = 0

    def messages_before(self, session_id: str, before: int, limit: int) -> list[LoggedMessage]:
        page = super().messages_before(session_id, before, limit)
        self.read_before += len(page)
        return page

    def messages(
        self, session_id: str, start: int = 1, end: int | None = None
    ) -> list[LoggedMessage]:
        page = super().messages(session_id, start, end)
        self.read_range += len(page)
        return page


def test_render_reads_grow_with_what_it_returns_not_with_history() -> None:
    reads = {}
    for rounds in (500, 10_000):
        store = CountingStore()
        session = session_of(chat(rounds, words=10), store=store, encoding="approx")
        view = session.view("default")
        summary = {"role": "user", "content": "[summary]"}
        end = 2 * rounds - 20
        cost = session.counter.message(summary)
        old = Fold("default", 2, end, "summary", "[summary]", (summary,), "test", 10**6, cost)
        store.commit_folds(session.id, "default", [old], 0)
        for folded in (False, True):
            name = "folded" if folded else "raw"
            store.read_before = store.read_range = 0
            raw = session.view(name, preset="disabled")  # never folds: render cuts, not bridges
            report = view.render_report(2000) if folded else raw.render_report(2000)
            assert report.tokens <= 2000
            # The first read of the summary fold checks the log at its two edges (memory/heal).
            assert store.read_range <= 8 + 2 * folded
            assert store.read_before <= len(report.messages) + PAGE
            reads[rounds, name] = store.read_before
    assert reads[500, "raw"] == reads[10_000, "raw"]
    assert reads[500, "folded"] == reads[10_000, "folded"]


def _no_tool_calls(message: Message) -> bool:
    return not message.get("tool_calls")


def _no_tool_results(message: Message) -> bool:
    return message["role"] != "tool"


def _no_failures(message: Message) -> bool:
    return not (message["role"] == "tool" and "error" in str(message.get("content")).lower())


@pytest.mark.parametrize("keep", [_no_tool_calls, _no_tool_results, _no_failures])
def test_filtered_views_never_get_orphan_results_or_unanswered_calls(keep: Any) -> None:
    rows = load_rows("taubench_airline_dev", limit=25) + load_rows("openhands_example")
    for row in rows:
        session = session_of(row["messages"])
        history = session.history()
        answered = {m["tool_call_id"] for m in history if m["role"] == "tool"}
        latest_user = [m for m in history if m["role"] == "user"][-1]
        view = session.view("filtered", filter=keep)
        full = view.render_report().tokens
        required = required_tokens(session)
        for budget in (None, max(full // 2, required), max(full // 4, required), required + 30):
            prompt = view.render(budget)
            assert tool_unit_faults(prompt, answered=answered) == [], (row["id"], budget)
            assert {k: v for k, v in latest_user.items() if k != "meta"} in prompt
            kept = [m for m in prompt if not (m["role"] == "system" and MARKER.match(m["content"]))]
            assert all(keep(m) or m["role"] == "assistant" for m in kept)
        entries = view.state().entries
        assert tool_unit_faults([m for e in entries for m in e.messages], answered=answered) == []


@pytest.mark.parametrize(
    "preset", ["offline", "keep-recent", "adr-0041", "token-budget", "rolling"]
)
def test_reported_tokens_equal_a_fresh_count_of_the_prompt(preset: str) -> None:
    """Render adds stored counts; they must agree with counting the prompt anew."""
    for row in load_rows("taubench_airline_dev", limit=12) + load_rows("openhands_example"):
        session = Memory().session("s")
        session.extend(row["messages"])
        view = session.view("v", preset=preset)
        full = view.render_report().tokens
        for share in (0.9, 0.5, 0.25):
            budget = int(full * share)
            try:
                view.compact(budget)
                rendered = view.render_report(budget)
            except BudgetError:
                continue
            assert rendered.tokens == session.counter.messages(rendered.messages)
            assert rendered.tokens <= budget
