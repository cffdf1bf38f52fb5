"""What makes a stored fold unfit to render: the checks a view runs on the folds it reads.

A fold committed by contextfold passes all of them; a fold that fails one was
damaged or edited after its commit, and is quarantined by the view
(``contextfold.memory.heal``) instead of rendered. Three kinds of check:

- ``own_fault``: the fold on its own. Its messages are valid messages with
  whole tool units, and its stored token count is the count of its messages
  (render adds stored counts, so a wrong one could overflow the budget).
- ``place_fault``: the fold against the log. It ends inside the log, an
  in-place fold leaves the system prompt and the latest user message alone
  (render must show both), and neither of its edges cuts a tool unit.
- ``set_faults``: the active folds together. In-place folds never overlap
  (of two that do, the newer stays, as a commit would have it), and one facts
  fold at most is active.

All are pure; reading the log is the caller's part.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from contextfold.core.errors import InvalidInput
from contextfold.core.folds import Fold
from contextfold.core.messages import Message, validate_messages
from contextfold.core.tokens import TokenCounter
from contextfold.core.units import tool_unit_faults


def own_fault(fold: Fold, counter: TokenCounter) -> str | None:
    """Why ``fold`` cannot be rendered whatever the log holds, or None."""
    try:
        validate_messages(fold.messages)
    except InvalidInput as exc:
        return f"its messages are not valid: {exc}"
    # A call the log never answered is answered at render (``answer_missing``);
    # a result without its call cannot be.
    if tool_unit_faults(fold.messages, answered=()):
        return "its messages split a tool unit"
    counted = sum(counter.message(m) for m in fold.messages)
    if fold.tokens_after != counted:
        return f"it says it costs {fold.tokens_after} tokens, its messages count {counted}"
    return None


def place_fault(
    fold: Fold,
    *,
    last_seq: int,
    system: int,
    latest_user: int | None,
    first: Message | None,
    after: Message | None,
) -> str | None:
    """Why ``fold`` does not fit the log, or None.

    ``system`` is the length of the leading system prompt, ``latest_user`` the
    seq of the latest user message, ``first`` the logged message at the fold's
    start and ``after`` the one just past its end (None where the log has none).
    """
    if fold.end > last_seq:
        return f"it covers seq {fold.start}..{fold.end}, past the log's last seq {last_seq}"
    if fold.placement != "in_place":
        return None
    if fold.start <= system:
        return f"it starts at seq {fold.start}, inside the system prompt (seq 1..{system})"
    if latest_user is not None and fold.start <= latest_user <= fold.end:
        return f"it covers the latest user message (seq {latest_user}), which render must show"
    if first is not None and first.get("role") == "tool":
        return f"it starts at seq {fold.start}, a tool result whose call lies before it"
    if after is not None and after.get("role") == "tool":
        return f"it ends at seq {fold.end}, before a tool result of its unit"
    return None


def set_faults(active: Sequence[Fold]) -> dict[str, str]:
    """Fold id -> why, for active folds that cannot be rendered beside the others.

    Newest first, each in-place fold is kept unless it meets one already kept;
    every facts fold but the newest is at fault.
    """
    faults: dict[str, str] = {}
    newest_first = sorted(active, key=lambda f: (f.created_at, f.end), reverse=True)
    starts: list[int] = []
    kept: list[Fold] = []
    facts: Fold | None = None
    for fold in newest_first:
        if fold.placement == "facts":
            if facts is None:
                facts = fold
            else:
                faults[fold.id] = f"facts fold {facts.id} is active and newer"
            continue
        i = bisect.bisect_left(starts, fold.start)
        near = [kept[j] for j in (i - 1, i) if 0 <= j < len(kept)]
        met = next((k for k in near if k.start <= fold.end and fold.start <= k.end), None)
        if met is not None:
            faults[fold.id] = (
                f"it covers seq {fold.start}..{fold.end}, meeting newer active fold "
                f"{met.id} over {met.start}..{met.end}"
            )
            continue
        starts.insert(i, fold.start)
        kept.insert(i, fold)
    return faults
