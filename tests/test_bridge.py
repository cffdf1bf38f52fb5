"""Bridging: in a fast agent loop render folds what it would cut, provisionally, until the
view's own fold lands (``contextfold.memory.bridge``).

The model is a scripted Chat Completions server on 127.0.0.1 that takes its time
(or fails); a ``ThreadRunner`` watches the view while messages are appended
every few milliseconds and the view is rendered after each append.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_openai import openai_reply
from fake_providers import FakeProvider, Reply, Request, error_reply
from server_harness import running as serving

from contextfold import Event, InvalidInput, Memory, Session, View
from contextfold.core.messages import Message
from contextfold.core.render import Rendered
from contextfold.llm.base import RetryPolicy
from contextfold.llm.offline import OfflineModel
from contextfold.llm.openai import OpenAIModel, OpenAIProvider
from contextfold.memory.bridge import settled
from contextfold.runtime import ThreadRunner
from contextfold.server.app import create_app
from contextfold.server.service import Service
from contextfold.server.settings import Settings

BUDGET = 1500
SYSTEM = "You are a coding agent. Use the tools to fix the failing tests."


def loop(steps: int, first: int = 0) -> list[Message]:
    """An agent's tool loop: one user request, then tool calls and their long results."""
    out: list[Message] = []
    if first == 0:
        out.append({"role": "user", "content": "Fix the failing tests in src/app, file by file."})
    for i in range(first, first + steps):
        call = f"call_{i}"
        out.append(
            {
                "role": "assistant",
                "content": f"Reading module {i}.",
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {"name": "read", "arguments": json.dumps({"i": i})},
                    }
                ],
            }
        )
        lines = " ".join(
            f"Line {n} of src/app/mod_{i}.py defines handler_{i}_{n} returning {i * n}."
            for n in range(8)
        )
        out.append({"role": "tool", "tool_call_id": call, "content": lines})
    return out


def slow_server(delay_s: float) -> FakeProvider:
    """A Chat Completions server answering each call after ``delay_s`` with what the
    offline stand-in answers to the same messages (answers the judge accepts)."""
    server = FakeProvider("openai")
    offline = OfflineModel()

    def answer(request: Request) -> Reply:
        text = offline.complete(
            request.body["messages"], max_tokens=request.body.get("max_tokens")
        ).text
        reply = openai_reply(text)
        return Reply(status=reply.status, body=reply.body, headers=reply.headers, delay=delay_s)

    server.answer("POST", "/v1/chat/completions", answer)
    return server


def model_of(server: FakeProvider) -> OpenAIModel:
    provider = OpenAIProvider(base_url=server.url, compatible=True)
    return OpenAIModel("local", provider=provider, timeout=10, retry=RetryPolicy(attempts=1))


def watched(view: View) -> list[Event]:
    events: list[Event] = []
    view.on_event.append(events.append)
    return events


def fast_loop(
    session: Session, view: View, messages: list[Message], pace_s: float
) -> list[Rendered]:
    """Append each message and render after it, ``pace_s`` apart."""
    out = []
    for message in messages:
        session.append(message)
        out.append(view.render_report())
        time.sleep(pace_s)
    return out


def assert_sound(rendered: Rendered, budget: int) -> None:
    """Within budget; every tool result follows its call."""
    assert rendered.tokens <= budget
    open_calls: set[str] = set()
    for message in rendered.messages:
        if message["role"] == "assistant":
            open_calls = {c["id"] for c in message.get("tool_calls") or ()}
        elif message["role"] == "tool":
            assert message["tool_call_id"] in open_calls, "a tool result lost its call"


@pytest.fixture
def slow() -> Iterator[FakeProvider]:
    with slow_server(0.6) as server:
        yield server


def test_a_fast_loop_on_a_slow_model_cuts_nothing_and_the_model_fold_replaces_the_bridge(
    slow: FakeProvider,
) -> None:
    session = Memory().session("s", system=SYSTEM)
    view = session.view("v", preset="rolling", budget=BUDGET, llm=model_of(slow))
    events = watched(view)
    with ThreadRunner(workers=1, settle_s=0.0) as runner:
        runner.watch(view)
        prompts = fast_loop(session, view, loop(40), pace_s=0.005)
        assert runner.wait_idle(30)
        final = view.render_report()
    cut = [i for i, p in enumerate(prompts) if p.omitted]
    assert cut == [], f"renders {cut} left messages out with no fold in their place"
    for prompt in [*prompts, final]:
        assert_sound(prompt, BUDGET)
    made = [e for e in events if e.kind == "provisional"]
    replaced = [e for e in events if e.kind == "replaced"]
    committed = [e for e in events if e.kind == "committed"]
    assert made and committed and replaced
    # A committed model fold replaced each: it lies over the provisional fold's range.
    for event in replaced:
        assert event.data["by_strategy"] != "provisional"
        assert event.data["by_start"] <= event.end and event.start <= event.data["by_end"]
        assert event.duration_s > 0
    # Provisional folds never moved the fold-set version under a model job.
    assert not [e for e in events if e.kind == "rejected"]
    assert len(slow.requests) == sum(1 for e in events if e.kind == "started")
    # The first prompt that bridged held a provisional fold where the cut would be.
    bridged = next(p for p in prompts if any(f.startswith("provisional:") for f in p.folds))
    assert "[Folded to fit the token budget" in json.dumps(bridged.messages)


def test_the_latest_user_message_and_the_newest_unit_stay_verbatim_and_steps_grow() -> None:
    session = Memory().session("s", system=SYSTEM)
    view = session.view("v", preset="offline", budget=BUDGET)
    events = watched(view)
    conversation = loop(30)
    prompts = fast_loop(session, view, conversation, pace_s=0.0)
    assert all(p.omitted == 0 for p in prompts)
    last = prompts[-1]
    assert conversation[0] in last.messages, "the latest user message is shown whole"
    assert last.messages[-2:] == conversation[-2:], "the newest unit is shown whole"
    assert_sound(last, BUDGET)
    made = [e for e in events if e.kind == "provisional"]
    # Each provisional fold after the first of its run grew the one before by a step:
    # a render folds what is new, not the whole run again.
    runs: dict[int, list[int]] = {}
    for event in made:
        runs.setdefault(event.start, []).append(event.data["steps"])
    assert any(len(steps) > 1 for steps in runs.values())
    for steps in runs.values():
        assert steps == sorted(steps) and len(set(steps)) == len(steps)
    assert view.folds(include_superseded=True) == [], "nothing provisional is stored"


SETTLED_RENDER = """
import json, sys
from contextfold import Memory
from contextfold.memory.bridge import settled
url, session, view = sys.argv[1:]
with Memory(url) as memory:
    handle = memory.existing_session(session).view(view)
    for _ in range(200):
        rendered = handle.render_report()
        if settled(rendered.folds):
            break
print(json.dumps(rendered.messages))
"""


def test_provisional_folds_are_not_stored_and_another_process_renders_the_same_prompt(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'bridge.db'}"
    with Memory(url) as memory:
        session = memory.session("s", system=SYSTEM)
        view = session.view("v", preset="offline", budget=BUDGET)
        fast_loop(session, view, loop(30), pace_s=0.0)
        mine = view.render_report()
        for _ in range(200):
            if settled(mine.folds):
                break
            mine = view.render_report()
        assert any(f.startswith("provisional:") for f in mine.folds) and settled(mine.folds)
        assert view.folds(include_superseded=True) == []
        done = subprocess.run(
            [sys.executable, "-c", SETTLED_RENDER, url, "s", "v"],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
    assert json.loads(done.stdout) == mine.messages


def test_a_view_may_wait_for_the_fold_in_flight_instead_of_bridging(slow: FakeProvider) -> None:
    session = Memory().session("s", system=SYSTEM)
    view = session.view("v", preset="rolling", budget=BUDGET, llm=model_of(slow))
    view.update(wait_for_fold_s=10.0)
    assert view.config.wait_for_fold_s == 10.0
    events = watched(view)
    with ThreadRunner(workers=1, settle_s=0.0) as runner:
        runner.watch(view)
        session.extend(loop(30))
        deadline = time.monotonic() + 10
        while runner.running(view) is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert runner.running(view) is not None, "a model job is in flight"
        began = time.monotonic()
        rendered = view.render_report()
        waited = time.monotonic() - began
        assert runner.wait_idle(30)
    assert rendered.omitted == 0
    assert waited >= 0.1, "render waited for the model's answer"
    assert any(e.kind == "committed" for e in events)
    assert not any(e.kind == "provisional" for e in events)
    assert not any(f.startswith("provisional:") for f in rendered.folds)


def test_a_view_that_waits_bridges_when_no_fold_is_in_flight() -> None:
    session = Memory().session("s", system=SYSTEM)
    view = session.view("v", preset="offline", budget=BUDGET)
    view.update(wait_for_fold_s=5.0)
    session.extend(loop(30))
    began = time.monotonic()
    rendered = view.render_report()
    assert time.monotonic() - began < 2.0
    assert rendered.omitted == 0
    assert any(f.startswith("provisional:") for f in rendered.folds)


@pytest.mark.parametrize(
    ("value", "why"),
    [(-1.0, "negative"), (61.0, "too long"), ("1", "a string"), (True, "a bool")],
)
def test_wait_for_fold_s_is_checked_naming_the_field(value: Any, why: str) -> None:
    session = Memory().session("s", system=SYSTEM)
    view = session.view("v", preset="offline", budget=BUDGET)
    version = view.version
    with pytest.raises(InvalidInput) as raised:
        view.update(wait_for_fold_s=value)
    assert raised.value.field == "wait_for_fold_s", why
    assert view.version == version and view.config.wait_for_fold_s == 0.0


def test_a_failing_model_cooling_down_is_still_bridged() -> None:
    with FakeProvider("openai") as failing:
        failing.answer(
            "POST", "/v1/chat/completions", lambda request: error_reply("openai", 500, "down")
        )
        session = Memory().session("s", system=SYSTEM)
        view = session.view("v", preset="rolling", budget=BUDGET, llm=model_of(failing))
        events = watched(view)
        with ThreadRunner(workers=1, settle_s=0.0) as runner:
            runner.watch(view)
            prompts = fast_loop(session, view, loop(40), pace_s=0.005)
            runner.stop(timeout=5)
    assert any(e.kind == "failed" for e in events), "the model failed"
    assert [i for i, p in enumerate(prompts) if p.omitted] == []
    assert any(e.kind == "provisional" for e in events)


def test_a_proxy_turn_that_would_have_been_cut_goes_upstream_bridged(tmp_path: Path) -> None:
    """One proxy turn resends a long tool loop at once: the background fold cannot have
    landed, and the upstream gets a provisional fold where the cut's marker would be."""
    with FakeProvider("openai") as upstream:
        upstream.add(openai_reply("done"))
        settings = Settings(
            database=str(tmp_path / "cf.db"),
            upstream=f"openai-compatible:{upstream.url}",
            auth=False,
        )
        service = Service(settings)
        try:
            with serving(create_app(service)) as url:
                conversation: list[dict[str, Any]] = [
                    {"role": "system", "content": SYSTEM},
                    *loop(30),
                ]
                response = httpx.post(
                    f"{url}/v1/chat/completions",
                    json={"model": "m", "messages": conversation},
                    headers={"X-Contextfold-Session": "s1", "X-Contextfold-Budget": str(BUDGET)},
                    timeout=30,
                )
                assert response.status_code == 200, response.text
        finally:
            service.close()
    sent = upstream.requests[-1].body["messages"]
    text = json.dumps(sent)
    assert "left out to fit the token budget" not in text
    assert "[Folded to fit the token budget" in text
    assert sent[0] == conversation[0] and sent[-2:] == conversation[-2:]
    assert conversation[1] in sent, "the latest user message is shown whole"
