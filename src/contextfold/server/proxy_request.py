"""Reading a proxy request before anything is logged: its type, body, headers and size.

Every check here runs before the session is touched, so a refused request
leaves the log as it was. The body must be declared JSON (a cross-site
``text/plain`` POST is refused, 415) and be plain JSON throughout: no NaN or
Infinity, no lone surrogate, no nesting deeper than the library allows, so
what goes upstream is valid JSON and nothing fails after the client's
messages were appended. A client resends the whole conversation on every
call, so the list is capped at ``MAX_CONVERSATION`` here, counted before a
message is read, and the messages new to the log at ``MAX_MESSAGES``, as for
the REST API's appends (``check_new``, once the log is matched).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, NoReturn

from contextfold.core.checks import check_budget
from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message, check_json
from contextfold.server.errors import ServiceError
from contextfold.server.ids import check_api_name
from contextfold.server.models import MAX_MESSAGES

AGENT_WIRES = frozenset({"messages", "responses"})
"""The wire formats agent CLIs speak (Claude Code, Codex): their traffic is an agent's."""
MAX_CONVERSATION = 20_000
"""Messages one proxy request may carry, the logged ones it repeats included."""

_DIGITS = re.compile(r"[0-9]{1,12}")
_JSON_TYPE = "application/json"


def check_json_type(content_type: str | None, field: str = "Content-Type") -> None:
    """415 unless the request declares a JSON body (``application/json``, any parameters)."""
    kind = (content_type or "").partition(";")[0].strip().lower()
    if kind != _JSON_TYPE:
        raise ServiceError(
            415,
            "unsupported_media_type",
            f"the body must be sent as {_JSON_TYPE}, not {kind or 'an undeclared type'!r}",
            field=field,
        )


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def read_body(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, every field but ``messages`` checked as plain JSON."""
    try:
        body = json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise InvalidInput("request body is nested too deeply", field="body") from None
    except ValueError as exc:
        raise InvalidInput(f"request body is not JSON: {exc}", field="body") from None
    if not isinstance(body, dict):
        raise InvalidInput("request body must be a JSON object", field="body")
    messages = body.get("messages")
    if isinstance(messages, list) and len(messages) > MAX_CONVERSATION:
        raise InvalidInput(
            f"messages holds {len(messages)} messages, over the limit of {MAX_CONVERSATION} "
            "a request may send",
            field="messages",
        )
    for key, value in body.items():
        if key != "messages":
            # Messages are checked when matched or appended; the rest goes upstream as is.
            check_json({key: value}, "body")
    if "stream" in body and not isinstance(body["stream"], bool | None):
        raise InvalidInput("stream must be true or false", field="stream")
    return body


def read_session_id(header: str | None, body: dict[str, Any]) -> str:
    """The session: the ``X-Contextfold-Session`` header, else the body's ``user`` field."""
    if header is not None:
        return check_api_name(header, "X-Contextfold-Session")
    if body.get("user") is not None:
        return check_api_name(body["user"], "user")
    raise InvalidInput(
        "a session id is required: the X-Contextfold-Session header, or the user field",
        field="X-Contextfold-Session",
    )


def read_view_name(header: str | None) -> str:
    """The view: the ``X-Contextfold-View`` header, else ``default``."""
    return check_api_name(header, "X-Contextfold-View") if header else "default"


def read_budget(header: str | None) -> int | None:
    """The ``X-Contextfold-Budget`` header: ASCII digits only (``str.isdigit`` takes "²")."""
    if header is None:
        return None
    if not _DIGITS.fullmatch(header.strip()):
        raise InvalidInput(
            f"budget must be a positive integer, not {header!r}", field="X-Contextfold-Budget"
        )
    return check_budget(int(header), "X-Contextfold-Budget")


def check_new(count: int) -> None:
    """The messages new to the log are capped as a REST append is (``MAX_MESSAGES``)."""
    if count > MAX_MESSAGES:
        raise InvalidInput(
            f"messages holds {count} messages new to the session, over the limit of "
            f"{MAX_MESSAGES} one request may append",
            field="messages",
        )


def agent_traffic(wire: str, body: dict[str, Any], messages: Sequence[Message]) -> bool:
    """Whether a request is an agent's: it offers tools, its conversation holds tool calls
    or results, or it comes by a wire format agent CLIs speak (``AGENT_WIRES``)."""
    return (
        wire in AGENT_WIRES
        or bool(body.get("tools"))
        or any(
            isinstance(m, dict) and (m.get("role") == "tool" or bool(m.get("tool_calls")))
            for m in messages
        )
    )
