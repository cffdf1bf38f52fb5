"""Whether a prompt is one a provider accepts, before it is sent.

A provider answers a malformed prompt with an HTTP 400, after the upload and
the wait. ``prompt_faults`` finds the same faults first, each naming the
message index and field; ``check_prompt`` raises the first as ``InvalidInput``.
The rules are the ones the providers document and their 400 errors state
(docs/reference/prompts.md lists them): for OpenAI Chat Completions, roles, the keys each
role takes, content and part types, names, tool-call shape, and every call
answered by the tool messages right after it; for Anthropic Messages (as
``to_anthropic`` gives them), a user turn first, alternating turns, blocks by
role, no blank text, unique ``tool_use`` ids, each answered by a
``tool_result`` first in the next turn, and no whitespace ending a final
assistant turn. Tool pairing is ``units.tool_unit_faults`` for both: an
Anthropic turn is read as the OpenAI messages it stands for.

Not checked: what depends on the request beyond its messages (the ``tools``
list, the model's own limits) and provider features contextfold never writes.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from contextfold.core.errors import InvalidInput
from contextfold.core.units import tool_unit_faults

Provider = Literal["openai", "anthropic"]
PROVIDERS: tuple[Provider, ...] = ("openai", "anthropic")

_OPENAI_KEYS = {
    "system": frozenset({"role", "content", "name"}),
    "developer": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset(
        {"role", "content", "name", "tool_calls", "function_call", "refusal", "audio"}
    ),
    # OpenAI's own function-calling examples send the tool's name with its result.
    "tool": frozenset({"role", "content", "tool_call_id", "name"}),
}
_OPENAI_PARTS = {
    "system": frozenset({"text"}),
    "developer": frozenset({"text"}),
    "user": frozenset({"text", "image_url", "input_audio", "file"}),
    "assistant": frozenset({"text", "refusal"}),
    "tool": frozenset({"text"}),
}
_ANTHROPIC_BLOCKS = {
    "user": frozenset({"text", "image", "document", "tool_result"}),
    "assistant": frozenset({"text", "tool_use", "thinking", "redacted_thinking"}),
}
_NAME = re.compile(r"[a-zA-Z0-9_-]+")
_TOOL_USE_ID = re.compile(r"[a-zA-Z0-9_-]+")


@dataclass(frozen=True)
class PromptFault:
    """One thing a provider would refuse: where (message index, field) and why."""

    index: int | None
    field: str | None
    reason: str

    def __str__(self) -> str:
        return str(InvalidInput(self.reason, index=self.index, field=self.field))


def prompt_faults(
    messages: Sequence[Mapping[str, Any]],
    provider: str = "openai",
    *,
    system: str | Sequence[Mapping[str, Any]] | None = None,
) -> list[PromptFault]:
    """Every fault ``provider`` would refuse ``messages`` for (empty: it accepts them).

    ``system`` is Anthropic's system parameter; OpenAI keeps its system prompt
    among the messages.
    """
    if provider not in PROVIDERS:
        raise InvalidInput(
            f"unknown provider {provider!r} (expected one of {', '.join(PROVIDERS)})",
            field="provider",
        )
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        return [PromptFault(None, "messages", "messages must be a list")]
    if provider == "openai":
        if system is not None:
            raise InvalidInput(
                "OpenAI takes its system prompt as a message, not apart", field="system"
            )
        return list(_openai(messages))
    return [*_anthropic_system(system), *_anthropic(messages)]


def check_prompt(
    messages: Sequence[Mapping[str, Any]],
    provider: str = "openai",
    *,
    system: str | Sequence[Mapping[str, Any]] | None = None,
) -> None:
    """Raise ``InvalidInput`` for the first fault ``prompt_faults`` finds, if any."""
    faults = prompt_faults(messages, provider, system=system)
    if faults:
        first = faults[0]
        more = f" ({len(faults) - 1} more faults)" if len(faults) > 1 else ""
        raise InvalidInput(
            f"{provider} would refuse this prompt: {first.reason}{more}",
            index=first.index,
            field=first.field,
        )


# -- OpenAI ---------------------------------------------------------------


def _openai(messages: Sequence[Any]) -> Iterator[PromptFault]:
    if not messages:
        yield PromptFault(None, "messages", "a request needs at least one message")
    for i, msg in enumerate(messages):
        if not isinstance(msg, Mapping):
            yield PromptFault(i, None, "a message must be an object")
            continue
        role = msg.get("role")
        if role not in _OPENAI_KEYS:
            yield PromptFault(i, "role", f"unknown role {role!r}")
            continue
        for key in sorted(set(msg) - _OPENAI_KEYS[role], key=str):
            yield PromptFault(i, str(key), f"a {role} message takes no {key!r}")
        yield from _openai_content(i, role, msg)
        name = msg.get("name")
        if name is not None and not (isinstance(name, str) and _NAME.fullmatch(name)):
            yield PromptFault(i, "name", f"name {name!r} must match ^[a-zA-Z0-9_-]+$")
        if role == "assistant" and "tool_calls" in msg:
            yield from _openai_calls(i, msg["tool_calls"])
        if role == "tool" and not (
            isinstance(msg.get("tool_call_id"), str) and msg["tool_call_id"]
        ):
            yield PromptFault(i, "tool_call_id", "a tool message needs a tool_call_id string")
        refusal = msg.get("refusal")
        if refusal is not None and not isinstance(refusal, str):
            yield PromptFault(i, "refusal", "refusal must be a string")
    shaped = [_openai_shape(m) for m in messages]
    fields = {"assistant": "tool_calls", "tool": "tool_call_id"}
    yield from _pairing(shaped, [(i, fields.get(str(m["role"]))) for i, m in enumerate(shaped)])


def _openai_content(i: int, role: str, msg: Mapping[str, Any]) -> Iterator[PromptFault]:
    content = msg.get("content")
    if content is None:
        if role != "assistant" or not (msg.get("tool_calls") or msg.get("function_call")):
            yield PromptFault(i, "content", f"a {role} message needs content")
        return
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        yield PromptFault(i, "content", "content must be a string or a list of parts")
        return
    if not content:
        yield PromptFault(i, "content", "a list of parts must not be empty")
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        where = f"content[{j}]"
        if kind not in _OPENAI_PARTS[role]:
            yield PromptFault(i, f"{where}.type", f"a {role} message takes no part {kind!r}")
        elif kind in ("text", "refusal") and not isinstance(part.get(kind), str):
            yield PromptFault(i, f"{where}.{kind}", f"a {kind} part needs a {kind!r} string")
        elif kind == "image_url" and not _image_url(part.get("image_url")):
            yield PromptFault(i, f"{where}.image_url", "an image part needs {'url': <string>}")


def _image_url(ref: Any) -> bool:
    return isinstance(ref, Mapping) and isinstance(ref.get("url"), str) and bool(ref["url"])


def _openai_calls(i: int, calls: Any) -> Iterator[PromptFault]:
    if not isinstance(calls, list) or not calls:
        yield PromptFault(i, "tool_calls", "tool_calls must be a non-empty list")
        return
    for j, call in enumerate(calls):
        where = f"tool_calls[{j}]"
        if not isinstance(call, Mapping):
            yield PromptFault(i, where, "a tool call must be an object")
            continue
        if not isinstance(call.get("id"), str) or not call["id"]:
            yield PromptFault(i, f"{where}.id", "a tool call needs an id string")
        if call.get("type") != "function":
            yield PromptFault(i, f"{where}.type", "a tool call's type must be 'function'")
        fn = call.get("function")
        if not isinstance(fn, Mapping):
            yield PromptFault(i, f"{where}.function", "a tool call needs a function object")
            continue
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            yield PromptFault(i, f"{where}.function.name", "a function needs a name")
        if not isinstance(fn.get("arguments"), str):
            yield PromptFault(
                i, f"{where}.function.arguments", "function arguments must be a JSON string"
            )


def _openai_shape(msg: Any) -> dict[str, Any]:
    """The fields pairing reads, from a message however malformed."""
    if not isinstance(msg, Mapping):
        return {"role": None}
    calls = msg.get("tool_calls") if msg.get("role") == "assistant" else None
    listed = calls if isinstance(calls, list) else []
    ids = [c.get("id") for c in listed if isinstance(c, Mapping)]
    return {
        "role": msg.get("role"),
        "tool_calls": [{"id": str(c)} for c in ids],
        "tool_call_id": msg.get("tool_call_id"),
    }


# -- pairing, for both ------------------------------------------------------


def _pairing(
    shaped: Sequence[Mapping[str, Any]], where: Sequence[tuple[int, str | None]]
) -> Iterator[PromptFault]:
    """Tool pairing faults of ``shaped`` (OpenAI-shaped), reported at ``where`` (index, field).

    The one rule of ``tool_unit_faults``: every call answered in the run of
    results right after it, and no result that answers nothing in that run.
    """
    for k in tool_unit_faults(shaped):
        index, field = where[k]
        msg = shaped[k]
        if msg["role"] == "tool":
            yield PromptFault(
                index,
                field,
                f"result for id {msg['tool_call_id']!r} answers no call of the turn right "
                "before its results",
            )
            continue
        answered = set()
        for later in shaped[k + 1 :]:
            if later["role"] != "tool":
                break
            answered.add(str(later["tool_call_id"]))
        missing = [c["id"] for c in msg["tool_calls"] if c["id"] not in answered]
        yield PromptFault(index, field, f"call ids {missing} have no result right after their call")


# -- Anthropic --------------------------------------------------------------


def _anthropic_system(system: Any) -> Iterator[PromptFault]:
    if system is None or isinstance(system, str):
        return
    if not isinstance(system, list):
        yield PromptFault(None, "system", "system must be a string or a list of text blocks")
        return
    for j, block in enumerate(system):
        if not isinstance(block, Mapping) or block.get("type") != "text":
            yield PromptFault(None, f"system[{j}].type", "system blocks must be text")
        elif not _has_text(block.get("text")):
            yield PromptFault(
                None, f"system[{j}].text", "text blocks must hold non-whitespace text"
            )


def _has_text(text: Any) -> bool:
    return isinstance(text, str) and bool(text.strip())


def _anthropic(messages: Sequence[Any]) -> Iterator[PromptFault]:
    if not messages:
        yield PromptFault(None, "messages", "a request needs at least one message")
    shaped: list[dict[str, Any]] = []
    where: list[tuple[int, str | None]] = []
    use_ids: set[str] = set()
    last = len(messages) - 1
    previous: Any = None
    for i, msg in enumerate(messages):
        if not isinstance(msg, Mapping):
            yield PromptFault(i, None, "a message must be an object")
            continue
        role = msg.get("role")
        if role not in _ANTHROPIC_BLOCKS:
            yield PromptFault(i, "role", f"role must be 'user' or 'assistant', not {role!r}")
            continue
        for key in sorted(set(msg) - {"role", "content"}, key=str):
            yield PromptFault(i, str(key), f"a message takes no {key!r}")
        if i == 0 and role != "user":
            yield PromptFault(i, "role", "the first turn must be a user turn")
        if role == previous:
            yield PromptFault(i, "role", f"two {role} turns in a row: roles must alternate")
        previous = role
        final = i == last and role == "assistant"
        blocks = yield from _anthropic_blocks(i, msg.get("content"), final)
        yield from _anthropic_block_rules(i, role, blocks, use_ids)
        if final:
            yield from _trailing_whitespace(i, msg.get("content"), blocks)
        for s, w in _anthropic_shape(i, role, blocks):
            shaped.append(s)
            where.append(w)
    yield from _pairing(shaped, where)


def _anthropic_blocks(
    i: int, content: Any, final: bool
) -> Generator[PromptFault, None, list[Mapping[str, Any]]]:
    """Check the content's form; return its blocks (a string is one text block)."""
    if isinstance(content, str):
        if not final and not content.strip():
            yield PromptFault(i, "content", "content must hold non-whitespace text")
        return [{"type": "text", "text": content}] if content.strip() else []
    if not isinstance(content, list):
        yield PromptFault(i, "content", "content must be a string or a list of blocks")
        return []
    if not content and not final:
        yield PromptFault(i, "content", "content must not be empty")
    blocks: list[Mapping[str, Any]] = []
    for j, block in enumerate(content):
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            yield PromptFault(i, f"content[{j}].type", "each block needs a type")
            blocks.append({"type": None})
        else:
            blocks.append(block)
    return blocks


def _anthropic_block_rules(
    i: int, role: str, blocks: Sequence[Mapping[str, Any]], use_ids: set[str]
) -> Iterator[PromptFault]:
    seen_other = False
    for j, block in enumerate(blocks):
        kind = block["type"]
        where = f"content[{j}]"
        if kind is None:
            continue
        if kind not in _ANTHROPIC_BLOCKS[role]:
            yield PromptFault(i, f"{where}.type", f"a {role} turn takes no {kind!r} block")
            continue
        if kind == "text" and not _has_text(block.get("text")):
            yield PromptFault(i, f"{where}.text", "text blocks must hold non-whitespace text")
        elif kind in ("image", "document") and not isinstance(block.get("source"), Mapping):
            yield PromptFault(i, f"{where}.source", f"an {kind} block needs a source object")
        elif kind == "tool_use":
            yield from _tool_use(i, where, block, use_ids)
        elif kind == "tool_result":
            if seen_other:
                yield PromptFault(
                    i, f"{where}.type", "tool_result blocks must come first in their turn"
                )
            yield from _tool_result(i, where, block)
        seen_other = seen_other or kind != "tool_result"


def _tool_use(
    i: int, where: str, block: Mapping[str, Any], use_ids: set[str]
) -> Iterator[PromptFault]:
    use_id = block.get("id")
    if not isinstance(use_id, str) or not _TOOL_USE_ID.fullmatch(use_id):
        yield PromptFault(i, f"{where}.id", f"tool_use id {use_id!r} must match ^[a-zA-Z0-9_-]+$")
    elif use_id in use_ids:
        yield PromptFault(i, f"{where}.id", f"tool_use id {use_id!r} is used twice")
    else:
        use_ids.add(use_id)
    if not isinstance(block.get("name"), str) or not block["name"]:
        yield PromptFault(i, f"{where}.name", "tool_use needs a name")
    if not isinstance(block.get("input"), Mapping):
        yield PromptFault(i, f"{where}.input", "tool_use input must be an object")


def _tool_result(i: int, where: str, block: Mapping[str, Any]) -> Iterator[PromptFault]:
    if not isinstance(block.get("tool_use_id"), str):
        yield PromptFault(i, f"{where}.tool_use_id", "tool_result needs a tool_use_id string")
    content = block.get("content")
    if isinstance(content, list):
        for k, inner in enumerate(content):
            kind = inner.get("type") if isinstance(inner, Mapping) else None
            if kind == "text" and not _has_text(inner.get("text")):
                yield PromptFault(
                    i,
                    f"{where}.content[{k}].text",
                    "text blocks must hold non-whitespace text",
                )
            elif kind not in ("text", "image", "document"):
                yield PromptFault(
                    i, f"{where}.content[{k}].type", f"a tool_result holds no {kind!r} block"
                )
    elif content is not None and not isinstance(content, str):
        yield PromptFault(i, f"{where}.content", "tool_result content must be text or blocks")
    if "is_error" in block and not isinstance(block["is_error"], bool):
        yield PromptFault(i, f"{where}.is_error", "is_error must be true or false")


def _trailing_whitespace(
    i: int, content: Any, blocks: Sequence[Mapping[str, Any]]
) -> Iterator[PromptFault]:
    if isinstance(content, str):
        text, field = content, "content"
    elif blocks and blocks[-1]["type"] == "text" and isinstance(blocks[-1].get("text"), str):
        text, field = blocks[-1]["text"], f"content[{len(blocks) - 1}].text"
    else:
        return
    if text and text != text.rstrip():
        yield PromptFault(i, field, "a final assistant turn must not end with whitespace")


def _anthropic_shape(
    i: int, role: str, blocks: Sequence[Mapping[str, Any]]
) -> Iterator[tuple[dict[str, Any], tuple[int, str | None]]]:
    """A turn as OpenAI-shaped messages for pairing: results first, as Anthropic reads them."""
    if role == "assistant":
        ids = [str(b.get("id")) for b in blocks if b["type"] == "tool_use"]
        yield {"role": "assistant", "tool_calls": [{"id": x} for x in ids]}, (i, "content")
        return
    others = False
    for j, block in enumerate(blocks):
        if block["type"] == "tool_result":
            shaped = {"role": "tool", "tool_call_id": block.get("tool_use_id")}
            yield shaped, (i, f"content[{j}].tool_use_id")
        else:
            others = True
    if others or not blocks:
        yield {"role": "user", "tool_calls": []}, (i, None)
