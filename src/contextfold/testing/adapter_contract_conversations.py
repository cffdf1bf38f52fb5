"""Agent conversations for the adapter contract, generated so no shared data is needed.

A conversation is a list of steps: each step is the messages a framework's
agent loop hands its memory before one model call. The shapes are an agent's:
a user asks, the assistant calls one to three tools at once (ids reused from
turn to turn, as some providers and frameworks number them per message), the
results come back (some long: a file, a log, a test run), and the assistant
answers in text, which goes to the memory with the next question. Everything
is drawn from a seeded ``random.Random``, so a conversation is the same on
every run and every machine.
"""

from __future__ import annotations

import json
import random

from contextfold.core.messages import Message

SYSTEM_PROMPT = (
    "You are a careful coding agent. Use the tools to read files, run commands and "
    "search the repository; answer with what you found, citing paths and line numbers."
)
TOOLS = ("read_file", "run_command", "search_code")
_WORDS = tuple(
    [
        "loader",
        "parser",
        "config",
        "cache",
        "retry",
        "session",
        "token",
        "budget",
        "fold",
        "branch",
        "index",
        "handler",
        "request",
        "response",
        "timeout",
        "worker",
        "queue",
        "schema",
        "migration",
        "column",
        "record",
        "buffer",
        "stream",
        "offset",
        "window",
        "summary",
        "prompt",
        "model",
        "agent",
        "tool",
        "result",
        "error",
        "warning",
        "value",
        "field",
    ]
)
_IMAGE = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
"""A one-pixel PNG: what a screenshot is to the log, a part to keep as it came."""
_PATHS = ("src/app/loader.py", "src/app/cache.py", "tests/test_loader.py", "docs/setup.md")


def tool_call(call_id: str, tool: str, arguments: dict[str, object]) -> dict[str, object]:
    """One tool call in the chat format."""
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": tool, "arguments": json.dumps(arguments, sort_keys=True)},
    }


def tool_call_message(*calls: dict[str, object], content: str | None = None) -> Message:
    """An assistant message carrying ``calls`` (and, for some models, a line of text)."""
    return {"role": "assistant", "content": content, "tool_calls": list(calls)}


def tool_result(call_id: str, text: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words)).capitalize() + "."


def tool_output(rng: random.Random, tool: str, long: bool) -> str:
    """A tool's answer: a few lines, or (``long``) a file, a log or a test run."""
    lines = rng.randint(40, 70) if long else rng.randint(1, 3)
    path = rng.choice(_PATHS)
    if tool == "read_file":
        body = [f"{n:4d}  {sentence(rng, rng.randint(3, 8))}" for n in range(1, lines + 1)]
        return f"{path}\n" + "\n".join(body)
    if tool == "run_command":
        body = [
            f"[{n:03d}] {rng.choice(('ok', 'WARN', 'FAIL'))} {path}:{rng.randint(1, 400)} "
            f"{sentence(rng, rng.randint(3, 7))}"
            for n in range(lines)
        ]
        return f"exit {rng.choice((0, 0, 1))}\n" + "\n".join(body)
    hits = [f"{rng.choice(_PATHS)}:{rng.randint(1, 400)}: {sentence(rng, 5)}" for _ in range(lines)]
    return "\n".join(hits)


def agent_steps(
    turns: int, *, seed: int = 7, long_share: float = 0.35, media: bool = False
) -> list[list[Message]]:
    """``turns`` user turns of an agent at work, as steps (see the module docstring).

    The first step starts with the system prompt. Each turn makes one to three
    rounds of parallel tool calls whose ids are ``call_0``, ``call_1``, ...
    again in every round; ``long_share`` of the results are long. With
    ``media``, every other question comes as content parts with a screenshot.
    """
    rng = random.Random(seed)
    steps: list[list[Message]] = []
    pending: list[Message] = [{"role": "system", "content": SYSTEM_PROMPT}]
    for turn in range(turns):
        question = f"Task {turn}: {sentence(rng, rng.randint(8, 16))} Look at {rng.choice(_PATHS)}."
        content: object = question
        if media and turn % 2:
            content = [
                {"type": "text", "text": question},
                {"type": "image_url", "image_url": {"url": _IMAGE}},
            ]
        steps.append([*pending, {"role": "user", "content": content}])
        for _ in range(rng.randint(1, 3)):
            tools = [rng.choice(TOOLS) for _ in range(rng.randint(1, 3))]
            ids = [f"call_{i}" for i in range(len(tools))]
            note = sentence(rng, 6) if rng.random() < 0.3 else None
            made = [
                tool_call(i, t, {"target": rng.choice(_PATHS), "turn": turn})
                for i, t in zip(ids, tools, strict=True)
            ]
            answers = [
                tool_result(i, tool_output(rng, t, rng.random() < long_share))
                for i, t in zip(ids, tools, strict=True)
            ]
            steps.append([tool_call_message(*made, content=note), *answers])
        answer = f"Done with task {turn}: {sentence(rng, rng.randint(10, 25))}"
        pending = [{"role": "assistant", "content": answer}]
    steps.append(pending)
    return steps
