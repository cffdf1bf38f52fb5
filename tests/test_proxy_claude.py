"""Claude's tokens through the proxy: the factor calibrated by the Anthropic upstream's
``count_tokens`` sizes the next call's budget, and ``count_tokens`` estimates Claude's
tokens when no upstream answers. A real uvicorn server on 127.0.0.1, the official
``anthropic`` SDK, and a scripted Anthropic upstream (``tests/fake_providers.py``)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import pytest
from fake_anthropic import COUNT_TOKENS, anthropic_reply, count_tokens_reply
from fake_providers import FakeProvider, Request
from fastapi import FastAPI
from server_harness import running

from contextfold.core.claude_tokens import V4_7, claude_counter
from contextfold.core.tokens import get_counter
from contextfold.formats.anthropic_turns import read_request
from contextfold.llm.claude_calibration import MARGIN, local_tokens
from contextfold.llm.windows import KNOWN
from contextfold.server.app import create_app
from contextfold.server.service import Service
from contextfold.server.settings import Settings

MODEL = "claude-opus-5"
RATIO = 2.5
"""Claude's tokens per ``o200k_base`` token, as the scripted ``count_tokens`` counts: above
the estimate's 1.85, so the measured factor is the one used."""
TEXT = "The loader reads the whole file before it parses a row, which is slow on big inputs. "


@dataclass
class Rig:
    app: FastAPI
    service: Service
    url: str
    upstream: FakeProvider

    def client(self) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.url, api_key="k", max_retries=0, timeout=20,
                                   default_headers={"X-Contextfold-Session": "s1"})  # fmt: skip

    def counts(self) -> list[Request]:
        return [r for r in self.upstream.requests if r.path == COUNT_TOKENS]


def counted(request: Request) -> Any:
    """``count_tokens`` as a provider whose tokens are ``RATIO`` of ``o200k_base``'s."""
    return count_tokens_reply(round(RATIO * local_tokens(request.body, get_counter("o200k_base"))))


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    with FakeProvider("anthropic") as upstream:
        upstream.answer("POST", COUNT_TOKENS, counted)
        settings = Settings(database=str(tmp_path / "cf.db"), upstream=f"anthropic:{upstream.url}/v1",
                            auth=False, runner=False, upstream_timeout_s=5.0)  # fmt: skip
        service = Service(settings)
        app = create_app(service)
        try:
            with running(app) as url:
                yield Rig(app, service, url, upstream)
        finally:
            service.close()


def test_a_count_of_the_compacted_body_sizes_the_next_calls_budget(rig: Rig) -> None:
    client = rig.client()
    turns: list[dict[str, Any]] = [{"role": "user", "content": TEXT * 150}]
    room = KNOWN["claude-opus-5*"].tokens - 1024  # the answer's room: max_tokens
    rig.upstream.add(anthropic_reply("Read it.", model=MODEL), anthropic_reply("Yes.", model=MODEL))
    first = client.messages.with_raw_response.create(model=MODEL, max_tokens=1024, messages=turns)
    assert first.headers["X-Contextfold-Budget"] == str(math.floor(room / V4_7.factor))
    # The body sent upstream is counted once, in the background, with the API's version.
    deadline = time.monotonic() + 10
    while rig.app.state.proxy.calibration.factor(MODEL) is None:
        assert time.monotonic() < deadline, "the calibration never counted"
        time.sleep(0.02)
    (count,) = rig.counts()
    assert count.headers["anthropic-version"] == "2023-06-01"
    (sent,) = [r for r in rig.upstream.requests if r.path == "/v1/messages"]
    assert count.body == {k: sent.body[k] for k in ("model", "messages")}
    factor = rig.app.state.proxy.calibration.factor(MODEL)
    assert factor == pytest.approx(RATIO * MARGIN, rel=1e-2)
    # The next call's budget is the window in the measured factor's tokens: smaller.
    turns += [{"role": "assistant", "content": "Read it."}, {"role": "user", "content": "Sure?"}]
    second = client.messages.with_raw_response.create(model=MODEL, max_tokens=1024, messages=turns)
    assert second.headers["X-Contextfold-Budget"] == str(math.floor(room / factor))
    assert second.headers["X-Contextfold-Budget-Source"] == "table"
    assert len(rig.counts()) == 1  # counted again only after refresh_s


def test_count_tokens_estimates_claudes_tokens_without_an_upstream(tmp_path: Path) -> None:
    service = Service(Settings(database=str(tmp_path / "cf.db"), auth=False, runner=False))
    messages: list[Any] = [{"role": "user", "content": TEXT * 10}]
    tools = [{"name": "read", "description": "read a file", "input_schema": {"type": "object"}}]
    try:
        with running(create_app(service)) as url:
            client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0,
                                         default_headers={"X-Contextfold-Session": "s1"})  # fmt: skip
            answer = client.messages.with_raw_response.count_tokens(
                model=MODEL,
                system="Be brief.",
                messages=messages,
                tools=tools,  # type: ignore[arg-type]
            )
    finally:
        service.close()
    assert answer.headers["X-Contextfold-Count-Source"] == "estimate"
    claude = claude_counter(MODEL)
    assert claude is not None
    prompt = read_request("Be brief.", messages)
    expected = claude.messages(prompt) + claude.text(json.dumps(tools, ensure_ascii=False))
    assert answer.parse().input_tokens == expected
    assert expected > get_counter("o200k_base").messages(prompt) * 1.5
