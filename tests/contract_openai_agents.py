"""The Agents SDK session as the adapter contract drives it (``AdapterTurns``).

The contract speaks chat messages; the SDK hands a session Responses-API
input items. ``add`` converts each step's messages into the items the SDK's
loop adds after a turn (a user message, the model's typed output message and
function calls with their ids, function outputs) and hands them to
``add_items``; ``prompt`` reads ``get_items`` back as chat messages. The
conversion is written here, apart from the adapter's own translation, so a
slip in either shows. An error names the SDK item's field; it is given back
in the chat vocabulary the contract asks about (``call_id`` is ``tool_call_id``).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from contextfold import InvalidInput, Memory
from contextfold.core.messages import Message, for_model
from contextfold.formats.responses import read_items
from contextfold.integrations.openai_agents import ContextfoldSession

CHAT_FIELDS = {"call_id": "tool_call_id", "name": "tool_calls", "arguments": "tool_calls"}
"""An SDK item's field, as the chat message it came from names it."""


class AgentsSessionTurns:
    """``AdapterTurns`` over a ``ContextfoldSession``: each step is one ``add_items``."""

    def __init__(self, memory: Memory, session_id: str, view: str) -> None:
        self.session = ContextfoldSession.open(memory, session_id, view)
        self.ids = itertools.count(1)

    def add(self, messages: Sequence[Message]) -> None:
        items = [item for message in messages for item in self.items(message)]
        try:
            asyncio.run(self.session.add_items(items))  # type: ignore[arg-type]
        except InvalidInput as exc:
            head, _, rest = (exc.field or "").partition(".")
            field = CHAT_FIELDS.get(head, head) + (f".{rest}" if rest else "")
            raise InvalidInput(exc.reason, index=exc.index, field=field) from None

    def prompt(self) -> list[Message]:
        items = asyncio.run(self.session.get_items())
        return [for_model(m) for m in read_items(list(items), continued=True)]

    def close(self) -> None:
        """Nothing to release: the Memory belongs to the test."""

    def items(self, message: Mapping[str, Any]) -> list[dict[str, Any]]:
        """One chat message as the items the SDK adds for it (a bad message passed on as
        it is, for the adapter to refuse)."""
        role = message.get("role")
        if role == "tool":
            item = {"type": "function_call_output", "output": message.get("content")}
            if "tool_call_id" in message:
                item["call_id"] = message["tool_call_id"]
            return [item]
        if role != "assistant":
            item = {k: v for k, v in message.items() if k in ("role", "content")}
            if isinstance(item.get("content"), list):
                item["content"] = [_input_part(part) for part in item["content"]]
            return [item]
        out: list[dict[str, Any]] = []
        if message.get("content"):
            text = {"type": "output_text", "text": message["content"], "annotations": []}
            out.append(
                {
                    "type": "message",
                    "id": f"msg_{next(self.ids)}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [text],
                }
            )
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            item = {"type": "function_call", "call_id": call.get("id"), "status": "completed"}
            item |= {k: function[k] for k in ("name", "arguments") if k in function}
            out.append({**item, "id": f"fc_{next(self.ids)}"})
        return out


def _input_part(part: Mapping[str, Any]) -> dict[str, Any]:
    if part.get("type") == "image_url":
        return {"type": "input_image", "image_url": part["image_url"]["url"], "detail": "auto"}
    return {"type": "input_text", "text": part.get("text", "")}
