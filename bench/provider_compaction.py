"""The providers' own compaction as a fold, against scripted servers: tokens, calls, fallbacks.

tau-bench airline conversations (tool-using agent runs) are replayed message by
message into a view folding with ``ProviderCompaction`` (fallback: rolling,
three rounds, two kept), once with OpenAI's ``/responses/compact`` and once with
Anthropic's on-demand compaction. Both run on the scripted servers of the test
suite (``tests/fake_compaction.py``) on 127.0.0.1: the summaries are the
scripted ones, so the token figures say what the fold costs and saves with a
summary of that size, not what a real provider would write.

At every user turn the view compacts, and its prompt is rendered for the
provider and sent to it (the items translated verbatim); the provider's
refusals are counted (goal 0). One conversation in five is scripted to get no
compaction (OpenAI: a 400 for the model; Anthropic: ``stop_reason``
``max_tokens``, no block), to count the folds that fall back to the view's own
summary alone.

At the end each server forgets the items it issued, as after an expiry: the
prompt carrying them is refused, the caller marks the fold
(``View.refuse_provider_items``) and the next prompt, the view's own summary,
is accepted (goal: every one).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import httpx2
from _common import ROOT, conversations, parse_args, report

sys.path.insert(0, str(ROOT / "tests"))

from fake_compaction import BETA, AnthropicCompaction, OpenAICompaction
from fake_providers import FakeProvider

from contextfold import Memory, View
from contextfold.core.provider_items import payload_of
from contextfold.formats.provider_compaction import anthropic_turns, response_items
from contextfold.llm import get_model
from contextfold.strategies import Pipeline, ProviderCompaction

FALLBACK = {"type": "rolling", "options": {"threshold": 3, "retain_recent": 2}}
MODELS = {"openai": "gpt-5.1", "anthropic": "claude-sonnet-4-6"}
FAIL_EVERY = 5
SENT = "x-bench-prompt"
"""Marks the prompts this benchmark sends, apart from the view's own summary calls."""


def send(server: FakeProvider, provider: str, prompt: list[dict[str, Any]]) -> int:
    """The status the scripted provider answers ``prompt`` with, translated for it."""
    if provider == "openai":
        body: dict[str, Any] = {"model": MODELS[provider], "input": response_items(prompt)}
        return httpx2.post(f"{server.url}/responses", json=body, timeout=10).status_code
    system, turns = anthropic_turns(prompt)
    body = {"model": MODELS[provider], "max_tokens": 64, "messages": turns}
    if system:
        body["system"] = system
    headers = {"anthropic-beta": BETA, SENT: "1"}
    return httpx2.post(
        f"{server.url}/v1/messages", json=body, headers=headers, timeout=10
    ).status_code


def replay(provider: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    figures = {
        "turns": 0,
        "prompts_refused": 0,
        "folds": 0,
        "fallback_folds": 0,
        "log_tokens": 0,
        "prompt_tokens_plain": 0,
        "prompt_tokens_for_provider": 0,
        "expired_refused": 0,
        "recovered": 0,
    }
    with FakeProvider(provider) as server:  # type: ignore[arg-type]
        fake = AnthropicCompaction(server) if provider == "anthropic" else OpenAICompaction(server)
        llm = get_model(f"{provider}:{MODELS[provider]}", base_url=server.url, api_key="k")
        views: list[View] = []
        for n, row in enumerate(rows):
            failing = n % FAIL_EVERY == FAIL_EVERY - 1
            if isinstance(fake, OpenAICompaction):
                fake.unsupported = failing
            else:
                fake.stop_reason = "max_tokens" if failing else "compaction"
            messages = row["messages"]
            session = Memory().session(row["id"], system=messages[0]["content"])
            strategy = ProviderCompaction(provider, fallback=FALLBACK)  # type: ignore[arg-type]
            view = session.view("v", pipeline=Pipeline([strategy]), llm=llm)
            for message in messages[1:]:
                session.append(message)
                if message["role"] != "user":
                    continue
                figures["turns"] += 1
                view.compact()
                prompt = view.render_report(for_provider=provider)
                figures["prompts_refused"] += send(server, provider, prompt.messages) != 200
            figures["log_tokens"] += session.info().tokens
            figures["prompt_tokens_plain"] += view.render_report().tokens
            figures["prompt_tokens_for_provider"] += view.render_report(
                for_provider=provider
            ).tokens
            folds = view.folds(include_superseded=True)
            figures["folds"] += len(folds)
            figures["fallback_folds"] += sum(
                1 for f in folds if not (payload_of(f) or {}).get("items")
            )
            views.append(view)
        fake.expire()
        for view in views:
            carrying = [f for f in view.folds() if (payload_of(f) or {}).get("items")]
            if not carrying or send(server, provider, view.render(for_provider=provider)) == 200:
                continue
            figures["expired_refused"] += 1
            for fold in carrying:
                view.refuse_provider_items(fold.id, "the provider refused its items")
            figures["recovered"] += (
                send(server, provider, view.render(for_provider=provider)) == 200
            )
        figures["compaction_calls"] = sum(
            1
            for r in server.requests
            if r.path == "/v1/responses/compact" or "compaction" in (r.body or {})
        )
        figures["own_summary_calls"] = sum(
            1
            for r in server.requests
            if r.path in ("/v1/chat/completions", "/v1/messages")
            and SENT not in r.headers
            and "compaction" not in (r.body or {})
        )
    return figures


def main() -> None:
    args = parse_args(__doc__ or "")
    rows = list(conversations("taubench_airline_dev", 3 if args.quick else 10))
    out: dict[str, Any] = {"conversations": len(rows), "scripted": True}
    began = time.perf_counter()
    for provider in ("openai", "anthropic"):
        for key, value in replay(provider, rows).items():
            out[f"{provider}_{key}"] = value
    out["seconds"] = round(time.perf_counter() - began, 1)
    report(out, args.json)


if __name__ == "__main__":
    main()
