"""The providers' own compaction stored as a fold: asked for, kept, rendered to whom.

Each test runs the real SDK against a scripted server on 127.0.0.1 that
implements the endpoint as its provider documents it (``fake_compaction``):
Anthropic's on-demand compaction, OpenAI's ``/responses/compact``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fake_compaction import BETA, OWN_SUMMARY, AnthropicCompaction, OpenAICompaction
from fake_providers import FakeProvider

from contextfold import Memory, Session, View
from contextfold.core.errors import InvalidInput
from contextfold.core.folds import Fold
from contextfold.core.provider_items import (
    carried_folds,
    folds_for,
    for_target,
    provider_items,
    refused_fold,
)
from contextfold.formats.provider_compaction import anthropic_turns
from contextfold.formats.responses import write_items
from contextfold.llm import get_model
from contextfold.strategies import Pipeline, ProviderCompaction, RollingCompactor

SYSTEM = "You run build steps with the shell tool."
FALLBACK = {"type": "rolling", "options": {"threshold": 3, "retain_recent": 2}}


def tool_round(i: int) -> list[dict[str, Any]]:
    call = {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": "shell", "arguments": json.dumps({"cmd": f"make step{i}"})},
    }
    output = f"step{i}: compiled {40 * i} files in build/step{i}, 0 errors\n" * 20
    return [
        {"role": "user", "content": f"Run build step {i}, please."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": output},
        {"role": "assistant", "content": f"Step {i} built cleanly."},
    ]


def conversation(memory: Memory, rounds: int = 8) -> Session:
    session = memory.session("s", system=SYSTEM)
    for i in range(1, rounds + 1):
        session.extend(tool_round(i))
    return session


@pytest.fixture
def openai_server() -> Iterator[tuple[FakeProvider, OpenAICompaction]]:
    with FakeProvider("openai") as server:
        yield server, OpenAICompaction(server)


@pytest.fixture
def anthropic_server() -> Iterator[tuple[FakeProvider, AnthropicCompaction]]:
    with FakeProvider("anthropic") as server:
        yield server, AnthropicCompaction(server)


def folded_view(
    session: Session, provider: str, server: FakeProvider, recall: bool = False, **options: Any
) -> View:
    """A view folding with ``provider``'s compaction, its model on ``server``'s protocol."""
    spec = "openai:gpt-5.1" if server.protocol == "openai" else "anthropic:claude-sonnet-4-6"
    llm = get_model(spec, base_url=server.url, api_key="k", timeout=5)
    strategy = ProviderCompaction(provider, fallback=FALLBACK, **options)  # type: ignore[arg-type]
    return session.view("v", pipeline=Pipeline([strategy]), llm=llm, recall=recall)


def send(server: FakeProvider, prompt: list[dict[str, Any]]) -> str | None:
    """The provider's refusal of ``prompt`` (None: taken), sent through its official SDK
    as a wire translator sends it: Responses input items, or Messages with the block."""
    if server.protocol == "openai":
        import openai

        oai = openai.OpenAI(base_url=server.url, api_key="k", max_retries=0)
        try:
            items: Any = write_items(prompt)
            oai.responses.create(model="gpt-5.1", input=items)
        except openai.APIStatusError as exc:
            return f"{exc.status_code} {exc.message}"
        return None
    import anthropic

    claude = anthropic.Anthropic(base_url=server.url, api_key="k", max_retries=0)
    system, turns = anthropic_turns(prompt)
    try:
        claude.beta.messages.create(
            model="claude-sonnet-4-6",
            max_tokens=64,
            messages=turns,  # type: ignore[arg-type]
            betas=[BETA],
            **({"system": system} if system else {}),
        )
    except anthropic.APIStatusError as exc:
        return f"{exc.status_code} {exc.message}"
    return None


def test_openai_compacts_a_tool_conversation_into_a_fold_with_its_window_verbatim(
    openai_server: tuple[FakeProvider, OpenAICompaction],
) -> None:
    server, fake = openai_server
    session = conversation(Memory())
    view = folded_view(session, "openai", server)
    report = view.compact()
    (fold,) = report.folds
    assert fake.compactions == 1
    (sent,) = [r for r in server.requests if r.path == "/v1/responses/compact"]
    assert sent.body["model"] == "gpt-5.1"
    # The system prompt goes as instructions, the API's place for it.
    assert sent.body["instructions"] == SYSTEM
    # A message item may leave out its type (the API's easy input message).
    kinds = [i.get("type", "message") for i in sent.body["input"]]
    assert kinds[0] == "message" and sent.body["input"][0]["role"] == "user"
    assert "function_call" in kinds and "function_call_output" in kinds
    answer = fake.issued
    payload = fold.data["provider"]
    assert payload["name"] == "openai" and payload["model"] == "gpt-5.1"
    assert payload["items"][-1]["type"] == "compaction"
    assert payload["items"][-1]["encrypted_content"] in answer
    assert payload["summary"] is None and payload["refused"] is None
    # The items are opaque: the plain messages are the view's own summary.
    assert OWN_SUMMARY in fold.text and "fallback" not in fold.data
    # The compaction item counts as the summary written (output less reasoning), the
    # retained user messages as their text.
    retained = [i for i in payload["items"] if i["type"] == "message"]
    assert [i["role"] for i in retained] == ["user"] * 6
    assert payload["tokens"] > 300 - 180
    # Nothing logged is lost: the raw range is still the log.
    assert len(session.history()) == 1 + 8 * 4


def test_the_items_render_only_for_their_provider_and_their_cost_is_counted(
    openai_server: tuple[FakeProvider, OpenAICompaction],
) -> None:
    server, _ = openai_server
    session = conversation(Memory())
    view = folded_view(session, "openai", server)
    (fold,) = view.compact().folds
    payload = fold.data["provider"]
    plain = view.render_report()
    mine = view.render_report(for_provider="openai")
    other = view.render_report(for_provider="anthropic")
    assert plain.messages == other.messages
    assert all("meta" not in m for m in plain.messages)
    carried = [m for m in mine.messages if "meta" in m]
    assert len(carried) == 1 and provider_items(carried[0], "openai") == payload["items"]
    assert carried[0]["content"] == fold.text  # a translator that ignores meta sends text
    assert mine.tokens - plain.tokens == payload["tokens"] - fold.tokens_after
    # The budget holds what is rendered: the items' cost, not the plain text's.
    tight = view.render_report(mine.tokens - 1, for_provider="openai")
    assert tight.tokens <= mine.tokens - 1 and not tight.whole
    # The Responses translator sends the window verbatim, and the provider takes it.
    items = write_items(mine.messages)
    assert items[1 : 1 + len(payload["items"])] == payload["items"]
    assert send(server, mine.messages) is None


def test_recall_still_finds_the_folded_range_in_the_log(
    openai_server: tuple[FakeProvider, OpenAICompaction],
) -> None:
    server, _ = openai_server
    session = conversation(Memory())
    view = folded_view(session, "openai", server, recall=True)
    (fold,) = view.compact().folds
    report = view.render_report(query="build/step3 compiled files", for_provider="openai")
    assert report.recalled and all(fold.start <= seq <= fold.end for seq in report.recalled)
    assert any("build/step3" in str(m.get("content")) for m in report.messages)


def test_openai_compacts_again_from_its_own_window(
    openai_server: tuple[FakeProvider, OpenAICompaction],
) -> None:
    server, fake = openai_server
    session = conversation(Memory())
    view = folded_view(session, "openai", server)
    (first,) = view.compact().folds
    for i in range(9, 13):
        session.extend(tool_round(i))
    (second,) = view.compact().folds
    assert fake.compactions == 2 and second.start == first.start and second.end > first.end
    again = [r for r in server.requests if r.path == "/v1/responses/compact"][-1]
    window = first.data["provider"]["items"]
    assert again.body["input"][: len(window)] == window
    assert again.body["instructions"] == SYSTEM
    mine = view.render(for_provider="openai")
    assert carried_folds(mine) == [second.id] and mine[1]["role"] == "assistant"


def test_a_refused_item_falls_back_to_the_views_own_summary(
    openai_server: tuple[FakeProvider, OpenAICompaction],
) -> None:
    server, fake = openai_server
    session = conversation(Memory())
    view = folded_view(session, "openai", server)
    (fold,) = view.compact().folds
    fake.expire()
    refused = send(server, view.render(for_provider="openai"))
    assert refused is not None and refused.startswith("400")
    assert carried_folds(view.render(for_provider="openai")) == [fold.id]
    new = view.refuse_provider_items(fold.id, refused)
    assert carried_folds(view.render(for_provider="openai")) == []
    assert (new.start, new.end) == (fold.start, fold.end) and new.id != fold.id
    assert "encrypted content could not be verified" in new.data["provider"]["refused"]
    assert new.data["provider"]["items"] == fold.data["provider"]["items"]  # kept for audit
    again = view.render(for_provider="openai")
    assert again == view.render() and all("meta" not in m for m in again)
    assert send(server, again) is None
    superseded = [f for f in view.folds(include_superseded=True) if f.id == fold.id]
    assert superseded[0].superseded_by == new.id
    with pytest.raises(InvalidInput) as caught:
        view.refuse_provider_items(new.id, "again")
    assert caught.value.field == "fold_id"


def test_anthropic_keeps_its_signed_block_and_its_readable_summary_as_text(
    anthropic_server: tuple[FakeProvider, AnthropicCompaction],
) -> None:
    server, fake = anthropic_server
    session = conversation(Memory())
    view = folded_view(session, "anthropic", server, instructions="Keep file paths.")
    (fold,) = view.compact().folds
    (sent,) = [r for r in server.requests if r.body and "compaction" in r.body]
    assert BETA in sent.headers["anthropic-beta"]
    assert sent.body["compaction"] == {"type": "summarize", "instructions": "Keep file paths."}
    assert sent.body["system"] == SYSTEM and "context_management" not in sent.body
    blocks = [b["type"] for t in sent.body["messages"] for b in t["content"]]
    assert "tool_use" in blocks and "tool_result" in blocks
    (block,) = fold.data["provider"]["items"]
    assert block["type"] == "compaction" and block["signature"] in fake.signatures
    # Readable: the plain messages are the provider's summary; the own one is kept apart.
    assert fold.text == block["content"] and fold.text.startswith("Summary of the conversation")
    assert OWN_SUMMARY in fold.data["fallback"]["messages"][0]["content"]
    mine = view.render(for_provider="anthropic")
    system, turns = anthropic_turns(mine)
    assert turns[0] == {"role": "assistant", "content": [block]}
    assert system == SYSTEM and send(server, mine) is None
    for target in (None, "openai"):
        shown = view.render(for_provider=target)
        label = f"[folded: seq {fold.start}-{fold.end}]"
        assert all("meta" not in m for m in shown)
        assert shown[1]["content"] == f"{fold.text}\n{label}"


def test_anthropic_refusal_and_compacting_again_from_the_block(
    anthropic_server: tuple[FakeProvider, AnthropicCompaction],
) -> None:
    server, fake = anthropic_server
    session = conversation(Memory())
    view = folded_view(session, "anthropic", server)
    (first,) = view.compact().folds
    for i in range(9, 13):
        session.extend(tool_round(i))
    (second,) = view.compact().folds
    resent = [r for r in server.requests if r.body and "compaction" in r.body][-1]
    assert resent.body["messages"][0]["content"] == first.data["provider"]["items"]
    assert second.start == first.start and second.end > first.end
    fake.expire()
    refused = send(server, view.render(for_provider="anthropic"))
    assert refused is not None and "compaction_signature_invalid" in refused
    new = view.refuse_provider_items(second.id, refused)
    # Refused: every target gets the view's own summary of the same range.
    assert new.messages == tuple(second.data["fallback"]["messages"])
    assert "fallback" not in new.data
    shown = view.render(for_provider="anthropic")
    assert shown == view.render() and OWN_SUMMARY in shown[1]["content"]
    assert send(server, shown) is None


def test_a_model_that_cannot_compact_for_the_provider_leaves_the_own_summary(
    openai_server: tuple[FakeProvider, OpenAICompaction],
) -> None:
    server, fake = openai_server
    session = conversation(Memory())
    view = folded_view(session, "anthropic", server)  # an OpenAI model asked for Anthropic's
    (fold,) = view.compact().folds
    assert fake.compactions == 0
    assert (
        fold.data["provider"]["items"] == [] and "cannot compact" in fold.data["provider"]["error"]
    )
    assert view.render(for_provider="anthropic") == view.render()


def test_a_call_the_log_never_answered_is_answered_in_the_compaction_request(
    anthropic_server: tuple[FakeProvider, AnthropicCompaction],
) -> None:
    server, fake = anthropic_server
    session = conversation(Memory(), rounds=2)
    lost = {"id": "call_lost", "type": "function", "function": {"name": "shell", "arguments": "{}"}}
    session.extend(
        [
            {"role": "user", "content": "Run the flaky step."},
            {"role": "assistant", "content": None, "tool_calls": [lost]},
            {"role": "user", "content": "Never mind, go on."},
            {"role": "assistant", "content": "Going on."},
        ]
    )
    for i in range(3, 9):
        session.extend(tool_round(i))
    view = folded_view(session, "anthropic", server)
    (fold,) = view.compact().folds
    assert fold.data["provider"]["items"] and fake.compactions == 1
    (sent,) = [r for r in server.requests if r.body and "compaction" in r.body]
    results = [
        b for t in sent.body["messages"] for b in t["content"] if b.get("type") == "tool_result"
    ]
    assert "call_lost" in {b["tool_use_id"] for b in results}
    assert len(session.history()) == 1 + 2 * 4 + 4 + 6 * 4  # the log keeps the call unanswered


def test_no_block_back_leaves_the_own_summary_and_says_why(
    anthropic_server: tuple[FakeProvider, AnthropicCompaction],
) -> None:
    server, fake = anthropic_server
    fake.stop_reason = "max_tokens"  # the documented 200 with no block: the summary was cut off
    view = folded_view(conversation(Memory()), "anthropic", server)
    (fold,) = view.compact().folds
    payload = fold.data["provider"]
    assert payload["items"] == [] and "stop_reason 'max_tokens'" in payload["error"]
    assert OWN_SUMMARY in fold.text
    assert view.render(for_provider="anthropic") == view.render()


def test_the_fold_counts_both_calls(openai_server: tuple[FakeProvider, OpenAICompaction]) -> None:
    server, _ = openai_server
    view = folded_view(conversation(Memory()), "openai", server)
    (fold,) = view.compact().folds
    assert fold.usage is not None and fold.usage["calls"] == 2
    provider = fold.data["provider"]["usage"]
    assert provider["calls"] == 1 and provider["output_tokens"] == 300
    assert fold.usage["output_tokens"] >= provider["output_tokens"]


@pytest.fixture(params=["ram", "sqlite", "postgres"])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | None]:
    """Where the log and folds live: None (RAM), a SQLite file, a PostgreSQL schema."""
    if request.param == "ram":
        yield None
    elif request.param == "sqlite":
        yield str(tmp_path / "c.db")
    else:
        from pg import fresh_schema, require_postgres, url

        require_postgres()
        with fresh_schema() as schema:
            yield url(schema)


def test_the_fold_survives_a_restart(
    store_spec: str | None, openai_server: tuple[FakeProvider, OpenAICompaction]
) -> None:
    server, _ = openai_server
    memory = Memory(store_spec)
    view = folded_view(conversation(memory), "openai", server)
    (fold,) = view.compact().folds
    before = view.render_report(for_provider="openai")
    # A RAM store lives as long as its object: the restart is a new Memory on it.
    reopened = Memory(memory.store if store_spec is None else store_spec)
    again = reopened.existing_session("s").view("v")
    (read,) = again.folds()
    assert read.to_dict() == fold.to_dict()
    after = again.render_report(for_provider="openai")
    assert after.messages == before.messages and after.tokens == before.tokens
    assert isinstance(again.pipeline.strategies[0], ProviderCompaction)  # type: ignore[union-attr]
    reopened.close()
    if store_spec is not None:
        memory.close()


def test_options_are_stored_and_bad_ones_name_their_field() -> None:
    strategy = ProviderCompaction(
        provider="anthropic", model="claude-opus-4-7", fallback=RollingCompactor(threshold=4)
    )
    assert strategy.fallback == {"type": "rolling", "options": {"threshold": 4}}
    view = Memory().session("s", system=SYSTEM).view("v", pipeline=Pipeline([strategy]))
    (stored,) = view.config.pipeline["strategies"]  # type: ignore[index]
    assert stored == {
        "type": "provider-compaction",
        "options": {
            "provider": "anthropic",
            "model": "claude-opus-4-7",
            "fallback": {"type": "rolling", "options": {"threshold": 4}},
        },
    }
    for options, field in [
        ({"provider": "gemini"}, "provider"),
        ({"fallback": {"type": "provider-compaction"}}, "fallback.type"),
        ({"fallback": {"type": "nope"}}, "fallback.type"),
        ({"max_tokens": 0}, "max_tokens"),
    ]:
        with pytest.raises(InvalidInput) as caught:
            ProviderCompaction(**{"provider": "openai", **options})
        assert caught.value.field == field
    with pytest.raises(InvalidInput) as caught:
        view.update(pipeline={"strategies": [{"type": "provider-compaction"}]})
    assert caught.value.field.startswith("pipeline.strategies[0]")
    with pytest.raises(InvalidInput) as caught:
        view.render(for_provider="gemini")
    assert caught.value.field == "for_provider"
    with pytest.raises(InvalidInput) as caught:
        view.refuse_provider_items("nope", "why")
    assert caught.value.field == "fold_id"


def test_anthropic_takes_its_block_only_where_it_leads_the_prompt() -> None:
    block = {"type": "compaction", "content": "S", "signature": "sig"}
    fold = Fold(
        view="v",
        start=2,
        end=9,
        kind="summary",
        text="S",
        messages=({"role": "system", "content": "S"},),
        strategy="provider-compaction",
        tokens_before=400,
        tokens_after=5,
        data={"provider": {"name": "anthropic", "items": [block], "tokens": 7, "refused": None}},
    )
    shown = for_target(fold, "anthropic")
    assert for_target(fold, "openai") is fold
    assert shown.messages[0]["meta"] == {"anthropic": {"content": [block], "fold": fold.id}}
    assert shown.messages[0]["role"] == "assistant" and shown.tokens_after == 7
    assert for_target(fold, "anthropic", leading=False) is fold
    assert for_target(fold, "openai") is fold and for_target(fold, None) is fold
    facts = replace(fold, id="facts", placement="facts", data={})
    assert folds_for([fold], "anthropic", first_seq=2, facts=facts) == [fold]
    assert folds_for([fold], "anthropic", first_seq=1, facts=None) == [fold]
    assert folds_for([fold], "anthropic", first_seq=2, facts=None) == [shown]
    with pytest.raises(InvalidInput) as caught:
        refused_fold(fold, " ")
    assert caught.value.field == "reason"
