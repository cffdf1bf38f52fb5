"""The OpenAI Responses API's conversation as contextfold's (OpenAI chat) messages, and back.

A Responses request carries ``instructions`` and ``input``: a string or a list
of items. Each item becomes part of one log message, so compaction sees the
conversation as it sees a chat:

- ``instructions`` is the first system message;
- a ``message`` item of role user, system or developer is a message of that
  role: text parts as text, an image with a URL as an ``image_url`` part and a
  file as a ``file`` part (user messages only; anything else a role cannot
  hold is a ``[type]`` placeholder in its text);
- a run of items the model produced (assistant ``message`` items,
  ``function_call`` and ``custom_tool_call`` items, ``reasoning`` and any other
  item of the model's) is one assistant message: their text, and one tool call
  per call, with its ``call_id``; a Response's output reads the same way;
- ``function_call_output`` and ``custom_tool_call_output`` are tool messages
  answering their ``call_id``;
- any other item the client produced (a type ending in ``_output``,
  ``mcp_approval_response``, ``item_reference``, ``additional_tools``) is a user
  message whose text is the item as JSON.

Nothing is dropped: when the message's own fields would not give its items
back exactly (a reasoning item, an image's ``detail``, an item's ``id`` or
``status``), the items ride verbatim in ``meta["responses"]["items"]``. Going
back (``write_items``), a message whose fields are still those its items make
sends those items unchanged; a changed one (clipped, or a fold's summary,
which has no items) is written from its fields. So a request read and written
back is the same request (``request_messages`` then ``request_body``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message, check_json, for_model, validate_message
from contextfold.core.order import Tail, first_violation

Item = dict[str, Any]

KEPT = "responses"
"""The ``meta`` key of what a message keeps of the Responses API."""
PART_JOIN = "\n"
"""How the text of several parts or items is joined into one message's text."""
_OUTPUTS = {"function_call_output": "function_call", "custom_tool_call_output": "custom_tool_call"}
_CALLS = frozenset(_OUTPUTS.values())
_CLIENT_ITEMS = frozenset({"mcp_approval_response", "item_reference", "additional_tools"})
_MESSAGE_ROLES = frozenset({"user", "system", "developer", "assistant"})
_TEXT_PARTS = frozenset({"input_text", "output_text"})


def request_messages(body: Mapping[str, Any], *, continued: bool = False) -> list[Message]:
    """A Responses request's ``instructions`` and ``input`` as log messages.

    ``continued``: the request continues a response logged earlier
    (``previous_response_id``), so its input may answer calls the log holds,
    and its ``instructions`` are not a new message (the log has its system
    prompt). Errors name the field: ``input[3].call_id``.
    """
    out: list[Message] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise InvalidInput("instructions must be a string", field="instructions")
        if not continued:
            out.append({"role": "system", "content": instructions})
    raw = body.get("input")
    if raw is None:
        if not continued:
            raise InvalidInput("input is required (a string or a list of items)", field="input")
        return out
    if isinstance(raw, str):
        return [*out, {"role": "user", "content": raw}]
    if not isinstance(raw, list):
        raise InvalidInput("input must be a string or a list of items", field="input")
    return [*out, *read_items(raw, continued=continued)]


def read_items(items: Sequence[Any], *, continued: bool = False) -> list[Message]:
    """Input items as log messages (module docstring), checked whole.

    Without ``continued`` every tool output must answer a call made earlier
    in the same list, in the run of outputs right after it.
    """
    out: list[Message] = []
    origins: list[int] = []
    run: list[tuple[int, Mapping[str, Any]]] = []

    def flush() -> None:
        if run:
            out.append(_checked(_assistant(run), [i for _, i in run], f"input[{run[0][0]}]"))
            origins.append(run[0][0])
            run.clear()

    for k, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise InvalidInput(
                f"an input item is an object, got {type(item).__name__}", field=f"input[{k}]"
            )
        message = _alone(item, k)
        if message is None:
            run.append((k, item))
            continue
        flush()
        out.append(_checked(message, [item], f"input[{k}]"))
        origins.append(k)
    flush()
    if not continued:
        violation = first_violation(Tail(), out)
        if violation is not None and violation.index is not None:
            at = origins[violation.index]
            raise InvalidInput(violation.reason, field=f"input[{at}].call_id")
    return out


def item_kind(item: Mapping[str, Any], where: str) -> str:
    """An item's ``type``; an item with a ``role`` and no type is a message."""
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    if not isinstance(kind, str) or not kind:
        raise InvalidInput("an item needs a 'type' string", field=f"{where}.type")
    return kind


def assistant_message(items: Sequence[Mapping[str, Any]], where: str = "output") -> Message:
    """Items the model produced (a Response's ``output``) as one assistant message."""
    return _checked(_assistant(list(enumerate(items)), where), list(items), where)


def _alone(item: Mapping[str, Any], k: int) -> Message | None:
    """The message an item is on its own (unchecked), or None for an item of the model's,
    which joins its run."""
    kind = item_kind(item, f"input[{k}]")
    if kind == "message" and item.get("role") != "assistant":
        return _message(item, k)
    if kind in _OUTPUTS:
        return _output(item, k, kind)
    if kind in _CLIENT_ITEMS or kind.endswith("_output"):
        return _client_item(item, k, kind)
    return None


def _message(item: Mapping[str, Any], k: int) -> Message:
    role = item.get("role")
    if role not in _MESSAGE_ROLES:
        raise InvalidInput(
            f"unknown role {role!r} (expected one of {', '.join(sorted(_MESSAGE_ROLES))})",
            field=f"input[{k}].role",
        )
    content = _content(item.get("content"), f"input[{k}].content", media=role == "user")
    return {"role": role, "content": content}


def _content(raw: Any, where: str, *, media: bool) -> str | list[dict[str, Any]]:
    """A message item's content as chat content: text, and media where the role allows it."""
    if isinstance(raw, str):
        return raw
    if not isinstance(raw, list):
        raise InvalidInput("content must be a string or a list of parts", field=where)
    parts = [_part(part, f"{where}[{j}]", media=media) for j, part in enumerate(raw)]
    if all(part["type"] == "text" for part in parts):
        return PART_JOIN.join(part["text"] for part in parts)
    return parts


def _part(part: Any, where: str, *, media: bool) -> dict[str, Any]:
    if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
        raise InvalidInput("each part needs a 'type'", field=f"{where}.type")
    kind = part["type"]
    if kind in _TEXT_PARTS or kind == "refusal":
        key = "refusal" if kind == "refusal" else "text"
        if not isinstance(part.get(key), str):
            raise InvalidInput(f"a {kind} part needs a '{key}' string", field=f"{where}.{key}")
        return {"type": "text", "text": part[key]}
    if media and kind == "input_image" and isinstance(part.get("image_url"), str):
        return {"type": "image_url", "image_url": {"url": part["image_url"]}}
    if media and kind == "input_file":
        body = {k: part[k] for k in ("file_data", "file_id", "filename") if part.get(k)}
        if "file_data" in body or "file_id" in body:
            return {"type": "file", "file": body}
    return {"type": "text", "text": f"[{kind}]"}


def _output(item: Mapping[str, Any], k: int, kind: str) -> Message:
    call_id = _call_id(item, k)
    raw = item.get("output")
    if isinstance(raw, list):
        parts = [_part(part, f"input[{k}].output[{j}]", media=False) for j, part in enumerate(raw)]
        text = PART_JOIN.join(part["text"] for part in parts)
    elif isinstance(raw, str):
        text = raw
    else:
        raise InvalidInput(
            f"a {kind} needs an 'output' string or list of parts", field=f"input[{k}].output"
        )
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _client_item(item: Mapping[str, Any], k: int, kind: str) -> Message:
    text = json.dumps(item, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return {"role": "user", "content": f"[{kind}] {text}"}


def _call_id(item: Mapping[str, Any], k: int | str) -> str:
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        where = k if isinstance(k, str) else f"input[{k}]"
        raise InvalidInput("a call needs a 'call_id' string", field=f"{where}.call_id")
    return call_id


def _assistant(run: Sequence[tuple[int, Mapping[str, Any]]], where: str = "input") -> Message:
    texts: list[str] = []
    refusals: list[str] = []
    calls: list[dict[str, Any]] = []
    for k, item in run:
        at = f"{where}[{k}]"
        if not isinstance(item, Mapping):
            raise InvalidInput(f"an item is an object, got {type(item).__name__}", field=at)
        kind = item_kind(item, at)
        if kind == "message":
            if item.get("role") != "assistant":
                raise InvalidInput("the model's messages are assistant's", field=f"{at}.role")
            raw = item.get("content")
            if isinstance(raw, list):
                for j, part in enumerate(raw):
                    if isinstance(part, Mapping) and part.get("type") == "refusal":
                        refusals.append(_part(part, f"{at}.content[{j}]", media=False)["text"])
                    else:
                        texts.append(_part(part, f"{at}.content[{j}]", media=False)["text"])
            else:
                texts.append(str(_content(raw, f"{at}.content", media=False)))
        elif kind in _CALLS:
            key = "arguments" if kind == "function_call" else "input"
            name, arguments = item.get("name"), item.get(key)
            if not isinstance(name, str) or not name:
                raise InvalidInput("a call needs a 'name' string", field=f"{at}.name")
            if not isinstance(arguments, str):
                raise InvalidInput(f"a call's {key} is a string", field=f"{at}.{key}")
            call_id = _call_id(item, at)
            if any(call["id"] == call_id for call in calls):
                raise InvalidInput(
                    f"call_id {call_id!r} is used twice in one turn", field=f"{at}.call_id"
                )
            function = {"name": name, "arguments": arguments}
            calls.append({"id": call_id, "type": "function", "function": function})
    message: Message = {"role": "assistant", "content": PART_JOIN.join(texts)}
    if calls:
        message["tool_calls"] = calls
        if not any(texts):
            message["content"] = None
    if refusals:
        message["refusal"] = PART_JOIN.join(refusals)
    return message


def _checked(message: Message, items: list[Mapping[str, Any]], where: str) -> Message:
    """The message validated, keeping its items unless its fields give them back."""
    try:
        checked = validate_message(message)
        if fields_items(checked) != items:
            kept = check_json({KEPT: {"items": items}}, "meta")
            checked["meta"] = kept
    except InvalidInput as exc:
        field = f"{where}.{exc.field}" if exc.field else where
        raise InvalidInput(exc.reason, field=field) from None
    return checked


def write_items(messages: Sequence[Mapping[str, Any]]) -> list[Item]:
    """Log messages (a rendered prompt) as input items: a message's kept items while its
    fields are still those the items make, else items written from its fields."""
    out: list[Item] = []
    for message in messages:
        kept = _kept(message)
        out.extend(kept if kept is not None else fields_items(message))
    return out


def _kept(message: Mapping[str, Any]) -> list[Item] | None:
    meta = message.get("meta")
    kept = meta.get(KEPT) if isinstance(meta, Mapping) else None
    items = kept.get("items") if isinstance(kept, Mapping) else None
    if not isinstance(items, list) or not items:
        return None
    again: Message | None
    try:
        if message.get("role") == "assistant":
            again = _assistant(list(enumerate(items)))
        else:
            again = _alone(items[0], 0) if len(items) == 1 else None
    except (InvalidInput, AttributeError, TypeError):
        return None  # kept items that no longer read (not written by this module)
    if again is None or again != for_model(message):
        return None
    return [dict(item) for item in items]


def fields_items(message: Mapping[str, Any]) -> list[Item]:
    """The items a message's own fields make (what it is sent as once changed)."""
    role = message.get("role")
    content = message.get("content")
    kinds = _call_kinds(message)
    if role == "tool":
        output = content if isinstance(content, str) else _joined(content)
        call_id = message.get("tool_call_id")
        kind = "custom_tool_call_output" if kinds.get(call_id) else "function_call_output"
        return [{"type": kind, "call_id": call_id, "output": output}]
    if role != "assistant":
        if isinstance(content, list):
            content = [_input_part(part) for part in content]
        return [{"role": role, "content": content}]
    out: list[Item] = []
    text = content if isinstance(content, str) else _joined(content)
    calls = message.get("tool_calls") or []
    if text or (not calls and content is not None):
        out.append({"role": "assistant", "content": text})
    if message.get("refusal") is not None:
        refusal = {"type": "refusal", "refusal": message["refusal"]}
        out.append({"type": "message", "role": "assistant", "content": [refusal]})
    for call in calls:
        function = call.get("function", {})
        custom = kinds.get(call.get("id"), False)
        out.append(
            {
                "type": "custom_tool_call" if custom else "function_call",
                "call_id": call.get("id"),
                "name": function.get("name"),
                "input" if custom else "arguments": function.get("arguments", ""),
            }
        )
    return out


def _call_kinds(message: Mapping[str, Any]) -> dict[Any, bool]:
    """Which of a changed message's calls or results were custom tool items (by call id)."""
    meta = message.get("meta")
    kept = meta.get(KEPT) if isinstance(meta, Mapping) else None
    items = kept.get("items") if isinstance(kept, Mapping) else None
    if not isinstance(items, list):
        return {}
    custom = ("custom_tool_call", "custom_tool_call_output")
    return {
        item.get("call_id"): item.get("type") in custom
        for item in items
        if isinstance(item, Mapping)
    }


def _joined(content: Any) -> str:
    if not isinstance(content, list):
        return ""
    return PART_JOIN.join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))


def _input_part(part: Mapping[str, Any]) -> dict[str, Any]:
    kind = part.get("type")
    if kind == "image_url":
        return {"type": "input_image", "image_url": part["image_url"]["url"], "detail": "auto"}
    if kind == "file":
        return {"type": "input_file", **part["file"]}
    return {"type": "input_text", "text": part.get("text", "")}


def request_body(body: Mapping[str, Any], prompt: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The client's body with its conversation replaced by ``prompt``, the rest unchanged.

    The client's ``instructions`` stay its own and stand for the prompt's
    first system message; ``previous_response_id`` is left out (the prompt is
    the whole conversation). A string input comes back a string while the
    prompt is still that one user message.
    """
    out = {k: v for k, v in body.items() if k != "previous_response_id"}
    rest = list(prompt)
    if isinstance(body.get("instructions"), str) and rest and rest[0].get("role") == "system":
        rest = rest[1:]
    items = write_items(rest)
    only = items[0] if len(items) == 1 else None
    if (
        isinstance(body.get("input"), str)
        and only is not None
        and set(only) == {"role", "content"}
        and only["role"] == "user"
        and isinstance(only["content"], str)
    ):
        out["input"] = only["content"]
    else:
        out["input"] = items
    return out
