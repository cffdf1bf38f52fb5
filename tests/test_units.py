"""Tool units and rounds: the spans no fold or budget cut may split."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from conftest import load_rows

from contextfold.core.entries import Entry
from contextfold.core.folds import Fold
from contextfold.core.log import LoggedMessage
from contextfold.core.messages import Message, validate_messages
from contextfold.core.units import RoundSpan, round_spans, unit_spans


def user(text: str = "hi") -> Message:
    return {"role": "user", "content": text}


def say(text: str = "ok") -> Message:
    return {"role": "assistant", "content": text}


def calls(*ids: str) -> Message:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
        ],
    }


def result(call_id: str, text: str = "") -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def entries(*items: Message | Fold, check: bool = True) -> list[Entry]:
    """Entries in log order; seq numbers run on, a fold taking its range."""
    msgs = [m for m in items if not isinstance(m, Fold)]
    if check:
        validate_messages(msgs)
    out: list[Entry] = []
    seq = 1
    for item in items:
        if isinstance(item, Fold):
            out.append(Entry.of_fold(item))
            seq = item.end + 1
        else:
            out.append(Entry.of_message(LoggedMessage(seq, item, tokens=5)))
            seq += 1
    return out


def fold(start: int, end: int) -> Fold:
    return Fold(
        view="default",
        start=start,
        end=end,
        kind="summary",
        text="[SUMMARIZED] earlier work",
        messages=({"role": "user", "content": "[SUMMARIZED] earlier work"},),
        strategy="test",
        tokens_before=100,
        tokens_after=8,
    )


def test_plain_messages_are_units_of_one() -> None:
    assert unit_spans(entries(user(), say(), user(), say())) == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert unit_spans([]) == []
    assert round_spans([]) == []


def test_parallel_tool_calls_make_one_unit() -> None:
    es = entries(user(), calls("c1", "c2", "c3"), result("c2"), result("c1"), result("c3"), say())
    assert unit_spans(es) == [(0, 0), (1, 4), (5, 5)]


def test_a_unit_reaches_its_last_result() -> None:
    # Logs written before results had to follow their call may hold these.
    es = entries(
        user(),
        calls("c1", "c2"),
        result("c1"),
        calls("c3"),
        result("c3"),
        result("c2"),
        check=False,
    )
    assert unit_spans(es) == [(0, 0), (1, 5)]


def test_interleaved_calls_chain_into_one_unit() -> None:
    # The second call starts inside the first unit and ends after it.
    es = entries(
        user(), calls("c1"), calls("c2"), result("c1"), say(), result("c2"), user(), check=False
    )
    assert unit_spans(es) == [(0, 0), (1, 5), (6, 6)]


def test_reused_ids_answer_the_nearest_earlier_call() -> None:
    es = entries(
        user("book"),
        calls("c1"),
        result("c1"),
        say("found it"),
        user("and back?"),
        calls("c1"),
        result("c1"),
        say("booked"),
    )
    # Were the second result taken for the first call, one unit would run 1..6.
    assert unit_spans(es) == [(0, 0), (1, 2), (3, 3), (4, 4), (5, 6), (7, 7)]
    assert [(r.first, r.last) for r in round_spans(es)] == [(0, 3), (4, 7)]


def test_an_intervening_message_belongs_to_the_unit() -> None:
    es = entries(
        user("go"), calls("c1", "c2"), result("c1"), user("wait"), result("c2"), say(), check=False
    )
    assert unit_spans(es) == [(0, 0), (1, 4), (5, 5)]
    # The user message inside the unit opens no round: that would split the unit.
    assert round_spans(es) == [RoundSpan(0, 5, closed=True, has_user=True)]


def test_a_result_whose_call_is_not_in_view_stands_alone() -> None:
    es = entries(result("c0"), user(), say(), check=False)
    assert unit_spans(es) == [(0, 0), (1, 1), (2, 2)]


def test_rounds_split_at_user_messages() -> None:
    es = entries(
        {"role": "system", "content": "rules"},
        user("q1"),
        say("a1"),
        user("q2"),
        calls("c1"),
        result("c1"),
        say("a2"),
        user("q3"),
    )
    assert round_spans(es) == [
        RoundSpan(0, 0, closed=True, has_user=False),
        RoundSpan(1, 2, closed=True, has_user=True),
        RoundSpan(3, 6, closed=True, has_user=True),
        RoundSpan(7, 7, closed=False, has_user=True),
    ]


def test_the_last_round_is_in_progress_until_a_plain_answer() -> None:
    steps: list[Message] = [user("q"), calls("c1"), result("c1", "x"), calls("c2"), result("c2")]
    for n in range(1, len(steps) + 1):
        last = round_spans(entries(*steps[:n]))[-1]
        assert (last.first, last.last, last.closed) == (0, n - 1, False)
    done = round_spans(entries(*steps, say("answer")))
    assert done == [RoundSpan(0, 5, closed=True, has_user=True)]
    again = round_spans(entries(*steps, say("answer"), user("next")))
    assert [r.closed for r in again] == [True, False]


def test_entries_before_the_first_user_form_a_round_without_user() -> None:
    es = entries(
        {"role": "system", "content": "rules"}, say("Hello! How can I help?"), user(), say()
    )
    assert round_spans(es) == [
        RoundSpan(0, 1, closed=True, has_user=False),
        RoundSpan(2, 3, closed=True, has_user=True),
    ]
    alone = round_spans(entries({"role": "system", "content": "rules"}, say("Hello!")))
    assert alone == [RoundSpan(0, 1, closed=True, has_user=False)]


def test_a_fold_is_its_own_unit() -> None:
    es = entries(fold(1, 6), user(), calls("c1"), result("c1"), fold(10, 14), say())
    assert [e.fold is not None for e in es] == [True, False, False, False, True, False]
    assert unit_spans(es) == [(0, 0), (1, 1), (2, 3), (4, 4), (5, 5)]
    rounds = round_spans(es)
    assert rounds[0] == RoundSpan(0, 0, closed=True, has_user=False)
    assert rounds[1] == RoundSpan(1, 5, closed=True, has_user=True)


def test_a_trailing_fold_closes_its_round() -> None:
    es = entries(user(), say(), user(), fold(4, 9))
    assert round_spans(es)[-1] == RoundSpan(2, 3, closed=True, has_user=True)


def nearest_call(es: list[Entry], i: int) -> int | None:
    call_id = es[i].messages[0]["tool_call_id"]
    for j in range(i - 1, -1, -1):
        msg = es[j].message
        if msg and any(c["id"] == call_id for c in msg.get("tool_calls") or ()):
            return j
    return None


def agent_runs() -> list[tuple[str, list[dict[str, Any]]]]:
    rows = load_rows("taubench_airline_dev") + load_rows("openhands_example")
    return [(row["id"], row["messages"]) for row in rows]


@pytest.mark.parametrize(("run_id", "messages"), agent_runs())
def test_units_and_rounds_over_real_runs(run_id: str, messages: list[Message]) -> None:
    es = entries(*messages)
    n = len(es)
    units = unit_spans(es)
    # A partition: contiguous, in order, covering every entry once.
    assert units[0][0] == 0
    assert units[-1][1] == n - 1
    for (_, last), (first, _) in itertools.pairwise(units):
        assert first == last + 1
    assert all(first <= last for first, last in units)
    unit_of = {i: k for k, (first, last) in enumerate(units) for i in range(first, last + 1)}

    pairs: list[tuple[int, int]] = []
    for i, entry in enumerate(es):
        if entry.role == "tool":
            j = nearest_call(es, i)
            assert j is not None
            assert unit_of[i] == unit_of[j], f"tool result {i} split from its call {j}"
            pairs.append((j, i))
    # Minimal: every boundary inside a unit is crossed by some call and its result.
    for first, last in units:
        assert first == last or es[first].messages[0].get("tool_calls")
        for cut in range(first + 1, last + 1):
            assert any(j < cut <= i for j, i in pairs), f"unit {first}..{last} could split at {cut}"

    rounds = round_spans(es)
    assert rounds[0].first == 0
    assert rounds[-1].last == n - 1
    for a, b in itertools.pairwise(rounds):
        assert b.first == a.last + 1
        assert a.closed
        assert es[b.first].role == "user"
        assert b.has_user
    starts = {first for first, _ in units}
    assert all(r.first in starts and r.last + 1 in starts | {n} for r in rounds)
    users = [i for i, e in enumerate(es) if e.role == "user"]
    assert {r.first for r in rounds if r.has_user} == {i for i in users if i in starts}
    assert rounds[0].has_user == (es[0].role == "user")
    final = es[-1].message
    assert rounds[-1].closed == (
        final is not None and final["role"] == "assistant" and not final.get("tool_calls")
    )
