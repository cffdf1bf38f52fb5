"""Anthropic cache breakpoints set by the proxy: the official ``anthropic`` SDK as the
client, a real uvicorn server on 127.0.0.1 and a scripted Anthropic upstream on
127.0.0.1 that records what it was sent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from fake_anthropic import anthropic_content_reply
from fake_providers import FakeProvider
from test_proxy_messages import MODEL, TOOLS, served

from contextfold.formats.anthropic_checks import anthropic_faults

EPHEMERAL = {"type": "ephemeral"}
BUDGET = "900"


def marks(body: Any, path: str = "") -> list[str]:
    """Where ``cache_control`` is set in a request body, as paths."""
    found: list[str] = []
    if isinstance(body, dict):
        if "cache_control" in body:
            found.append(path)
        for key, value in body.items():
            found += marks(value, f"{path}.{key}")
    elif isinstance(body, list):
        for i, value in enumerate(body):
            found += marks(value, f"{path}[{i}]")
    return found


def blocks(turn: dict[str, Any]) -> list[dict[str, Any]]:
    content = turn["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def converse(
    url: str, upstream: FakeProvider, turns: int, *, marked: bool = False
) -> list[dict[str, Any]]:
    """``turns`` tool-using turns through the proxy, the budget small enough to fold; the
    bodies the upstream was sent."""
    client = anthropic.Anthropic(
        base_url=url, api_key="unused", max_retries=0, timeout=20,
        default_headers={"X-Contextfold-Session": "s1", "X-Contextfold-Budget": BUDGET},
    )  # fmt: skip
    system: Any = "You read files for the user and answer in one line."
    if marked:
        system = [{"type": "text", "text": system, "cache_control": EPHEMERAL}]
    history: list[dict[str, Any]] = []
    for i in range(turns):
        use = {"type": "tool_use", "id": f"toolu_{i:02}", "name": "read", "input": {"p": f"{i}"}}
        upstream.add(
            anthropic_content_reply([use], stop_reason="tool_use"),
            anthropic_content_reply([{"type": "text", "text": f"file {i} holds line {i}."}]),
        )
        history.append({"role": "user", "content": f"question {i}: what is in file {i}? " * 6})
        for _ in range(2):
            answer = client.messages.create(
                model=MODEL, max_tokens=256, system=system, messages=history, tools=TOOLS
            )
            content = [block.model_dump(exclude_none=True) for block in answer.content]
            history.append({"role": "assistant", "content": content})
            if answer.stop_reason == "tool_use":
                text = f"contents of file {i}: " + "lorem ipsum dolor " * 40
                result = {"type": "tool_result", "tool_use_id": use["id"], "content": text}
                history.append({"role": "user", "content": [result]})
    return [r.body for r in upstream.requests if r.path == "/v1/messages"]


@pytest.fixture
def upstream() -> Iterator[FakeProvider]:
    with FakeProvider("anthropic") as fake:
        yield fake


def test_the_proxy_marks_the_system_prompt_its_folds_and_the_last_two_requests(
    tmp_path: Path, upstream: FakeProvider
) -> None:
    with served(tmp_path, f"anthropic:{upstream.url}/v1") as (_, url):
        bodies = converse(url, upstream, 8)
    folded = 0
    for body in bodies:
        turns = body["messages"]
        found = marks(body)
        assert len(found) <= 4
        assert ".system[0]" in found  # the system prompt, as one marked block
        last = len(turns) - 1
        assert f".messages[{last}].content[{len(blocks(turns[last])) - 1}]" in found
        if len(turns) >= 3:
            assert f".messages[{last - 2}].content[{len(blocks(turns[-3])) - 1}]" in found
        assert list(anthropic_faults(turns, body["system"])) == []
        # The proxy's own turns (folds) end with a mark too, the one before the client's.
        texts = [b.get("text", "") for b in blocks(turns[0]) if b["type"] == "text"]
        own_turn = ("[contextfold", "[Conversation History Summary", "[Folded to fit")
        if any(mark in t for t in texts for mark in own_turn):
            folded += 1
            own = next(i for i, t in enumerate(turns) if t["role"] == "assistant") - 1
            assert any(p.startswith(f".messages[{own}].") for p in found)
    assert folded > 0  # the budget made the proxy fold: its folds were marked


def test_the_marks_say_where_the_next_request_reads_the_last_one_back(
    tmp_path: Path, upstream: FakeProvider
) -> None:
    with served(tmp_path, f"anthropic:{upstream.url}/v1") as (_, url):
        bodies = converse(url, upstream, 2)
    # Within a turn the second request extends the first: its third turn from the end is
    # the first's last turn, marked in both.
    first, second = bodies[0], bodies[1]
    assert second["messages"][: len(first["messages"])] == first["messages"]


def test_a_client_that_set_its_own_marks_gets_none_added(
    tmp_path: Path, upstream: FakeProvider
) -> None:
    with served(tmp_path, f"anthropic:{upstream.url}/v1") as (_, url):
        bodies = converse(url, upstream, 4, marked=True)
    assert all(set(marks(body)) <= {".system[0]"} for body in bodies)  # only the client's own


def test_the_setting_turns_the_marks_off(tmp_path: Path, upstream: FakeProvider) -> None:
    with served(tmp_path, f"anthropic:{upstream.url}/v1", cache_breakpoints=False) as (_, url):
        bodies = converse(url, upstream, 4)
    assert all(marks(body) == [] for body in bodies)
    assert all(isinstance(body["system"], str) for body in bodies)
