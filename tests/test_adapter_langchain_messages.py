"""LangChain messages to the log's chat messages and back, without loss, over every type.

Each case is a LangChain message as an app or a provider makes it; the chat
message must be what a model is sent (valid in the log, media only on user
messages), and reading it back must give the same message, field for field.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("langchain_core")

from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)

from contextfold import InvalidInput, Memory
from contextfold.core.messages import validate_message
from contextfold.integrations.langchain import chat_to_langchain, langchain_to_chat

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

CASES: dict[str, tuple[BaseMessage, dict[str, Any]]] = {
    "human text": (HumanMessage("hi", id="h1"), {"role": "user", "content": "hi"}),
    "human named": (
        HumanMessage("hi", name="ann"),
        {"role": "user", "content": "hi", "name": "ann"},
    ),
    "human image url (OpenAI part)": (
        HumanMessage(
            [
                {"type": "text", "text": "see"},
                {"type": "image_url", "image_url": {"url": "https://x/a.png", "detail": "low"}},
            ]
        ),
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "see"},
                {"type": "image_url", "image_url": {"url": "https://x/a.png", "detail": "low"}},
            ],
        },
    ),
    "human image base64 (v1 block)": (
        HumanMessage(
            content_blocks=[
                {"type": "text", "text": "see"},
                {"type": "image", "base64": PNG, "mime_type": "image/png"},
            ]
        ),
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "see"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            ],
        },
    ),
    "human image url (v1 block)": (
        HumanMessage(content_blocks=[{"type": "image", "url": "https://x/b.png"}]),
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "https://x/b.png"}}],
        },
    ),
    "human file (v1 block)": (
        HumanMessage(
            content_blocks=[
                {
                    "type": "file",
                    "base64": "JVBERi0=",
                    "mime_type": "application/pdf",
                    "extras": {"filename": "a.pdf"},
                }
            ]
        ),
        {
            "role": "user",
            "content": [
                {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0="}}
            ],
        },
    ),
    "human file id": (
        HumanMessage([{"type": "file", "file_id": "file-1"}]),
        {"role": "user", "content": [{"type": "file", "file": {"file_id": "file-1"}}]},
    ),
    "human audio (v1 block)": (
        HumanMessage(
            content_blocks=[{"type": "audio", "base64": "UklGRg==", "mime_type": "audio/wav"}]
        ),
        {
            "role": "user",
            "content": [
                {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
            ],
        },
    ),
    "system": (SystemMessage("be brief", id="s1"), {"role": "system", "content": "be brief"}),
    "system with blocks": (
        SystemMessage(
            [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}]
        ),
        {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
    ),
    "developer": (
        ChatMessage(role="developer", content="rules"),
        {"role": "developer", "content": "rules"},
    ),
    "ai text with metadata": (
        AIMessage(
            "sure",
            id="run-1",
            response_metadata={"model_name": "gpt-4o-mini", "finish_reason": "stop"},
            usage_metadata={"input_tokens": 10, "output_tokens": 2, "total_tokens": 12},
            additional_kwargs={"custom": [1, 2]},
        ),
        {"role": "assistant", "content": "sure"},
    ),
    "ai tool calls": (
        AIMessage(
            "",
            tool_calls=[
                {"name": "read", "args": {"path": "a", "n": [1, {"x": None}]}, "id": "c1"},
                {"name": "ls", "args": {}, "id": "c2"},
            ],
        ),
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {
                        "name": "read",
                        "arguments": '{"path": "a", "n": [1, {"x": null}]}',
                    },
                },
                {"id": "c2", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
            ],
        },
    ),
    "ai invalid tool call": (
        AIMessage(
            "oops",
            invalid_tool_calls=[
                {
                    "name": "read",
                    "args": "{bad",
                    "id": "c9",
                    "error": "bad json",
                    "type": "invalid_tool_call",
                }
            ],
        ),
        {"role": "assistant", "content": "oops"},
    ),
    "ai reasoning blocks": (
        AIMessage(
            content_blocks=[
                {"type": "reasoning", "reasoning": "think first", "id": "rs_1"},
                {"type": "text", "text": "answer"},
            ]
        ),
        {"role": "assistant", "content": [{"type": "text", "text": "answer"}]},
    ),
    "ai anthropic thinking + tool_use": (
        AIMessage(
            [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "text", "text": "calling"},
                {"type": "tool_use", "id": "tu1", "name": "ls", "input": {}},
            ],
            tool_calls=[{"name": "ls", "args": {}, "id": "tu1"}],
        ),
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "calling"}],
            "tool_calls": [
                {"id": "tu1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
            ],
        },
    ),
    "ai refusal": (
        AIMessage("", additional_kwargs={"refusal": "I can't"}),
        {"role": "assistant", "content": "", "refusal": "I can't"},
    ),
    "ai chunk": (
        AIMessageChunk(content="part", id="ch1"),
        {"role": "assistant", "content": "part"},
    ),
    "tool result": (
        ToolMessage("42", tool_call_id="c1", name="read", id="t1"),
        {"role": "tool", "content": "42", "tool_call_id": "c1", "name": "read"},
    ),
    "tool error with artifact": (
        ToolMessage(
            "failed", tool_call_id="c1", status="error", artifact={"rows": [1, 2], "ok": False}
        ),
        {"role": "tool", "content": "failed", "tool_call_id": "c1"},
    ),
    "tool result with image": (
        ToolMessage(
            [
                {"type": "text", "text": "screenshot"},
                {"type": "image", "base64": PNG, "mime_type": "image/png"},
            ],
            tool_call_id="c1",
        ),
        {"role": "tool", "content": [{"type": "text", "text": "screenshot"}], "tool_call_id": "c1"},
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_type_maps_to_what_a_model_is_sent_and_back_unchanged(name: str) -> None:
    message, seen = CASES[name]
    chat = langchain_to_chat(message)
    assert {k: v for k, v in chat.items() if k != "meta"} == seen
    assert validate_message(chat) == chat  # a valid log message as it is
    back = chat_to_langchain(chat)
    assert type(back) is type(message)
    assert back == message, back.model_dump()


def test_the_common_message_carries_no_meta() -> None:
    for message in (
        HumanMessage("hi"),
        AIMessage("ok"),
        SystemMessage("s"),
        ToolMessage("r", tool_call_id="c"),
    ):
        assert "meta" not in langchain_to_chat(message)


@pytest.mark.parametrize("name", list(CASES))
def test_the_round_trip_holds_through_a_store(name: str, tmp_path: Any) -> None:
    """What SQLite keeps (JSON) reads back as the same message."""
    message, _ = CASES[name]
    if isinstance(message, ToolMessage):
        prefix = [AIMessage("", tool_calls=[{"name": "read", "args": {}, "id": "c1"}])]
    else:
        prefix = []
    with Memory(tmp_path / "m.db") as memory:
        session = memory.session("s")
        session.extend([langchain_to_chat(m) for m in [*prefix, message]])
        logged = session.messages()[-1].message
    assert chat_to_langchain(logged) == message


def test_a_field_that_is_not_json_is_named_and_left_out() -> None:
    class Table:
        pass

    message = ToolMessage("done", tool_call_id="c1", artifact=Table())
    chat = langchain_to_chat(message)
    assert chat["meta"]["langchain_unstored"] == ["artifact"]
    back = chat_to_langchain(chat)
    assert back.content == "done" and back.artifact is None


def test_a_chat_message_without_meta_reads_as_its_natural_type() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{bad"}}
    back = chat_to_langchain({"role": "assistant", "content": None, "tool_calls": [call]})
    assert isinstance(back, AIMessage) and back.tool_calls == []
    assert back.invalid_tool_calls[0]["args"] == "{bad"
    assert isinstance(
        chat_to_langchain({"role": "tool", "content": "r", "tool_call_id": "c1"}), ToolMessage
    )
    assert isinstance(chat_to_langchain({"role": "developer", "content": "d"}), ChatMessage)


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (FunctionMessage("r", name="f"), "role"),
        (RemoveMessage(id="x"), "role"),
        (ChatMessage(role="critic", content="no"), "role"),
        (AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": None}]), "tool_calls[0].id"),
        (
            AIMessage("", tool_calls=[{"name": "f", "args": {"x": float("nan")}, "id": "c"}]),
            "tool_calls[0].args.x",
        ),
    ],
)
def test_what_has_no_chat_form_is_invalid_input_naming_the_field(
    message: BaseMessage, field: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        langchain_to_chat(message, index=3)
    assert (caught.value.index, caught.value.field) == (3, field)


def test_without_the_extra_the_import_names_it() -> None:
    """The core install has no LangChain: the adapter's import says which extra to install."""
    code = (
        "import sys\n"
        "sys.modules['langchain'] = sys.modules['langchain_core'] = None\n"
        "import contextfold\n"
        "try:\n"
        "    import contextfold.integrations.langchain\n"
        "except contextfold.MissingExtra as exc:\n"
        "    print(exc.extra, exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.startswith("langchain ")
    assert "pip install 'contextfold[langchain]'" in done.stdout


def test_a_remembered_conversion_is_redone_when_the_message_changes() -> None:
    """The middleware converts the same state objects call after call; an object changed in
    place (as HumanInTheLoopMiddleware changes a call) is read again, never served stale."""
    from contextfold.integrations.langchain.messages import ChatMessages
    from contextfold.memory.matching import digest

    chats = ChatMessages()
    call = AIMessage("", tool_calls=[{"name": "send", "args": {"to": "ann"}, "id": "c1"}])
    first, seen = chats.chat(call)
    assert chats.chat(call) == (first, seen) and chats.chat(call)[0] is first
    call.tool_calls[0]["args"]["to"] = "bob"  # in place
    edited, edited_seen = chats.chat(call)
    assert '"bob"' in edited["tool_calls"][0]["function"]["arguments"]
    assert edited_seen == digest(edited) != seen
    call.tool_calls = []
    assert "tool_calls" not in chats.chat(call)[0]
    text = HumanMessage("hi")
    assert chats.chat(text)[0]["content"] == "hi"
    text.content = "hello"
    assert chats.chat(text)[0]["content"] == "hello"
    parts = HumanMessage([{"type": "text", "text": "a"}])
    assert chats.chat(parts)[0]["content"] == [{"type": "text", "text": "a"}]
    parts.content[0]["text"] = "b"  # content parts are never remembered
    assert chats.chat(parts)[0]["content"] == [{"type": "text", "text": "b"}]
    key = id(text)
    del text
    assert key not in chats._seen  # forgotten with the message
