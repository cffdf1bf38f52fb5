"""What Anthropic Messages refuses in a prompt (as ``to_anthropic`` gives it), found first.

The rules are the ones Anthropic documents and its 400 errors state
(docs/reference/prompts.md lists them): a user turn first, alternating turns,
blocks by role, no blank text, unique ``tool_use`` ids, each answered by a
``tool_result`` first in the next turn, and no whitespace ending a final
assistant turn. Tool pairing is ``fault.pairing_faults``: an Anthropic turn is
read as the OpenAI messages it stands for.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator, Mapping, Sequence
from typing import Any

from contextfold.formats.fault import PromptFault, pairing_faults

_BLOCKS = {
    "user": frozenset({"text", "image", "document", "tool_result"}),
    "assistant": frozenset({"text", "tool_use", "thinking", "redacted_thinking"}),
}
_TOOL_USE_ID = re.compile(r"[a-zA-Z0-9_-]+")


def anthropic_faults(messages: Sequence[Any], system: Any = None) -> Iterator[PromptFault]:
    """Every fault Anthropic would refuse ``system`` and ``messages`` for."""
    yield from _system_faults(system)
    yield from _message_faults(messages)


def _system_faults(system: Any) -> Iterator[PromptFault]:
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


def _message_faults(messages: Sequence[Any]) -> Iterator[PromptFault]:
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
        if role not in _BLOCKS:
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
        blocks = yield from _content_blocks(i, msg.get("content"), final)
        yield from _block_rules(i, role, blocks, use_ids)
        if final:
            yield from _trailing_whitespace(i, msg.get("content"), blocks)
        for s, w in _shape(i, role, blocks):
            shaped.append(s)
            where.append(w)
    yield from pairing_faults(shaped, where)


def _content_blocks(
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


def _block_rules(
    i: int, role: str, blocks: Sequence[Mapping[str, Any]], use_ids: set[str]
) -> Iterator[PromptFault]:
    seen_other = False
    for j, block in enumerate(blocks):
        kind = block["type"]
        where = f"content[{j}]"
        if kind is None:
            continue
        if kind not in _BLOCKS[role]:
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


def _shape(
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
