"""Tool definitions take their part of the window: a request's ``tools`` (Chat
Completions, Responses, Messages) go to the model on every call, so the budget the proxy
renders to from the model's window is less what they take; an explicit budget is not.
A real uvicorn server on 127.0.0.1 and scripted upstreams of both kinds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_anthropic import anthropic_reply
from fake_openai import openai_reply, responses_reply, said
from fake_providers import FakeProvider
from server_harness import running

from contextfold.core.tokens import get_counter
from contextfold.llm.windows import check_windows, room
from contextfold.server.app import create_app
from contextfold.server.service import Service
from contextfold.server.settings import Settings

SCHEMA = {"type": "object", "properties": {f"arg{i}": {"type": "string",
          "description": f"the {i}th argument of the tool, read as a path"} for i in range(30)}}  # fmt: skip
TOOLS = {
    "chat_completions": [{"type": "function", "function": {"name": f"tool{i}",
                          "description": "reads files", "parameters": SCHEMA}} for i in range(4)],
    "responses": [{"type": "function", "name": f"tool{i}", "description": "reads files",
                   "parameters": SCHEMA} for i in range(4)],
    "messages": [{"name": f"tool{i}", "description": "reads files", "input_schema": SCHEMA}
                 for i in range(4)],
}  # fmt: skip
PATHS = {"chat_completions": "/v1/chat/completions", "responses": "/v1/responses",
         "messages": "/v1/messages"}  # fmt: skip
MODELS = {"chat_completions": "gpt-4o", "responses": "gpt-5", "messages": "claude-opus-5"}


def tokens(tools: list[dict[str, Any]]) -> int:
    return get_counter("o200k_base").text(json.dumps(tools, ensure_ascii=False))


@dataclass
class Rig:
    url: str
    service: Service
    openai: FakeProvider
    anthropic: FakeProvider

    def call(self, wire: str, body: dict[str, Any], session: str = "s1", **headers: str) -> Any:
        if wire == "messages":
            self.anthropic.add(anthropic_reply("Done."))
        elif wire == "responses":
            self.openai.add(responses_reply([said("Done.")], response_id=f"resp_{session}"))
        else:
            self.openai.add(openai_reply("Done."))
        answer = httpx.post(self.url + PATHS[wire], json={"model": MODELS[wire], **body},
                            headers={"X-Contextfold-Session": session, **headers}, timeout=20)  # fmt: skip
        return answer

    def sent(self, wire: str) -> dict[str, Any]:
        server = self.anthropic if wire == "messages" else self.openai
        body: dict[str, Any] = [r for r in server.requests if r.path == PATHS[wire]][-1].body
        return body


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    with FakeProvider("openai") as oai, FakeProvider("anthropic") as claude:
        oai.routes.add(("POST", "/v1/responses"))
        upstreams = (f"openai-compatible:{oai.url}", f"anthropic:{claude.url}/v1")
        windows = check_windows({"tiny": 3_000}, "test")
        settings = Settings(database=str(tmp_path / "cf.db"), upstream=upstreams, auth=False,
                            runner=False, model_windows=windows)  # fmt: skip
        service = Service(settings)
        try:
            with running(create_app(service)) as url:
                yield Rig(url, service, oai, claude)
        finally:
            service.close()


def conversation(wire: str, text: str = "Which files changed?") -> dict[str, Any]:
    if wire == "responses":
        return {"input": [{"role": "user", "content": text}], "tools": TOOLS[wire]}
    if wire == "messages":
        return {"max_tokens": 1024, "messages": [{"role": "user", "content": text}],
                "tools": TOOLS[wire]}  # fmt: skip
    return {"messages": [{"role": "user", "content": text}], "tools": TOOLS[wire]}


@pytest.mark.parametrize("wire", ["chat_completions", "responses", "messages"])
def test_the_tools_are_taken_off_the_window_derived_budget(rig: Rig, wire: str) -> None:
    taken = tokens(TOOLS[wire])
    assert taken > 1000
    answer = rig.call(wire, conversation(wire))
    assert answer.status_code == 200, answer.text
    limit = 1024 if wire == "messages" else None
    found = room(MODELS[wire], answer=limit)
    assert found is not None
    assert answer.headers["X-Contextfold-Budget"] == str(found.budget - taken)
    assert answer.headers["X-Contextfold-Budget-Source"] == "table"
    assert answer.headers["X-Contextfold-Budget-Tools"] == str(taken)
    assert rig.sent(wire)["tools"] == TOOLS[wire]  # sent on, unchanged
    # The view keeps the room before the tools: the next request may carry others.
    view = rig.service.memory.existing_session("local/s1").view("default")
    assert view.config.budget == found.budget
    # No tools, nothing taken; an explicit budget is the caller's, tools or not.
    bare = {k: v for k, v in conversation(wire, "Another?").items() if k != "tools"}
    answer = rig.call(wire, bare, session="s2")
    assert answer.headers["X-Contextfold-Budget"] == str(found.budget)
    assert answer.headers["X-Contextfold-Budget-Tools"] == "0"
    answer = rig.call(wire, conversation(wire), session="s3", **{"X-Contextfold-Budget": "5000"})
    assert answer.headers["X-Contextfold-Budget"] == "5000"
    assert answer.headers["X-Contextfold-Budget-Tools"] == "0"


def test_a_conversation_is_rendered_to_the_room_the_tools_leave(rig: Rig) -> None:
    tools = TOOLS["chat_completions"][:2]
    taken = tokens(tools)
    messages = [{"role": "user" if i % 2 == 0 else "assistant",
                 "content": f"Step {i}: " + "check the build and the tests again. " * 12}
                for i in range(9)]  # fmt: skip
    counter = get_counter("o200k_base")
    found = room("tiny", answer=None, windows=rig.service.settings.model_windows)
    assert found is not None and counter.messages(messages) < found.budget  # fits without tools
    answer = rig.call("chat_completions", {"model": "tiny", "messages": messages, "tools": tools})
    assert answer.status_code == 200, answer.text
    budget = found.budget - taken
    assert answer.headers["X-Contextfold-Budget"] == str(budget)
    sent = rig.sent("chat_completions")["messages"]
    assert counter.messages(sent) <= budget < counter.messages(messages)


def test_tools_that_fill_the_window_are_refused_naming_tools(rig: Rig) -> None:
    many = TOOLS["chat_completions"] * 3
    answer = rig.call("chat_completions", {"model": "tiny", "messages": [
        {"role": "user", "content": "hi"}], "tools": many})  # fmt: skip
    assert answer.status_code == 422
    assert answer.json()["error"]["field"] == "tools"
    assert [r for r in rig.openai.requests if r.path == PATHS["chat_completions"]] == []
