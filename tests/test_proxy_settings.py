"""The views the proxy creates: their summarizer (``serve --model``, or a view's own
``model``) and their budget (the request model's window, ``[model_windows]``, or
``serve --budget``; a Claude model's scaled to the view's tokens; a view's own and a
request's own), through a real uvicorn server and scripted model servers.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_openai import openai_reply
from fake_providers import FakeProvider
from server_harness import running

from contextfold.core.claude_tokens import V3
from contextfold.core.errors import InvalidInput
from contextfold.core.tokens import get_counter
from contextfold.llm.windows import ANSWER_RESERVE, check_windows, find_window, flag_windows, room
from contextfold.memory.session import Memory
from contextfold.server.app import create_app
from contextfold.server.proxy_budget import FALLBACK_BUDGET
from contextfold.server.service import Service
from contextfold.server.settings import Settings

API = "/api/v1/sessions"
SUMMARY = {
    "user_preferences": {},
    "key_decisions": ["ship on Friday"],
    "important_facts": ["the build takes ten minutes"],
    "source_urls": [],
    "document_structure": {},
    "entities": ["Ada"],
    "custom_fields": {},
    "conversation_summary": "Ada and the assistant planned the release, step by step.",
}


@contextmanager
def served(tmp_path: Path, **settings: Any) -> Iterator[str]:
    service = Service(Settings(database=str(tmp_path / "cf.db"), auth=False, **settings))
    try:
        with running(create_app(service)) as url:
            yield url
    finally:
        service.close()


def conversation(turns: int) -> list[dict[str, str]]:
    messages = []
    for i in range(turns):
        text = f"Step {i} of the release plan: " + "check the build and the tests again. " * 20
        messages.append({"role": "user", "content": text})
        messages.append({"role": "assistant", "content": f"Done with step {i}. " * 30})
    return [*messages, {"role": "user", "content": "What is left?"}]


def chat(url: str, session: str, model: str, **extra: Any) -> httpx.Response:
    headers = {"X-Contextfold-Session": session, **extra.pop("headers", {})}
    body = {"model": model, "messages": extra.pop("messages", conversation(1)), **extra}
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer


def test_proxy_views_fold_with_the_served_model_or_their_own(tmp_path: Path) -> None:
    with FakeProvider("openai") as upstream, FakeProvider("openai") as summarizer:
        upstream.add(openai_reply("noted"), openai_reply("noted"))
        summarizer.add(*[openai_reply(json.dumps(SUMMARY), model="x")] * 8)
        served_model = f"openai-compatible:{summarizer.url}#served-summarizer"
        own_model = f"openai-compatible:{summarizer.url}#own-summarizer"
        settings = {
            "upstream": f"openai-compatible:{upstream.url}",
            "model": served_model,
            "budget": 1500,
            "runner": False,  # compact is asked for below, not raced by the background
        }
        with served(tmp_path, **settings) as url:
            chat(url, "s1", "gpt-4o", messages=conversation(12))
            view = httpx.get(f"{url}{API}/s1/views/default").json()["config"]
            assert (view["preset"], view["model"], view["budget"]) == ("chat", served_model, 1500)
            compacted = httpx.post(f"{url}{API}/s1/views/default/compact", timeout=60)
            assert compacted.status_code == 200 and compacted.json()["folds"], compacted.text
            served_calls = len(summarizer.requests)
            assert served_calls >= 1
            assert {r.body["model"] for r in summarizer.requests} == {"served-summarizer"}

            put = {"preset": "chat", "model": own_model, "budget": 1500}
            httpx.put(f"{url}{API}/s1/views/own", json=put).raise_for_status()
            answered = openai_reply("noted").body["choices"][0]["message"]
            messages = [*conversation(12), answered, {"role": "user", "content": "And now?"}]
            chat(url, "s1", "gpt-4o", messages=messages, headers={"X-Contextfold-View": "own"})
            compacted = httpx.post(f"{url}{API}/s1/views/own/compact", timeout=60)
            assert compacted.status_code == 200 and compacted.json()["folds"], compacted.text
        later = {r.body["model"] for r in summarizer.requests[served_calls:]}
        assert later == {"own-summarizer"}


def test_without_a_model_the_proxy_views_stay_offline(tmp_path: Path) -> None:
    with FakeProvider("openai") as upstream:
        upstream.add(openai_reply("noted"))
        with served(tmp_path, upstream=f"openai-compatible:{upstream.url}") as url:
            chat(url, "s1", "gpt-4o")
            view = httpx.get(f"{url}{API}/s1/views/default").json()["config"]
            assert (view["preset"], view["model"]) == ("offline", None)


def test_the_budget_follows_the_window_of_the_request_model(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    windows = check_windows({"my-local": 32_768}, "cf.toml [model_windows]")
    with FakeProvider("openai") as upstream:
        upstream.add(*[openai_reply("noted")] * 8)
        spec = f"openai-compatible:{upstream.url}"
        with (
            served(tmp_path, upstream=spec, model_windows=windows) as url,
            caplog.at_level(logging.INFO, logger="contextfold.proxy"),
        ):
            said: dict[str, list[dict[str, Any]]] = {}

            def budget(session: str, model: str, **extra: Any) -> tuple[int, str, int]:
                """One more turn of ``session``'s conversation, sent for ``model``."""
                messages = [*said.get(session, []), *conversation(1)]
                answer = chat(url, session, model, messages=messages, **extra)
                said[session] = [*messages, answer.json()["choices"][0]["message"]]
                view = httpx.get(f"{url}{API}/{session}/views/default").json()["config"]
                used = int(answer.headers["x-contextfold-budget"])
                return used, answer.headers["x-contextfold-budget-source"], view["budget"]

            # A dated snapshot matches its model; the answer keeps its reserve.
            snapshot = 128_000 - ANSWER_RESERVE
            assert budget("a", "gpt-4o-2024-08-06") == (snapshot, "table", snapshot)
            # The request's own answer limit is what is kept for the answer.
            limited = budget("b", "gpt-4.1-mini", max_completion_tokens=1000)
            assert limited == (1_047_576 - 1000, "table", 1_047_576 - 1000)
            # [model_windows] adds a model; a small window keeps a quarter for the answer.
            assert budget("c", "my-local") == (32_768 - 8192, "config", 32_768 - 8192)
            assert budget("d", "mystery-7b") == (FALLBACK_BUDGET, "fallback", FALLBACK_BUDGET)
            # A later request to a model with less room renders smaller; the view stays.
            assert budget("a", "gpt-4") == (6144, "table", snapshot)
            assert budget("a", "gpt-5") == (snapshot, "view", snapshot)
            asked = {"X-Contextfold-Budget": "900"}
            assert budget("a", "gpt-4o", headers=asked)[:2] == (
                900,
                "header",
            )
        sent = upstream.requests[-1].body
        assert sent["model"] == "gpt-4o" and "max_tokens" not in sent
    logged = {r.getMessage(): r.levelno for r in caplog.records}
    fallback = [m for m in logged if "mystery-7b" in m]
    assert fallback and logged[fallback[0]] == logging.WARNING
    assert "fallback: no window known for model 'mystery-7b'" in fallback[0]


def test_a_new_proxy_view_reports_its_budget_on_the_session_stream(tmp_path: Path) -> None:
    events: list[str] = []
    listening = threading.Event()

    def listen(url: str) -> None:
        with httpx.stream("GET", f"{url}{API}/e/events", timeout=30) as stream:
            for line in stream.iter_lines():
                listening.set()
                events.append(line)
                if line.startswith("data:") and "budget" in events[-2]:
                    return

    with FakeProvider("openai") as upstream:
        upstream.add(openai_reply("noted"))
        with served(tmp_path, upstream=f"openai-compatible:{upstream.url}") as url:
            httpx.post(f"{url}{API}", json={"id": "e"}).raise_for_status()
            thread = threading.Thread(target=listen, args=(url,), daemon=True)
            thread.start()
            assert listening.wait(30)
            chat(url, "e", "llama-local")
            thread.join(30)
    assert "event: budget" in events, events
    data = json.loads(events[events.index("event: budget") + 1].removeprefix("data:"))
    assert data == {
        "session": "e",
        "view": "default",
        "budget": FALLBACK_BUDGET,
        "source": "fallback",
        "model": "llama-local",
        "window": None,
        "reserve": None,
        "origin": None,
        "factor": None,
        "counted": None,
        "tools": 0,
    }


def test_serve_budget_fixes_the_budget(tmp_path: Path) -> None:
    with FakeProvider("openai") as upstream:
        upstream.add(openai_reply("noted"))
        spec = f"openai-compatible:{upstream.url}"
        with served(tmp_path, upstream=spec, budget=5000) as url:
            answer = chat(url, "s1", "gpt-4o")
            assert answer.headers["x-contextfold-budget"] == "5000"
            assert answer.headers["x-contextfold-budget-source"] == "flag"


def test_an_answer_limit_over_the_window_is_refused(tmp_path: Path) -> None:
    with FakeProvider("openai") as upstream:
        with served(tmp_path, upstream=f"openai-compatible:{upstream.url}") as url:
            body = {"model": "gpt-4", "max_tokens": 9000, "messages": conversation(1)}
            answer = httpx.post(
                f"{url}/v1/chat/completions", json=body, headers={"X-Contextfold-Session": "s"}
            )
        assert answer.status_code == 422
        assert "max_tokens 9000 leaves no room" in answer.text
        assert upstream.requests == []


@pytest.mark.parametrize(
    ("model", "name"),
    [
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("openai/gpt-4o", "gpt-4o"),
        ("o1-mini", "o1-mini"),
        ("o3-mini-2025-01-31", "o3-mini"),
        ("claude-sonnet-4-5", "claude-*"),
        ("gpt-5-chat-latest", "gpt-5-chat-latest"),
        ("gpt-4o-audio-preview", "gpt-4o"),
        ("gpt-5.4-mini-2026-03-17", "gpt-5.4-mini"),
        ("gpt-5.5-2026-04-23", "gpt-5.5"),
        ("gpt-5.3-codex-spark", "gpt-5.3-codex-spark"),
        ("gpt-5.1-codex-max", "gpt-5.1-codex-max"),
        ("o3-pro-2025-06-10", "o3-pro"),
        ("claude-sonnet-4-5-20250929", "claude-*"),
        ("claude-opus-4-6", "claude-opus-4-6"),
        ("claude-opus-5-5", "claude-opus-5*"),
        ("anthropic/claude-sonnet-5", "claude-sonnet-5*"),
        ("claude-fable-5-1", "claude-fable-*"),
        ("us.anthropic.claude-opus-4-7-v1:0", "claude-opus-4-7"),
        ("claude-opus-4-6@20260205", "claude-opus-4-6"),
        ("anthropic/claude-sonnet-4.6", "claude-sonnet-4-6"),
        ("claude-instant-1.2", "claude-instant-1.2"),
        ("gemini-3-pro-preview", "gemini-3-pro"),
    ],
)
def test_a_model_matches_its_longest_name(model: str, name: str) -> None:
    found = find_window(model)
    assert found is not None and found[0] == name
    assert find_window("gpt-4omega") is None


@pytest.mark.parametrize(
    ("model", "tokens"),
    [
        ("claude-haiku-4-5-20251001", 200_000),
        ("claude-sonnet-4-5", 200_000),
        ("claude-sonnet-4-6", 1_000_000),
        ("claude-opus-4-8", 1_000_000),
        ("claude-haiku-5-5", 1_000_000),
        ("gpt-5.2", 400_000),
        ("gpt-5.4", 1_050_000),
        ("gpt-5.4-nano", 400_000),
        ("gpt-5-codex", 400_000),
    ],
)
def test_the_table_gives_current_models_their_windows(model: str, tokens: int) -> None:
    found = find_window(model)
    assert found is not None and found[1].tokens == tokens and found[1].source.startswith("https")


def test_model_window_flags_are_entries_of_their_own_source() -> None:
    windows = flag_windows(["my-model=32768", " claude-opus-5 = 500000 "])
    assert windows["my-model"].tokens == 32_768
    assert windows["claude-opus-5"].source == "serve --model-window"
    for bad in ("my-model", "=5", "my-model=lots", "my-model=1"):
        with pytest.raises(InvalidInput) as raised:
            flag_windows([bad])
        assert raised.value.field == "model_window"


def test_a_claude_budget_is_its_window_in_the_views_tokens(tmp_path: Path) -> None:
    with FakeProvider("openai") as upstream:
        upstream.add(openai_reply("noted"))
        with served(tmp_path, upstream=f"openai-compatible:{upstream.url}") as url:
            answer = chat(url, "c", "anthropic/claude-sonnet-4-6")
            view = httpx.get(f"{url}{API}/c/views/default").json()["config"]
    budget = math.floor((1_000_000 - ANSWER_RESERVE) / V3.factor)
    assert answer.headers["x-contextfold-budget"] == str(budget) == str(view["budget"])
    assert answer.headers["x-contextfold-budget-source"] == "table"


def test_a_view_made_with_a_budget_keeps_it_and_a_request_may_ask_less(tmp_path: Path) -> None:
    with FakeProvider("openai") as upstream:
        upstream.add(*[openai_reply("noted")] * 3)
        with served(tmp_path, upstream=f"openai-compatible:{upstream.url}") as url:
            httpx.post(f"{url}{API}", json={"id": "v"}).raise_for_status()
            put = {"preset": "offline", "budget": 12_000}
            httpx.put(f"{url}{API}/v/views/default", json=put).raise_for_status()
            said = conversation(1)
            seen = []
            for model, extra in (
                ("gpt-4o", {}),
                ("gpt-4", {}),
                ("gpt-4o", {"X-Contextfold-Budget": "700"}),
            ):
                answer = chat(url, "v", model, messages=said, headers=extra)
                said = [*said, answer.json()["choices"][0]["message"], *conversation(1)]
                budget = int(answer.headers["x-contextfold-budget"])
                seen.append((budget, answer.headers["x-contextfold-budget-source"]))
                stored = httpx.get(f"{url}{API}/v/views/default").json()["config"]["budget"]
                assert stored == 12_000
    assert seen == [(12_000, "view"), (6144, "table"), (700, "header")]


def test_room_is_the_budget_a_model_gives_a_library_view(tmp_path: Path) -> None:
    claude = room("claude-opus-5")
    assert claude is not None
    assert claude.budget == math.floor((1_000_000 - ANSWER_RESERVE) / 1.85)
    assert (claude.factor, claude.counted, claude.given) == (1.85, "estimate", False)
    assert room("claude-opus-5", measured=1.2) == claude  # a lower measure is not taken
    assert room("claude-opus-5", measured=2.0, answer=1000) == (
        math.floor(999_000 / 2.0),
        1_000_000,
        1000,
        claude.source,
        False,
        2.0,
        "count_tokens",
    )
    mine = room("my-local", windows=flag_windows(["my-local=32768"]))
    assert mine is not None and (mine.budget, mine.given) == (32_768 - 8192, True)
    assert room("mystery-7b") is None
    with pytest.raises(InvalidInput) as refused:
        room("gpt-4", answer=9000)
    assert refused.value.field == "answer" and "answer 9000 leaves no room" in str(refused.value)

    path = str(tmp_path / "lib.db")
    with Memory(path) as memory:
        session = memory.session("s", system="You plan releases.")
        for message in conversation(8):
            session.append(message)
        small = room("gpt-4", answer=7000)
        assert small is not None and small.budget == 1192
        session.view("planner", preset="offline", budget=small.budget)
    with Memory(path) as memory:
        view = memory.session("s").view("planner")
        assert view.config.budget == 1192
        kept, asked = view.render_report(), view.render_report(300)
    counter = get_counter("o200k_base")
    # Fit to the stored room unless given another; how full it is depends on whether a
    # provisional fold's extraction finished within its bound, so only the bounds are checked.
    assert (kept.budget, asked.budget) == (1192, 300)
    assert counter.messages(asked.messages) <= 300 and counter.messages(kept.messages) <= 1192
