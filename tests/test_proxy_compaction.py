"""The providers' own compaction through the proxy, end to end.

A view folding with ``provider-compaction`` for OpenAI (``/responses/compact``)
or Anthropic (on-demand compaction), a real uvicorn server on 127.0.0.1, the
official SDK of the provider's wire as the client (``/v1/responses``,
``/v1/messages``) running a long tool-using conversation, and the scripted
servers of ``fake_compaction`` as the upstream and as the view's model. The
fold's items reach the upstream verbatim on the wire of the provider that made
them (Anthropic's with its beta header, merged with the client's own), and
never another wire; once the provider refuses them (expired), the call is sent
again plain, succeeds, and the fold falls back for good; a refusal that is not
about the items leaves them in place.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from fake_anthropic import anthropic_content_reply
from fake_compaction import BETA, AnthropicCompaction, OpenAICompaction
from fake_openai import called, openai_reply, responses_reply, responses_stream, said
from fake_providers import FakeProvider, Reply, Request, error_reply
from server_harness import running

from contextfold import View
from contextfold.core.folds import Fold
from contextfold.core.messages import Message, for_model
from contextfold.formats.anthropic_turns import read_request
from contextfold.formats.responses import request_messages
from contextfold.server.app import create_app
from contextfold.server.service import Service
from contextfold.server.settings import Settings
from contextfold.strategies import Pipeline, ProviderCompaction

SYSTEM = "You run build steps with the shell tool."
FALLBACK = {"type": "rolling", "options": {"threshold": 3, "retain_recent": 2}}
OPENAI_TOOLS = [{"type": "function", "name": "shell", "parameters": {"type": "object"}}]
ANTHROPIC_TOOLS = [{"name": "shell", "description": "run a command",
                    "input_schema": {"type": "object"}}]  # fmt: skip
CLIENT_BETA = "token-efficient-tools-2025-02-19"
KEY = "sk-test-0123456789abcdef"
MODELS = {"openai": "gpt-5.1", "anthropic": "claude-sonnet-4-6"}
SPECS = {"openai": "openai:gpt-5.1", "anthropic": "anthropic:claude-sonnet-4-6"}


def output(i: int) -> str:
    return f"step{i}: compiled {40 * i} files in build/step{i}, 0 errors\n" * 20


class Agent:
    """The conversation's model: a shell call for a user's turn, a word once it has run."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)

    def responses(self, request: Request) -> Reply:
        n = next(self._ids)
        if request.body["input"][-1].get("type") == "function_call_output":
            out = [said("Step built cleanly.", f"msg_{n}")]
        else:
            out = [called("shell", json.dumps({"cmd": f"make {n}"}), f"call_{n}")]
        make = responses_stream if request.body.get("stream") else responses_reply
        return make(out, response_id=f"resp_{n}")

    def messages(self, request: Request) -> Reply:
        n = next(self._ids)
        last = request.body["messages"][-1]["content"]
        ran = isinstance(last, list) and any(b.get("type") == "tool_result" for b in last)
        content = (
            [{"type": "text", "text": "Step built cleanly."}]
            if ran
            else [
                {
                    "type": "tool_use",
                    "id": f"toolu_{n}",
                    "name": "shell",
                    "input": {"cmd": f"make {n}"},
                }
            ]
        )
        stop = "end_turn" if ran else "tool_use"
        return anthropic_content_reply(
            content, stop_reason=stop, stream=bool(request.body.get("stream"))
        )


@dataclass
class Rig:
    provider: str
    service: Service
    url: str
    server: FakeProvider
    """The provider's scripted server: the wire's upstream and the view's model."""
    fake: OpenAICompaction | AnthropicCompaction
    chat: FakeProvider
    """The Chat Completions upstream."""
    history: list[Any]
    """The client's conversation, as its SDK sends it."""

    def view(self) -> View:
        return self.service.memory.existing_session("local/s1").view("default")

    def sent(self) -> list[Request]:
        path = "/v1/responses" if self.provider == "openai" else "/v1/messages"
        return [r for r in self.server.requests if r.path == path and r.body.get("tools")]

    def log(self) -> list[Message]:
        return [for_model(m.message) for m in self.service.memory.store.messages("local/s1")]

    def read(self) -> list[Message]:
        """The client's history as log messages."""
        dumped = json.loads(json.dumps([i if isinstance(i, dict) else i.model_dump(
            exclude_unset=True) for i in self.history]))  # fmt: skip
        if self.provider == "openai":
            said = request_messages({"instructions": SYSTEM, "input": dumped})
        else:
            said = read_request(SYSTEM, dumped)
        return [for_model(m) for m in said]

    def ask(self, *, stream: bool = False) -> None:
        """One call of the provider's wire with the history as it is; the answer joins it."""
        headers = {"X-Contextfold-Session": "s1"}
        if self.provider == "openai":
            client = openai.OpenAI(base_url=f"{self.url}/v1", api_key="k", max_retries=0,
                                   timeout=20, default_headers=headers)  # fmt: skip
            body: dict[str, Any] = {"model": MODELS["openai"], "instructions": SYSTEM,
                                    "input": self.history, "tools": OPENAI_TOOLS}  # fmt: skip
            if stream:
                events = list(client.responses.create(stream=True, **body))
                assert events[-1].type == "response.completed"
                self.history += events[-1].response.output
            else:
                self.history += client.responses.create(**body).output
            return
        claude = anthropic.Anthropic(base_url=self.url, api_key="k", max_retries=0, timeout=20,
                                     default_headers={**headers, "anthropic-beta": CLIENT_BETA})  # fmt: skip
        args: dict[str, Any] = {"model": MODELS["anthropic"], "max_tokens": 1024,
                                "system": SYSTEM, "messages": self.history,
                                "tools": ANTHROPIC_TOOLS}  # fmt: skip
        if stream:
            with claude.messages.stream(**args) as events:
                answer = events.get_final_message()
        else:
            answer = claude.messages.create(**args)
        blocks = [block.model_dump(exclude_none=True) for block in answer.content]
        self.history.append({"role": "assistant", "content": blocks})

    def round(self, i: int, *, stream: bool = False) -> None:
        """A user's turn: the model calls the shell, the result goes back, the model answers."""
        self.history.append({"role": "user", "content": f"Run build step {i}, please."})
        self.ask(stream=stream)
        if self.provider == "openai":
            last = self.history[-1]
            self.history.append(
                {"type": "function_call_output", "call_id": last.call_id, "output": output(i)}
            )
        else:
            use = self.history[-1]["content"][-1]
            result = {"type": "tool_result", "tool_use_id": use["id"], "content": output(i)}
            self.history.append({"role": "user", "content": [result]})
        self.ask(stream=stream)

    def compacted(self) -> Fold:
        """Compact the view now: its one fold, carrying the provider's items."""
        (fold,) = self.view().compact().folds
        assert fold.data["provider"]["items"] and not fold.data["provider"]["refused"]
        return fold


@pytest.fixture(params=["openai", "anthropic"])
def rig(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Rig]:
    provider: str = request.param
    with FakeProvider(provider) as server, FakeProvider("openai") as chat:  # type: ignore[arg-type]
        agent = Agent()
        fake: OpenAICompaction | AnthropicCompaction
        if provider == "openai":
            fake = OpenAICompaction(server)
            fake.agent = agent.responses
            chat = server  # its Chat Completions answer the own summary
            upstreams: tuple[str, ...] = (f"openai-compatible:{server.url}",)
            monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        else:
            fake = AnthropicCompaction(server)
            fake.agent = agent.messages
            upstreams = (f"anthropic:{server.url}/v1", f"openai-compatible:{chat.url}")
            monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        # Also the upstream's key, masked in what the proxy passes on: no word it could be in.
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        settings = Settings(database=str(tmp_path / "cf.db"), upstream=upstreams, auth=False,
                            runner=False, upstream_timeout_s=5.0)  # fmt: skip
        service = Service(settings)
        strategy = ProviderCompaction(provider, fallback=FALLBACK)  # type: ignore[arg-type]
        service.memory.session("local/s1").view(
            "default", pipeline=Pipeline([strategy]), model=SPECS[provider], budget=50_000
        )
        try:
            with running(create_app(service)) as url:
                yield Rig(provider, service, url, server, fake, chat, [])
        finally:
            service.close()


def carries(rig: Rig, request: Request, items: list[Any]) -> bool:
    """Whether a request upstream carries the fold's ``items`` as the provider made them."""
    if rig.provider == "openai":
        sent = request.body["input"]
        return any(sent[i : i + len(items)] == items for i in range(len(sent)))
    first = request.body["messages"][0]
    betas = request.headers.get("anthropic-beta", "").split(",")
    assert first["role"] != "assistant" or BETA in betas
    return bool(first == {"role": "assistant", "content": items})


def test_the_fold_reaches_its_provider_verbatim_and_no_other_wire(rig: Rig) -> None:
    for i in range(1, 6):
        rig.round(i)
    fold = rig.compacted()
    items = fold.data["provider"]["items"]
    before = len(rig.sent())
    for i in range(6, 8):
        rig.round(i)
    after = rig.sent()[before:]
    assert len(after) == 4 and all(carries(rig, r, items) for r in after)
    assert rig.fake.refusals == 0
    if rig.provider == "anthropic":
        # The client's own beta goes along: the compaction beta is added to it.
        assert after[-1].headers["anthropic-beta"] == f"{CLIENT_BETA},{BETA}"
    # The raw range stays in the log: every message once, in order, answers included.
    assert rig.log() == rig.read()
    # Chat Completions renders for no provider: the fold goes as its plain text.
    chat = openai.OpenAI(base_url=f"{rig.url}/v1", api_key="k", max_retries=0, timeout=20,
                         default_headers={"X-Contextfold-Session": "s1"})  # fmt: skip
    if rig.provider == "anthropic":
        rig.chat.add(openai_reply("Done."))
    conversation = [*rig.log(), {"role": "user", "content": "Anything left?"}]
    chat.chat.completions.create(model="gpt-4o", messages=conversation)  # type: ignore[arg-type]
    (plain,) = [r for r in rig.chat.requests if r.path == "/v1/chat/completions" and
                r.body.get("model") == "gpt-4o"]  # fmt: skip
    text = json.dumps(plain.body)
    assert all("meta" not in m for m in plain.body["messages"])
    assert all(json.dumps(item) not in text for item in items)
    # The fold's own summary, followed by the range it names (``[folded: seq A-B]``).
    label = f"\n[folded: seq {fold.start}-{fold.end}]"
    assert fold.text + label in [m.get("content") for m in plain.body["messages"]]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_expired_items_are_sent_again_plain_and_the_fold_falls_back(rig: Rig, stream: bool) -> None:
    for i in range(1, 6):
        rig.round(i)
    fold = rig.compacted()
    items = fold.data["provider"]["items"]
    rig.fake.expire()
    before = len(rig.sent())
    rig.round(6, stream=stream)
    tried = rig.sent()[before:]
    # Refused with the items, taken plain; then plain from the start: the client saw two
    # answers, each once.
    assert [carries(rig, r, items) for r in tried] == [True, False, False]
    assert rig.fake.refusals == 1
    assert rig.log() == rig.read()
    (active,) = rig.view().folds()
    refused = active.data["provider"]["refused"]
    assert active.id != fold.id and refused.startswith(f"{rig.server.protocol} answered HTTP 400")
    if rig.provider == "openai":
        assert refused == "openai answered HTTP 400 (invalid_request_error)"
    rig.round(7, stream=stream)
    assert not any(carries(rig, r, items) for r in rig.sent()[before + 3 :])


def test_a_refusal_the_plain_prompt_gets_too_leaves_the_items(rig: Rig) -> None:
    for i in range(1, 6):
        rig.round(i)
    fold = rig.compacted()
    items = fold.data["provider"]["items"]
    agent = rig.fake.agent
    rig.fake.agent = lambda _: error_reply(rig.server.protocol, 400, "temperature is too high")
    before = len(rig.sent())
    rig.history.append({"role": "user", "content": "Run build step 6, please."})
    failure = openai.BadRequestError if rig.provider == "openai" else anthropic.BadRequestError
    with pytest.raises(failure):
        rig.ask()
    # Sent with the items, then plain; both refused: the items were not the cause.
    assert [carries(rig, r, items) for r in rig.sent()[before:]] == [True, False]
    assert [f.id for f in rig.view().folds()] == [fold.id]
    rig.fake.agent = agent
    rig.ask()
    assert carries(rig, rig.sent()[-1], items)
