"""The smallest tool-using agents on the official SDKs, for the client rig's SDK rows.

Each keeps its conversation in the list it is given (``kept``: empty for a
new one, a former run's to go on with a new prompt) and sends it whole on
every call, streamed, as an agent built on the SDK does: the ``anthropic`` SDK on the Messages API
(a ``Bash`` tool), the ``openai`` SDK on the Responses API (an
``exec_command`` function, its output items sent back as they came) and on
Chat Completions (the same function, the answer's message sent back whole). Each
runs the shell command the model asks for in the work folder and answers with
its output, until the model answers in text. A run ends as a CLI's does
(``agent_clis.Run``): code 0 with the last text, or 1 with the error.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anthropic
import openai
from agent_clis import Run

MAX_CALLS = 100
BASH = {
    "name": "Bash",
    "description": "Run a shell command.",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
}
EXEC = {
    "type": "function",
    "name": "exec_command",
    "description": "Run a shell command.",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
}


def shell(command: str, work: Path) -> str:
    done = subprocess.run(
        ["bash", "-c", command], cwd=work, capture_output=True, text=True, timeout=60
    )
    return done.stdout + done.stderr


def anthropic_agent(
    base_url: str, prompt: str, work: Path, *, key: str, session: str, kept: list[Any]
) -> Run:
    """A Messages API agent on the ``anthropic`` SDK (``base_url`` without ``/v1``)."""
    client = anthropic.Anthropic(
        base_url=base_url,
        api_key=key,
        max_retries=0,
        default_headers={"X-Contextfold-Session": session},
    )
    turns = kept
    turns.append({"role": "user", "content": prompt})
    try:
        for _ in range(MAX_CALLS):
            with client.messages.stream(
                model="claude-sonnet-4-6",
                max_tokens=4096,
                system="You are a careful agent.",
                messages=turns,
                tools=[BASH],
            ) as stream:
                answer = stream.get_final_message()
            content = [block.model_dump(exclude_none=True) for block in answer.content]
            turns.append({"role": "assistant", "content": content})
            uses = [b for b in content if b["type"] == "tool_use"]
            if not uses:
                text = "".join(b.get("text", "") for b in content)
                return Run(0, json.dumps(content), "", text)
            results = [
                {
                    "type": "tool_result",
                    "tool_use_id": b["id"],
                    "content": shell(b["input"]["command"], work),
                }
                for b in uses
            ]
            turns.append({"role": "user", "content": results})
    except anthropic.APIError as exc:
        return Run(1, "", repr(exc), "")
    return Run(1, "", f"no text answer in {MAX_CALLS} calls", "")


def responses_agent(
    base_url: str, prompt: str, work: Path, *, key: str, session: str, kept: list[Any]
) -> Run:
    """A Responses API agent on the ``openai`` SDK (``base_url`` with ``/v1``)."""
    client = openai.OpenAI(
        base_url=base_url,
        api_key=key,
        max_retries=0,
        default_headers={"X-Contextfold-Session": session},
    )
    items = kept
    items.append({"type": "message", "role": "user", "content": prompt})
    try:
        for _ in range(MAX_CALLS):
            output: list[dict[str, Any]] = []
            stream = client.responses.create(
                model="gpt-5",
                instructions="You are a careful agent.",
                input=items,
                tools=[EXEC],
                stream=True,
            )
            for event in stream:
                if event.type == "response.completed":
                    output = [item.model_dump(exclude_none=True) for item in event.response.output]
            items.extend(output)
            calls = [i for i in output if i["type"] == "function_call"]
            if not calls:
                return Run(0, json.dumps(output), "", _output_text(output))
            for call in calls:
                command = json.loads(call["arguments"])["cmd"]
                result = {"type": "function_call_output", "call_id": call["call_id"]}
                items.append({**result, "output": shell(command, work)})
    except openai.APIError as exc:
        return Run(1, "", repr(exc), "")
    return Run(1, "", f"no text answer in {MAX_CALLS} calls", "")


def chat_agent(
    base_url: str, prompt: str, work: Path, *, key: str, session: str, kept: list[Any]
) -> Run:
    """A Chat Completions agent on the ``openai`` SDK (``base_url`` with ``/v1``)."""
    client = openai.OpenAI(
        base_url=base_url,
        api_key=key,
        max_retries=0,
        default_headers={"X-Contextfold-Session": session},
    )
    messages = kept
    if not messages:
        messages.append({"role": "system", "content": "You are a careful agent."})
    messages.append({"role": "user", "content": prompt})
    tool = {"type": "function", "function": {k: v for k, v in EXEC.items() if k != "type"}}
    try:
        for _ in range(MAX_CALLS):
            stream = client.chat.completions.create(
                model="gpt-4o-mini", messages=messages, tools=[tool], stream=True
            )
            text, calls = _gather(stream)
            answer: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                answer["tool_calls"] = calls
            messages.append(answer)
            if not calls:
                return Run(0, json.dumps(answer), "", text)
            for call in calls:
                command = json.loads(call["function"]["arguments"])["cmd"]
                output = shell(command, work)
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    except openai.APIError as exc:
        return Run(1, "", repr(exc), "")
    return Run(1, "", f"no text answer in {MAX_CALLS} calls", "")


def _gather(stream: Any) -> tuple[str, list[dict[str, Any]]]:
    """A streamed chat completion's text and tool calls, their pieces joined by index."""
    text = ""
    calls: dict[int, dict[str, Any]] = {}
    for chunk in stream:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for piece in choice.delta.tool_calls or []:
                call = calls.setdefault(
                    piece.index,
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                call["id"] = piece.id or call["id"]
                if piece.function is not None:
                    call["function"]["name"] += piece.function.name or ""
                    call["function"]["arguments"] += piece.function.arguments or ""
    return text, [calls[i] for i in sorted(calls)]


def _output_text(output: list[dict[str, Any]]) -> str:
    return "".join(
        part.get("text", "")
        for item in output
        if item["type"] == "message"
        for part in item["content"]
    )
