"""Rows of the database stores (SQLite, PostgreSQL): records encoded for a row, and read
back with a clear error for a damaged one.

A database file can be edited by hand or by a tool that knows nothing of
contextfold. Every row is therefore decoded here, and what cannot be decoded
becomes a ``StoreError`` naming the session and the row (``seq`` for a
message), never a raw ``json`` or ``KeyError``. A message's token count is
checked against what its length allows (``plausible_tokens``), since render
adds the stored counts up to keep a prompt within its budget. A damaged fold row is a
``DamagedFold``, which the view turns into a quarantined fold; a damaged
message is an error, because the log is the source of truth and nothing may
be invented in its place.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import astuple, replace
from typing import Any

from contextfold.core.errors import DamagedFold, InvalidInput, StoreError
from contextfold.core.folds import Fold
from contextfold.core.log import (
    ApiKey,
    LoggedMessage,
    NewMessage,
    SessionInfo,
    SessionRecord,
    ViewRecord,
)
from contextfold.core.messages import ROLES
from contextfold.core.tokens import (
    IMAGE_TOKENS,
    TOKENS_PER_CALL,
    TOKENS_PER_MESSAGE,
    TOKENS_PER_NAME,
)


def logged(session_id: str, row: tuple[Any, ...]) -> LoggedMessage:
    seq, text, tokens, key, created_at, parent = row
    try:
        message = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise _damaged_message(session_id, seq, f"its JSON does not parse ({exc})") from exc
    if not isinstance(message, dict):
        raise _damaged_message(session_id, seq, "it is not a JSON object")
    if message.get("role") not in ROLES:
        raise _damaged_message(session_id, seq, f"unknown role {message.get('role')!r}")
    if type(tokens) is not int or tokens < 0:
        raise _damaged_message(session_id, seq, f"its token count is {tokens!r}")
    low, high = plausible_tokens(message, len(text))
    if not low <= tokens <= high:
        raise StoreError(
            f"message seq {seq} of session {session_id!r} is stored with {tokens} tokens, which "
            f"cannot be right for it (a count between {low} and {high} can); a render trusting "
            "it could overflow its budget. Recount the row (its message is intact) or restore "
            "it from a backup"
        )
    return LoggedMessage(seq, message, tokens, key, created_at, int(parent))


def plausible_tokens(message: Mapping[str, Any], length: int) -> tuple[int, int]:
    """The counts a message whose stored JSON is ``length`` characters can have, by any
    encoding a session counts with; a count outside was damaged.

    Cheap (no tokenizer): a token holds at most 64 characters of text in the
    encodings shipped (runs of one character), taken as 128 for a margin, and at
    least one byte, four to a character at most. Images and files cost a fixed
    count each, and calls a fixed overhead.
    """
    content = message.get("content")
    text = len(content) if isinstance(content, str) else 0
    parts = len(content) if isinstance(content, list) else 0
    calls = message.get("tool_calls")
    fixed = TOKENS_PER_MESSAGE + TOKENS_PER_NAME + IMAGE_TOKENS * parts
    fixed += TOKENS_PER_CALL * (len(calls) if isinstance(calls, list) else 0)
    return 1 + text // MAX_CHARS_PER_TOKEN, fixed + 4 * length


MAX_CHARS_PER_TOKEN = 128
"""Characters of text one token may stand for, with a margin of two over the most seen."""


def _damaged_message(session_id: str, seq: Any, why: str) -> StoreError:
    return StoreError(
        f"message seq {seq} of session {session_id!r} is damaged in the store: {why}; "
        "the log is the source of truth, so it must be restored from a backup"
    )


def session(row: tuple[Any, ...]) -> SessionRecord:
    session_id, encoding, meta, created_at = row
    try:
        data = json.loads(meta)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"session {session_id!r}: its meta is not JSON ({exc})") from exc
    return SessionRecord(session_id, encoding, data if isinstance(data, dict) else {}, created_at)


def session_info(row: tuple[Any, ...]) -> SessionInfo:
    """A session row followed by its last seq, message count, token sum and newest time."""
    record = session(row[:4])
    last_seq, count, tokens, last_at = row[4:]
    return SessionInfo(
        record.id,
        record.encoding,
        record.meta,
        record.created_at,
        int(last_seq),
        int(count),
        int(tokens),
        record.created_at if last_at is None else float(last_at),
    )


API_KEY_COLUMNS = "id, tenant, secret_hash, label, created_at, revoked_at"
"""The ``api_keys`` table's columns in ``ApiKey``'s field order, in both stores."""


def api_key(row: tuple[Any, ...]) -> ApiKey:
    """An ``api_keys`` row, its columns in ``ApiKey``'s field order."""
    return ApiKey(*row)


def api_key_params(key: ApiKey) -> tuple[Any, ...]:
    """A key's columns in ``ApiKey``'s field order, as both stores' ``INSERT`` takes them."""
    return astuple(key)


def fold_params(session_id: str, fold: Fold, body: str) -> tuple[Any, ...]:
    """A fold's columns in the order of both stores' ``INSERT INTO folds``."""
    return (
        fold.id,
        session_id,
        fold.view,
        fold.start,
        fold.end,
        fold.placement,
        fold.kind,
        body,
        fold.superseded_by,
        fold.created_at,
    )


def view(session_id: str, row: tuple[Any, ...]) -> ViewRecord:
    name, config, version, updated_at = row
    try:
        data = json.loads(config)
    except (TypeError, ValueError) as exc:
        raise StoreError(
            f"view {name!r} of session {session_id!r}: its stored configuration is not JSON ({exc})"
        ) from exc
    if not isinstance(data, dict):
        raise StoreError(f"view {name!r} of session {session_id!r}: its configuration is not a map")
    return ViewRecord(session_id, name, data, version, updated_at)


def fold(session_id: str, row: tuple[Any, ...]) -> Fold:
    """A fold row ``(id, view, start_seq, end_seq, placement, fold, superseded_by)``.

    The columns the store indexes must agree with the fold's own data: a
    disagreement means one of them was edited, and neither can be trusted.
    """
    fold_id, view_name, start, end, placement, body, superseded_by = row
    columns = {"view": view_name, "start": start, "end": end, "placement": placement}

    def damaged(why: str) -> DamagedFold:
        return DamagedFold(session_id, str(view_name), str(fold_id), why)

    try:
        data = json.loads(body)
    except (TypeError, ValueError) as exc:
        raise damaged(f"its JSON does not parse ({exc})") from exc
    if not isinstance(data, dict):
        raise damaged("it is not a JSON object")
    if data.get("id", fold_id) != fold_id:
        raise damaged(f"its data names id {data.get('id')!r}, its row {fold_id!r}")
    try:
        out = Fold.from_dict({**data, "id": fold_id, "superseded_by": superseded_by})
    except InvalidInput as exc:
        raise damaged(str(exc)) from exc
    for name, column in columns.items():
        if getattr(out, name) != column:
            raise damaged(f"its {name} {getattr(out, name)!r} disagrees with its row ({column!r})")
    return out


def fold_known(session_id: str, row: tuple[Any, ...], known: Mapping[str, Fold] | None) -> Fold:
    """A fold row whose body the query left out (None) when its id is ``known``: the
    caller's copy, checked against the row's indexed columns; else read as ``fold``."""
    fold_id, view_name, start, end, placement, _body, superseded_by = row
    kept = None if known is None else known.get(str(fold_id))
    if kept is None:
        return fold(session_id, row)
    if (kept.view, kept.start, kept.end, kept.placement) != (view_name, start, end, placement):
        raise DamagedFold(
            session_id,
            str(view_name),
            str(fold_id),
            "its row disagrees with the fold as first read",
        )
    return (
        kept if kept.superseded_by == superseded_by else replace(kept, superseded_by=superseded_by)
    )


def dumps(value: Any, *, field: str, index: int | None = None) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"not JSON-serializable: {exc}", index=index, field=field) from exc


def prepare(index: int, new: NewMessage) -> tuple[NewMessage, str, str, list[str]]:
    """Role, JSON and tool-call ids, worked out before any write begins."""
    message: Any = new.message
    role = message.get("role") if isinstance(message, Mapping) else None
    if not isinstance(role, str):
        raise InvalidInput("a logged message needs a string role", index=index, field="role")
    try:
        calls = [str(call["id"]) for call in message.get("tool_calls") or ()]
    except (KeyError, TypeError) as exc:
        raise InvalidInput("tool call without an id", index=index, field="tool_calls") from exc
    return new, role, dumps(message, index=index, field="message"), calls


def fold_json(index: int, fold: Fold) -> str:
    """The fold as stored; ``superseded_by`` lives in its own column only."""
    body = {k: v for k, v in fold.to_dict().items() if k != "superseded_by"}
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        field = next((k for k, v in body.items() if not _serializable(v)), "fold")
        raise InvalidInput(f"fold {index} is not JSON-serializable: {exc}", field=field) from exc


def _serializable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
