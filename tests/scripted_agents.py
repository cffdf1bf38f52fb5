"""A multi-turn tool-using task, scripted as the streams an agent's upstream sends.

Claude Code speaks the Anthropic Messages API, Codex CLI the OpenAI Responses
API and the Chat Completions agents (the ``openai`` SDK's, LangChain's) OpenAI
Chat Completions, all streamed. A task is a list of steps: each asks the CLI to
run one shell command, whose output holds the step's marker, and the last
answers in text. ``replies`` turns a task into one streamed ``Reply`` per call,
in the protocol's own event sequence, for ``FakeProvider``'s queue: the CLI
runs each command and sends its output back in the next call, so a request
that carries a step's marker carries that step's tool result.

``pairing_faults`` reads a recorded request as its protocol shapes it and
names each tool call without its result, or result without its call.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from fake_providers import Reply

from contextfold.formats.checks import prompt_faults

Wire = Literal["messages", "responses", "chat"]
TOOL: dict[Wire, str] = {"messages": "Bash", "responses": "exec_command", "chat": "exec_command"}
"""The shell tool each agent offers: Claude Code's ``Bash``, Codex's ``exec_command`` (which
the OpenAI agents offer too, its argument ``cmd``)."""


@dataclass(frozen=True)
class Step:
    """One model turn: run ``command`` (its output holds ``marker``), or, with none, answer
    ``text``. ``key`` makes the turn's ids (message, tool call) unique across tasks, as a
    provider's are: Claude Code drops a tool call whose id its history already holds."""

    key: str
    marker: str
    command: str | None
    text: str


def task(steps: int, *, lines: int = 40, tag: str = "cf") -> list[Step]:
    """``steps`` tool calls, each printing its marker and ``lines`` numbered lines, then a text answer."""
    found = [
        Step(
            key=f"{tag}_{n:04d}",
            marker=f"{tag}-step-{n}-done",
            command=f"echo {tag}-step-{n}-done; seq {n * 1000} {n * 1000 + lines - 1}",
            text=f"Running step {n}.",
        )
        for n in range(1, steps + 1)
    ]
    end = Step(f"{tag}_end", f"{tag}-finished", None, f"All done: {tag}-finished")
    return [*found, end]


def replies(wire: Wire, steps: Sequence[Step]) -> list[Reply]:
    """The streamed answer to each call of the task, in order."""
    stream = {"messages": _messages_stream, "responses": _responses_stream, "chat": _chat_stream}
    return [stream[wire](step, n) for n, step in enumerate(steps, 1)]


def _sse(events: Sequence[tuple[str, dict[str, Any]]]) -> bytes:
    return b"".join(
        f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events
    )


def _reply(events: Sequence[tuple[str, dict[str, Any]]]) -> Reply:
    return Reply(body=_sse(events), headers={"content-type": "text/event-stream"})


def _messages_stream(step: Step, n: int) -> Reply:
    """message_start, a text block, a tool_use block streamed as input_json_delta, message_stop."""
    message = {
        "id": f"msg_{step.key}",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 1},
    }
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": message}),
        *_messages_block(0, {"type": "text", "text": ""}, "text_delta", "text", step.text),
    ]
    if step.command is not None:
        block = {"type": "tool_use", "id": f"toolu_{step.key}", "name": "Bash", "input": {}}
        arguments = json.dumps({"command": step.command, "description": f"Run step {n}"})
        events += _messages_block(1, block, "input_json_delta", "partial_json", arguments)
    stop = "end_turn" if step.command is None else "tool_use"
    events += [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 20},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return _reply(events)


def _messages_block(
    index: int, block: dict[str, Any], delta_type: str, key: str, value: str
) -> Iterator[tuple[str, dict[str, Any]]]:
    """One content block, its value sent in two deltas as the API splits it."""
    yield (
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": block},
    )
    half = len(value) // 2
    for part in (value[:half], value[half:]):
        delta = {"type": delta_type, key: part}
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    yield "content_block_stop", {"type": "content_block_stop", "index": index}


def _responses_stream(step: Step, n: int) -> Reply:
    """response.created, a message item, a function_call item, response.completed."""
    seq = itertools.count()
    response: dict[str, Any] = {
        "id": f"resp_{step.key}",
        "object": "response",
        "created_at": 1_700_000_000 + n,
        "status": "in_progress",
        "model": "gpt-5",
        "output": [],
    }
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"type": "response.created", "response": response}),
        ("response.in_progress", {"type": "response.in_progress", "response": response}),
    ]
    message = {
        "type": "message",
        "id": f"msg_{step.key}",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": step.text, "annotations": []}],
    }
    events += _responses_item(0, message, "response.output_text.delta", step.text)
    output = [message]
    if step.command is not None:
        call = {
            "type": "function_call",
            "id": f"fc_{step.key}",
            "call_id": f"call_{step.key}",
            "name": "exec_command",
            "arguments": json.dumps({"cmd": step.command}),
            "status": "completed",
        }
        events += _responses_item(
            1, call, "response.function_call_arguments.delta", call["arguments"]
        )
        output.append(call)
    usage = {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 20,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 120,
    }
    done = {**response, "status": "completed", "output": output, "usage": usage}
    events.append(("response.completed", {"type": "response.completed", "response": done}))
    return _reply([(name, {**data, "sequence_number": next(seq)}) for name, data in events])


def _responses_item(
    index: int, item: dict[str, Any], delta_type: str, value: str
) -> Iterator[tuple[str, dict[str, Any]]]:
    """An output item added empty, its text or arguments in two deltas, then done whole."""
    if item["type"] == "message":
        empty = {**item, "status": "in_progress", "content": []}
        part = {"type": "output_text", "text": "", "annotations": []}
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
    else:
        empty = {**item, "status": "in_progress", "arguments": ""}
        where = {"item_id": item["id"], "output_index": index}
    yield (
        "response.output_item.added",
        {"type": "response.output_item.added", "output_index": index, "item": empty},
    )
    if item["type"] == "message":
        added = {"type": "response.content_part.added", **where, "part": part}
        yield "response.content_part.added", added
    half = len(value) // 2
    for piece in (value[:half], value[half:]):
        yield delta_type, {"type": delta_type, **where, "delta": piece}
    if item["type"] == "message":
        text_done = {"type": "response.output_text.done", **where, "text": value}
        yield "response.output_text.done", text_done
        part_done = {"type": "response.content_part.done", **where, "part": item["content"][0]}
        yield "response.content_part.done", part_done
    else:
        args_done = {"type": "response.function_call_arguments.done", **where, "arguments": value}
        yield "response.function_call_arguments.done", args_done
    yield (
        "response.output_item.done",
        {"type": "response.output_item.done", "output_index": index, "item": item},
    )


def _chat_stream(step: Step, n: int) -> Reply:
    """Chat completion chunks: the role, the text in two deltas, a tool call's id and name
    then its arguments in two deltas, the finish reason, a usage chunk, ``[DONE]``."""
    base = {
        "id": f"chatcmpl-{step.key}",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000 + n,
        "model": "gpt-4o-mini",
    }
    half = len(step.text) // 2
    deltas: list[dict[str, Any]] = [
        {"role": "assistant", "content": ""},
        {"content": step.text[:half]},
        {"content": step.text[half:]},
    ]
    if step.command is not None:
        arguments = json.dumps({"cmd": step.command})
        call = {"index": 0, "id": f"call_{step.key}", "type": "function"}
        deltas += [
            {"tool_calls": [{**call, "function": {"name": "exec_command", "arguments": ""}}]},
            *(
                {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
                for piece in (arguments[: len(arguments) // 2], arguments[len(arguments) // 2 :])
            ),
        ]
    finish = "stop" if step.command is None else "tool_calls"
    chunks = [
        {**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
    ]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    usage = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
    chunks.append({**base, "choices": [], "usage": usage})
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return Reply(body=body.encode(), headers={"content-type": "text/event-stream"})


def pairing_faults(wire: Wire, body: Mapping[str, Any]) -> list[str]:
    """Each tool call in a request without its result, or result without its call (for the
    Messages API and Chat Completions, contextfold's checks of what the provider refuses,
    pairing included)."""
    if wire == "messages":
        faults = prompt_faults(body["messages"], "anthropic", system=body.get("system"))
        return [str(f) for f in faults]
    if wire == "chat":
        return [str(f) for f in prompt_faults(body["messages"], "openai")]
    found: list[str] = []
    open_calls: list[str] = []
    for i, item in enumerate(body["input"]):
        if item.get("type") == "function_call":
            open_calls.append(item["call_id"])
        elif item.get("type") == "function_call_output":
            if item["call_id"] in open_calls:
                open_calls.remove(item["call_id"])
            else:
                found.append(f"input[{i}]: output for {item['call_id']}, no call before it")
    return found + [f"function_call {c} has no output" for c in open_calls]


def tool_results(wire: Wire, body: Mapping[str, Any]) -> list[str]:
    """The text of each tool result a request carries, in order."""
    if wire == "responses":
        return [
            json.dumps(item["output"])
            for item in body["input"]
            if item.get("type") == "function_call_output"
        ]
    if wire == "chat":
        return [json.dumps(m["content"]) for m in body["messages"] if m["role"] == "tool"]
    return [
        json.dumps(block.get("content"))
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


def log_faults(
    turns: Sequence[tuple[str, Sequence[Step]]], log: Sequence[Mapping[str, Any]]
) -> list[str]:
    """How a session's log differs from the conversation of ``turns`` logged once, in order.

    Each turn is a user prompt and the task it was answered with. The log
    (messages as the REST API shows them) must hold, after its system prompt,
    per turn: the client's user messages ending with the prompt, then per step
    the answer (its text, and its tool call) and the call's one result holding
    the step's marker; nothing missing, nothing twice, nothing after.
    """
    rest = [m for m in log if m["role"] not in ("system", "developer")]
    found: list[str] = []
    at = 0
    for t, (prompt, steps) in enumerate(turns, 1):
        users = 0
        while at + users < len(rest) and rest[at + users]["role"] == "user":
            users += 1
        if not users or prompt not in json.dumps(rest[at + users - 1]["content"]):
            return [*found, f"turn {t}: the prompt is not where it belongs: roles {_roles(rest)}"]
        at += users
        expected: list[str] = []
        for step in steps:
            expected += ["assistant"] if step.command is None else ["assistant", "tool"]
        logged = rest[at : at + len(expected)]
        if [m["role"] for m in logged] != expected:
            found.append(f"turn {t}: roles {_roles(logged)}, expected {_roles(expected)}")
        found += [f"turn {t}, {fault}" for fault in _step_faults(steps, logged)]
        at += len(expected)
    if at < len(rest):
        found.append(f"{len(rest) - at} message(s) after the last answer: {_roles(rest[at:])}")
    return found


def _step_faults(steps: Sequence[Step], logged: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each step whose answer, call or result is not the logged one."""
    found: list[str] = []
    answers = iter(m for m in logged if m["role"] == "assistant")
    results = iter(m for m in logged if m["role"] == "tool")
    for n, step in enumerate(steps, 1):
        answer = next(answers, None)
        if answer is None or step.text not in json.dumps(answer.get("content")):
            found.append(f"step {n}: answer {step.text!r} missing")
            continue
        if step.command is None:
            continue
        calls = answer.get("tool_calls") or []
        result = next(results, None)
        if len(calls) != 1 or result is None or result.get("tool_call_id") != calls[0]["id"]:
            found.append(f"step {n}: the call and its one result are not logged together")
        elif step.marker not in json.dumps(result.get("content")):
            found.append(f"step {n}: the result lacks {step.marker!r}")
    return found


def _roles(messages: Sequence[Any]) -> str:
    roles = [m if isinstance(m, str) else m["role"] for m in messages]
    return " ".join(r[0] for r in roles)
