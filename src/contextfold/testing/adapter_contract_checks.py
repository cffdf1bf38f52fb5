"""What the adapter contract checks in a prompt and a log, counted apart from contextfold.

The budget is checked with an independent count: tiktoken's ``o200k_base``
encoding (tiktoken's own ``Encoding``, built from the vocabulary bundled
offline) and OpenAI's published chat accounting written out here, 3 tokens a
message, 1 more for a name, 3 to prime the reply; a tool call counts its id,
name and arguments plus 3. No code of contextfold's ``TokenCounter`` runs, so
an adapter that sends more than the view counted is caught. Tool pairs are checked by pairing ids here, beside
``contextfold.prompt_faults``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from contextfold.core.tokens import encoding

SEEN = ("role", "content", "name", "tool_calls", "tool_call_id", "refusal")
"""The fields a model sees; ``meta`` is the adapter's own and never compared."""


def _tokens(text: str) -> int:
    return len(encoding("o200k_base").encode_ordinary(text)) if text else 0


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def prompt_tokens(prompt: Sequence[Mapping[str, Any]]) -> int:
    """What ``prompt`` costs as sent, counted without contextfold's counter."""
    total = 3
    for message in prompt:
        total += 3
        for key, value in message.items():
            if key == "meta" or value is None:
                continue
            if key == "content" and isinstance(value, list):
                total += sum(
                    _tokens(_text(part.get(part.get("type"), "")))
                    if part.get("type") in ("text", "refusal")
                    else 85
                    for part in value
                )
            elif key == "tool_calls":
                total += sum(
                    3
                    + _tokens(str(c.get("id") or ""))
                    + _tokens(c["function"]["name"])
                    + _tokens(c["function"].get("arguments") or "")
                    for c in value
                )
            elif key == "name":
                total += 1 + _tokens(value)
            else:
                total += _tokens(_text(value))
    return total


def split_pairs(prompt: Sequence[Mapping[str, Any]], *, open_tail: bool = True) -> list[str]:
    """Each place where ``prompt`` splits a tool pair, in words (empty: none).

    An assistant message with tool calls must be followed at once by one tool
    message for each of its ids, and a tool message must answer an id of the
    call right before its run of results. With ``open_tail``, the prompt's last
    call may still lack results (a pending call, a human approval).
    """
    faults: list[str] = []
    open_ids: set[str] = set()
    owner = -1
    for i, message in enumerate(prompt):
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in open_ids:
                faults.append(f"message {i}: result for {call_id!r} answers no open call")
            open_ids.discard(str(call_id))
            continue
        if open_ids:
            faults.append(f"message {owner}: calls {sorted(open_ids)} have no result")
        calls = message.get("tool_calls") or []
        ids = [str(c.get("id")) for c in calls]
        if len(set(ids)) != len(ids):
            faults.append(f"message {i}: a call id is repeated within one message")
        open_ids, owner = set(ids), i
    if open_ids and not (open_tail and _ends_with_call(prompt, owner)):
        faults.append(f"message {owner}: calls {sorted(open_ids)} have no result")
    return faults


def _ends_with_call(prompt: Sequence[Mapping[str, Any]], owner: int) -> bool:
    return all(m.get("role") == "tool" for m in prompt[owner + 1 :])


def seen(message: Mapping[str, Any]) -> dict[str, Any]:
    """What a model sees of ``message``: empty content is no content, ``meta`` is dropped."""
    out = {k: message[k] for k in SEEN if message.get(k) not in (None, "", [])}
    calls = out.get("tool_calls")
    if calls:
        out["tool_calls"] = [
            {
                "id": c.get("id"),
                "name": c["function"]["name"],
                "arguments": c["function"].get("arguments"),
            }
            for c in calls
        ]
    return out


def log_faults(
    logged: Sequence[Mapping[str, Any]], added: Sequence[Mapping[str, Any]]
) -> list[str]:
    """How the log differs from what was added, once each, in order (empty: not at all)."""
    want = [json.dumps(seen(m), sort_keys=True) for m in added]
    have = [json.dumps(seen(m), sort_keys=True) for m in logged]
    if want == have:
        return []
    extra, missing = Counter(have) - Counter(want), Counter(want) - Counter(have)
    faults = [f"logged {n} time(s) too many: {text[:120]}" for text, n in extra.items()]
    faults += [f"missing ({n}x): {text[:120]}" for text, n in missing.items()]
    if not faults:
        first = next(i for i, (a, b) in enumerate(zip(want, have, strict=False)) if a != b)
        faults.append(f"logged out of order from message {first}: {have[first][:120]}")
    return faults
