"""The working set: an agent view's newest rounds stay verbatim, tool results whole."""

from __future__ import annotations

from typing import Any

import pytest

from contextfold import Memory, Session, View
from contextfold.core.errors import InvalidInput
from contextfold.core.messages import text_of

WORDS = [
    "alpha",
    "bravo",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "glade",
    "heron",
    "inlet",
    "juniper",
    "kelp",
    "larch",
]


def chat_round(i: int) -> list[dict[str, Any]]:
    said = " ".join(f"{w}{i}" for w in WORDS)
    return [
        {"role": "user", "content": f"Round {i}: tell me about {said}."},
        {"role": "assistant", "content": f"In round {i} we spoke of {said} at length."},
    ]


def agent_round(i: int) -> list[dict[str, Any]]:
    call = {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": "read_file", "arguments": f'{{"path": "src/mod{i}.py"}}'},
    }
    listing = "\n".join(f"{n} def {w}{i}_{n}(): return {n}" for n, w in enumerate(WORDS * 3))
    return [
        {"role": "user", "content": f"Step {i}: read src/mod{i}.py and fix it."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": listing},
        {"role": "assistant", "content": f"Fixed src/mod{i}.py."},
    ]


def session_of(rounds: list[list[dict[str, Any]]]) -> Session:
    session = Memory().session("s")
    session.extend([m for r in rounds for m in r])
    return session


def compacted(session: Session, share: float, **options: Any) -> View:
    full = session.view("full").state().tokens
    name = f"v{share}" + "".join(f"-{k}={v}" for k, v in sorted(options.items()))
    view = session.view(name, preset="offline", budget=int(full * share), **options)
    view.compact()
    return view


def summary_kind(view: View) -> Any:
    (fold,) = [f for f in view.folds() if f.kind == "summary"]
    return fold.data["kind"]


def whole_tool_results(view: View, rounds: list[list[dict[str, Any]]]) -> int:
    """How many of the newest rounds have their tool result in the prompt unmasked."""
    shown = [text_of(m) for m in view.render() if m["role"] == "tool"]
    count = 0
    for r in reversed(rounds):
        if text_of(r[2]) not in shown:
            break
        count += 1
    return count


def test_kind_is_read_from_the_log() -> None:
    chat = [chat_round(i) for i in range(30)]
    agent = [agent_round(i) for i in range(30)]
    assert summary_kind(compacted(session_of(chat), 0.2)) == "chat"
    assert summary_kind(compacted(session_of(agent), 0.2)) == "agent"


def test_an_agent_view_keeps_its_last_rounds_tool_results_whole_at_a_tight_budget() -> None:
    rounds = [agent_round(i) for i in range(30)]
    session = session_of(rounds)
    agent = compacted(session, 0.3)
    as_chat = compacted(session, 0.3, kind="chat")
    assert agent.render_report().tokens <= agent.state().budget  # type: ignore[operator]
    # Each round is about 3% of the log: half the room at 30% (its low mark) holds three.
    assert whole_tool_results(agent, rounds) >= 3
    assert whole_tool_results(as_chat, rounds) < whole_tool_results(agent, rounds)


def test_options_override_the_kind_read_from_the_log() -> None:
    rounds = [agent_round(i) for i in range(30)]
    session = session_of(rounds)
    assert summary_kind(compacted(session, 0.15, kind="chat")) == "chat"
    small = compacted(session, 0.3, recent_share=0.05)
    wide = compacted(session, 0.3, recent_share=0.6)
    assert whole_tool_results(small, rounds) < whole_tool_results(wide, rounds)
    chat = [chat_round(i) for i in range(30)]
    assert summary_kind(compacted(session_of(chat), 0.2, kind="agent")) == "agent"


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"kind": "robot"}, "kind"),
        ({"recent_share": 1.5}, "recent_share"),
        ({"recent_share": "half"}, "recent_share"),
        ({"recent_share": True}, "recent_share"),
    ],
)
def test_bad_options_name_the_field(options: dict[str, Any], field: str) -> None:
    session = session_of([chat_round(0)])
    with pytest.raises(InvalidInput) as caught:
        session.view("v", preset="offline", budget=1000, **options)
    assert caught.value.field == field
    assert len(session.messages()) == 2
