"""The Claude factor calibrated by the upstream's ``count_tokens``: a scripted Anthropic
server on 127.0.0.1 answers it through the proxy's own ``Upstream``; a count that fails,
hangs or says nonsense never fails anything and leaves the estimate in place."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping
from typing import Any

import pytest
from fake_providers import COUNT_TOKENS, FakeProvider, Reply, count_tokens_reply, error_reply

from contextfold.core.claude_tokens import V4_7
from contextfold.core.tokens import get_counter
from contextfold.llm.claude_calibration import KEEP, MARGIN, Calibration, local_tokens
from contextfold.llm.windows import ANSWER_RESERVE, KNOWN
from contextfold.server.proxy_budget import fit, upstream_count
from contextfold.server.proxy_upstream import Upstream

PROSE = "The loader reads the whole file before it parses a row, which is slow on big inputs. "


def body(model: str = "claude-opus-5", repeat: int = 200) -> dict[str, Any]:
    """A Messages request as a client sends it, tools and a tool round included."""
    return {
        "model": model,
        "max_tokens": 1024,
        "stream": True,
        "system": [{"type": "text", "text": "You are a careful engineer."}],
        "tools": [{"name": "read", "description": "read a file", "input_schema": {}}],
        "messages": [
            {"role": "user", "content": PROSE * repeat},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "look at it", "signature": "sig"},
                    {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a.py"}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x = 1"}],
            },
        ],
    }


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def served(*replies: Reply) -> FakeProvider:
    provider = FakeProvider("anthropic")
    provider.routes.add(("POST", COUNT_TOKENS))
    provider.add(*replies)
    return provider


def upstream(provider: FakeProvider) -> Upstream:
    return Upstream(f"{provider.url}/v1", api_key=None, timeout_s=5.0)


async def settle(calibration: Calibration, sent: Mapping[str, Any]) -> float | None:
    task = calibration.observe(sent)
    assert task is not None
    return await task


def test_a_count_sets_the_factor_from_the_same_body_counted_locally() -> None:
    local = local_tokens(body(), get_counter("o200k_base"))
    assert local > 2000

    async def run() -> None:
        with served(count_tokens_reply(round(local * 1.5))) as provider:
            link = upstream(provider)
            calibration = Calibration(upstream_count(link), clock=Clock())
            assert calibration.factor("claude-opus-5") is None
            factor = await settle(calibration, body())
            await link.aclose()
        assert factor == calibration.factor("anthropic/claude-opus-5")
        assert factor == pytest.approx(1.5 * MARGIN, rel=1e-3)
        (request,) = provider.requests
        assert request.path == COUNT_TOKENS
        sent = request.body
        assert set(sent) == {"model", "system", "messages", "tools"}  # no max_tokens, no stream
        assert sent["messages"] == body()["messages"]

    asyncio.run(run())


def test_the_factor_is_counted_again_only_after_refresh_s() -> None:
    clock = Clock()
    counts: list[Mapping[str, Any]] = []

    async def count(sent: Mapping[str, Any]) -> int:
        counts.append(sent)
        return 3 * local_tokens(sent, get_counter("o200k_base"))

    async def run() -> None:
        calibration = Calibration(count, refresh_s=3600, clock=clock)
        await settle(calibration, body())
        clock.now += 3599
        assert calibration.observe(body()) is None
        clock.now += 2
        assert await settle(calibration, body()) == pytest.approx(3 * MARGIN)
        assert calibration.observe(body("gpt-5.5")) is None  # not a Claude model

    asyncio.run(run())
    assert len(counts) == 2


def test_the_factor_is_the_highest_of_the_last_ratios() -> None:
    """One factor serves every conversation of the model: a lower ratio lowers it only
    once the higher one is older than the last ``KEEP`` counts."""
    clock = Clock()
    ratios = iter([1.6, *[1.3] * KEEP])

    async def count(sent: Mapping[str, Any]) -> int:
        return round(next(ratios) * local_tokens(sent, get_counter("o200k_base")))

    async def run() -> list[float | None]:
        calibration = Calibration(count, refresh_s=1, clock=clock)
        factors = []
        for _ in range(KEEP + 1):
            factors.append(await settle(calibration, body()))
            clock.now += 2
        return factors

    factors = asyncio.run(run())
    assert factors[:KEEP] == [pytest.approx(1.6 * MARGIN, rel=1e-3)] * KEEP
    assert factors[KEEP] == pytest.approx(1.3 * MARGIN, rel=1e-3)


@pytest.mark.parametrize(
    "reply",
    [
        error_reply("anthropic", 500),
        error_reply("anthropic", 429),
        Reply(drop=True),
        Reply(body="not json"),
        Reply(body={"tokens": 12}),
        count_tokens_reply(1),  # a ratio no tokenizer gives: not kept
    ],
)
def test_a_failed_or_implausible_count_keeps_the_estimate_and_waits_retry_s(
    reply: Reply, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()

    async def run() -> None:
        with served(reply) as provider:
            link = upstream(provider)
            calibration = Calibration(upstream_count(link), retry_s=600, clock=clock)
            with caplog.at_level(logging.WARNING, logger="contextfold.claude_calibration"):
                assert await settle(calibration, body()) is None
            assert calibration.factor("claude-opus-5") is None
            clock.now += 599
            assert calibration.observe(body()) is None
            clock.now += 2
            assert calibration.observe(body()) is not None  # tried again: the queue is empty
            await asyncio.sleep(0.5)
            await link.aclose()

    asyncio.run(run())
    assert any("claude-opus-5" in r.getMessage() for r in caplog.records)


def test_a_small_body_is_not_counted_and_nothing_runs_without_a_loop() -> None:
    async def count(sent: Mapping[str, Any]) -> int:
        raise AssertionError("a small body is never sent")

    async def run() -> None:
        calibration = Calibration(count, clock=Clock())
        assert await settle(calibration, body(repeat=1)) is None

    asyncio.run(run())
    assert Calibration(count).observe(body()) is None  # no running loop: nothing started


def test_a_hung_count_never_holds_the_call_that_observed_it() -> None:
    async def run() -> None:
        gate = asyncio.Event()

        async def count(sent: Mapping[str, Any]) -> int:
            await gate.wait()
            return 2 * local_tokens(sent, get_counter("o200k_base"))

        calibration = Calibration(count, clock=Clock())
        task = calibration.observe(body())
        assert task is not None and not task.done()
        assert calibration.observe(body()) is None  # one count a model at a time
        gate.set()
        assert await task == pytest.approx(2 * MARGIN)

        hung = Calibration(count, clock=Clock())
        gate.clear()
        task = hung.observe(body())
        assert task is not None
        await asyncio.sleep(0.2)
        await hung.aclose()  # the server stops: the count stops with it
        assert task.cancelled() and hung.factor("claude-opus-5") is None

    asyncio.run(run())


@pytest.mark.parametrize(("ratio", "counted"), [(2.2, "count_tokens"), (1.2, "estimate")])
def test_fit_scales_a_claude_window_by_the_measured_factor_only_above_the_estimate(
    ratio: float, counted: str
) -> None:
    room = KNOWN["claude-opus-5*"].tokens - ANSWER_RESERVE
    request = {"model": "claude-opus-5", "messages": []}
    estimated = fit(None, {}, request)
    assert (estimated.budget, estimated.factor, estimated.counted) == (
        math.floor(room / V4_7.factor),
        V4_7.factor,
        "estimate",
    )
    assert "at 1.85 of its tokens a token (estimate)" in estimated.describe()

    async def count(sent: Mapping[str, Any]) -> int:
        return round(ratio * local_tokens(sent, get_counter("o200k_base")))

    async def run() -> Calibration:
        calibration = Calibration(count, clock=Clock())
        await settle(calibration, body())
        return calibration

    calibration = asyncio.run(run())
    factor = calibration.factor("claude-opus-5")
    assert factor == pytest.approx(ratio * MARGIN, rel=1e-3)
    scaled = fit(None, {}, request, calibration)
    assert scaled.counted == counted
    assert scaled.factor == max(factor, V4_7.factor)
    assert scaled.budget == math.floor(room / scaled.factor) <= estimated.budget
    openai = fit(None, {}, {"model": "gpt-5.5"}, calibration)
    assert (openai.factor, openai.budget) == (None, 1_050_000 - ANSWER_RESERVE)
