"""Recall: logged messages that were folded away, brought back into a prompt as one block.

The log keeps everything, so what compaction folded away can still be found
(the store's full-text search does the finding, ``contextfold.memory.recall``).
This module is the pure part: the settings, which found units fit the room
left, how they read, and where the block goes. Render only leaves the place
(``Rendered.recall_at``), so this lives beside the view's recall, not in core.

The block is one ``system`` message, like render's own markers (every adapter
takes a system message mid-conversation)::

    [contextfold: recalled from earlier in this conversation; each line is ...]
    #12 8 May, 2023 user: I went to a LGBTQ support group yesterday
    #40 2026-11-25 assistant: read_file({"path": "setup.py"})
    #41 2026-11-25 tool: ...

Written as text, in log order, a recalled tool call and its results are lines,
not protocol messages: nothing re-emitted out of order can split a tool unit
or answer a call twice. A unit (a tool call and all its results, or one
message) is recalled whole or not at all; the best-ranked units are taken
first and shown in log order. The block goes where render left room for it
(``Rendered.recall_at``): after the folds, before the recent raw messages. In
the newest turn it would leave more of the prompt to a provider's prefix cache,
but framework adapters hand the prompt back as their history and read the
latest user message as the turn's last: a block after it would be taken for
it, and one before it for where their own history resumes.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.log import LoggedMessage
from contextfold.core.messages import Message, text_of
from contextfold.core.render import Rendered
from contextfold.core.tokens import TokenCounter

DEFAULT_SHARE = 0.4
"""The most of the budget recall may take; it takes only room the prompt leaves free.

Chosen on the tuning halves at a 10% budget (offline preset, the question as
the query), when recall still made its room by rendering the window again:
retention with limit 16 for a share of 0.1 / 0.2 / 0.3 / 0.4 / 0.5 was LoCoMo
0.76 / 0.84 / 0.88 / 0.89 / 0.90 and LongMemEval 0.33 / 0.36 / 0.41 / 0.41 / 0.53
(offline without recall 0.55 and 0.36): LoCoMo levels off past 0.4. Recall now
takes only the free room, which the default water marks keep between 0.1 and
0.3 of the budget, so the share binds only for views with lower marks."""
DEFAULT_LIMIT = 16
"""At most this many units recalled, best ranked first. On the same runs at a share
of 0.4, LoCoMo's retention for a limit of 4 / 8 / 16 / 32 was 0.79 / 0.85 / 0.89 /
0.89: past 16 nothing more fits."""

HEADER = (
    "[contextfold: recalled from earlier in this conversation; each line is #seq date role: text]"
)


@dataclass(frozen=True)
class RecallSettings:
    """How much a view recalls: at most ``share`` of the budget and ``limit`` units."""

    share: float = DEFAULT_SHARE
    limit: int = DEFAULT_LIMIT

    @classmethod
    def of(cls, value: Mapping[str, Any] | bool | None, default: bool) -> RecallSettings | None:
        """The settings a view's ``recall`` value asks for (None: recall is off).

        None takes the preset's default (``default``), a bool turns recall on or
        off with the default share and limit, a mapping turns it on with its own.
        """
        if value is None:
            return cls() if default else None
        if isinstance(value, bool):
            return cls() if value else None
        if not isinstance(value, Mapping):
            raise InvalidInput(
                "recall is true, false, or an object with share and limit", field="recall"
            )
        unknown = sorted(set(value) - {"share", "limit"})
        if unknown:
            raise InvalidInput(
                f"unknown recall setting {unknown[0]!r}", field=f"recall.{unknown[0]}"
            )
        share = value.get("share", DEFAULT_SHARE)
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share < 1:
            raise InvalidInput(
                "recall.share is a share of the budget in (0, 1)", field="recall.share"
            )
        limit = value.get("limit", DEFAULT_LIMIT)
        if type(limit) is not int or limit < 1:
            raise InvalidInput("recall.limit is a positive integer", field="recall.limit")
        return cls(float(share), limit)


@dataclass(frozen=True)
class Block:
    """A recall block: its message, its exact token count, and the seqs it recalls."""

    message: Message
    tokens: int
    seqs: tuple[int, ...]


def prefix_of(logged: LoggedMessage) -> str:
    """A recalled line's start: ``#seq date role``, the speaker's name after the role
    when the message has one, and a colon."""
    name = logged.message.get("name")
    speaker = f"{logged.role} {name}" if isinstance(name, str) and name else logged.role
    return f"#{logged.seq} {date_of(logged)} {speaker}: "


def line_of(logged: LoggedMessage) -> str:
    """How a recalled message reads: ``#seq date role: text``."""
    return prefix_of(logged) + text_of(logged.message)


def date_of(logged: LoggedMessage) -> str:
    """When the message was said: the date its ``meta`` gives (imported conversations
    carry their own, as LoCoMo's ``session_date_time``), else the day it was logged (UTC)."""
    meta = logged.message.get("meta")
    if isinstance(meta, Mapping):
        for key in ("session_date_time", "session_date", "date", "timestamp"):
            given = meta.get(key)
            if isinstance(given, str) and given:
                return given
    return time.strftime("%Y-%m-%d", time.gmtime(logged.created_at))


def block_of(units: Sequence[Sequence[LoggedMessage]]) -> Message:
    """The block's message for ``units``, their messages in log order."""
    ordered = sorted((m for unit in units for m in unit), key=lambda m: m.seq)
    return {"role": "system", "content": "\n".join([HEADER, *(line_of(m) for m in ordered)])}


@dataclass(frozen=True)
class Recallable:
    """A unit that may be recalled, and about what its lines cost.

    The estimate is each message's stored count (its per-message overhead pays
    for the newline) plus its short prefix at a token per three characters (digits
    and dates cut finer than words; words take about four): nothing is tokenized
    per candidate, only the block ``fit_block`` returns, once.
    """

    messages: tuple[LoggedMessage, ...]
    cost: int

    @classmethod
    def of(cls, unit: Sequence[LoggedMessage]) -> Recallable:
        cost = sum(m.tokens + len(prefix_of(m)) // 3 + 1 for m in unit)
        return cls(tuple(unit), cost)


def fit_block(
    ranked: Sequence[Recallable], room: int | None, limit: int, counter: TokenCounter
) -> Block | None:
    """The best-ranked whole units that fit ``room`` tokens as one block (None: none fits).

    Units are taken best first while their estimated cost fits; then the block
    is counted exactly, and the worst-ranked unit dropped until it fits.
    """
    if room is not None and room <= 0:
        return None
    used = _header_tokens(counter)
    chosen: list[Sequence[LoggedMessage]] = []
    for candidate in ranked:
        if len(chosen) == limit:
            break
        if room is None or used + candidate.cost <= room:
            chosen.append(candidate.messages)
            used += candidate.cost
    while chosen:
        message = block_of(chosen)
        tokens = counter.message(message)
        if room is None or tokens <= room:
            seqs = tuple(sorted(m.seq for unit in chosen for m in unit))
            return Block(message, tokens, seqs)
        chosen.pop()
    return None


@functools.lru_cache(maxsize=16)
def _header_tokens(counter: TokenCounter) -> int:
    """What an empty block (its header line alone) costs with ``counter``."""
    return counter.message(block_of([]))


def with_block(rendered: Rendered, block: Block) -> Rendered:
    """``rendered`` with ``block`` at its ``recall_at`` place, counted in its tokens; the
    block's message is a copy, so editing a prompt never edits a block kept for the turn."""
    at = len(rendered.messages) if rendered.recall_at is None else rendered.recall_at
    messages = [*rendered.messages[:at], dict(block.message), *rendered.messages[at:]]
    return replace(
        rendered, messages=messages, tokens=rendered.tokens + block.tokens, recalled=block.seqs
    )
