"""One-shot compaction of one conversation read from a file: the library call behind
``contextfold compact``.

``conversation_file.load_conversation`` reads the file (JSON or JSONL, every
error naming the file and the line and column, or the line, message index and
field). ``compact_messages`` logs the messages in an in-memory session, lets a
preset fold the default view until the prompt fits the budget, renders it, and
says what it did in a ``CompactResult``.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from contextfold.core.checks import batch_of, check_budget
from contextfold.core.errors import InvalidInput
from contextfold.core.folds import Fold
from contextfold.core.messages import Message
from contextfold.core.tokens import REPLY_PRIMING
from contextfold.llm.budget import DEFAULT_LIMITS, JobLimits
from contextfold.memory.conversation_file import load_conversation
from contextfold.memory.session import Memory
from contextfold.strategies.presets import DEFAULT_PRESET

ProgressCallback = Callable[[str, int, int], None]
"""Called with a stage name, the work done and the work in all (for a progress bar)."""

_BATCH = 500


@dataclass(frozen=True)
class CompactResult:
    """What compaction did: sizes before and after, the folds, the prompt."""

    preset: str
    budget: int
    encoding: str
    messages_before: int
    tokens_before: int
    messages_after: int
    tokens_after: int
    folds: tuple[Fold, ...]
    folds_made: int
    omitted: int
    clipped: tuple[int, ...]
    seconds: float
    messages: list[Message]
    source: str = ""
    conversation_id: str | None = None
    model: str | None = None
    failed: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()

    @property
    def degraded(self) -> bool:
        """True when a job failed (its model let it down): folds it would have made are missing."""
        return bool(self.failed)

    @property
    def stand_in(self) -> bool:
        """True when model strategies ran on the offline stand-in: no model was given."""
        return self.model is None and self._offline

    @property
    def rescued(self) -> bool:
        """True when jobs failed with the model given and the offline rescue folded their ranges."""
        return self.model is not None and self.degraded and self._offline

    @property
    def _offline(self) -> bool:
        return any((f.usage or {}).get("model") == "offline" for f in self.folds)

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data (``messages`` is the rendered prompt)."""
        return {
            "source": self.source,
            "conversation_id": self.conversation_id,
            "preset": self.preset,
            "model": self.model,
            "stand_in": self.stand_in,
            "rescued": self.rescued,
            "budget": self.budget,
            "encoding": self.encoding,
            "messages_before": self.messages_before,
            "tokens_before": self.tokens_before,
            "messages_after": self.messages_after,
            "tokens_after": self.tokens_after,
            "folds_made": self.folds_made,
            "omitted": self.omitted,
            "clipped": list(self.clipped),
            "seconds": round(self.seconds, 4),
            "degraded": self.degraded,
            "failed": list(self.failed),
            "reasons": list(self.reasons),
            "folds": [fold_summary(f) for f in self.folds],
            "messages": self.messages,
        }


def write_prompt(path: str | Path, messages: Sequence[Message]) -> None:
    """Write a rendered prompt as a JSON list, whole or not at all.

    The text is made first, then written to a temporary file beside ``path``
    and renamed over it, so on any error an existing file is left as it was.
    """
    target = Path(path)
    try:
        data = (json.dumps(list(messages), ensure_ascii=False, indent=1) + "\n").encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"cannot write {target}: the prompt is not JSON text: {exc}") from exc
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise InvalidInput(f"cannot write {target}: {exc.strerror or exc}", field="out") from exc
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, target)
    except OSError as exc:
        os.unlink(tmp)
        raise InvalidInput(f"cannot write {target}: {exc.strerror or exc}", field="out") from exc


def fold_summary(fold: Fold) -> dict[str, Any]:
    """The parts of a fold a report shows."""
    return {
        "kind": fold.kind,
        "start": fold.start,
        "end": fold.end,
        "text": fold.text,
        "data": dict(fold.data),
        "strategy": fold.strategy,
        "tokens_before": fold.tokens_before,
        "tokens_after": fold.tokens_after,
        "usage": dict(fold.usage) if fold.usage is not None else None,
    }


def compact_messages(
    messages: Sequence[Mapping[str, Any]],
    *,
    budget: int,
    preset: str = DEFAULT_PRESET,
    encoding: str = "o200k_base",
    model: str | None = None,
    progress: ProgressCallback | None = None,
    limits: JobLimits = DEFAULT_LIMITS,
) -> CompactResult:
    """Log ``messages``, fold them with ``preset`` until they fit ``budget``, render.

    ``model`` is a ``get_model`` spec; without it, model strategies use the
    offline stand-in and the result says so (``stand_in``). Each job keeps
    ``limits`` (model calls, deadline); a job that fails leaves the result
    ``degraded``, with the strategies that failed and why.
    """
    started = time.perf_counter()
    if check_budget(budget) is None:
        raise InvalidInput("a budget is required", field="budget")
    if progress is not None and not callable(progress):
        raise InvalidInput("progress must be a function (stage, done, total)", field="progress")
    messages = batch_of(messages, "messages")
    memory = Memory(encoding=encoding)
    session = memory.session("compact")
    tokens = REPLY_PRIMING
    for done in range(0, len(messages), _BATCH):
        if progress is not None:
            progress("logging messages", done, len(messages))
        tokens += sum(m.tokens for m in session.extend(messages[done : done + _BATCH]))
    if progress is not None:
        progress("logging messages", len(messages), len(messages))
    view = session.view("default", preset=preset, budget=budget, model=model)
    if progress is not None:
        progress("compacting", 0, 1)
    report = view.compact(limits=limits)
    rendered = view.render_report()
    if progress is not None:
        progress("compacting", 1, 1)
    return CompactResult(
        preset=preset,
        budget=budget,
        encoding=encoding,
        messages_before=len(messages),
        tokens_before=tokens,
        messages_after=len(rendered.messages),
        tokens_after=rendered.tokens,
        folds=tuple(view.folds()),
        folds_made=len(report.folds),
        omitted=rendered.omitted,
        clipped=rendered.clipped,
        seconds=time.perf_counter() - started,
        messages=rendered.messages,
        model=model,
        failed=report.failed,
        reasons=report.reasons,
    )


def compact_file(
    path: str | Path,
    *,
    budget: int,
    preset: str = DEFAULT_PRESET,
    encoding: str = "o200k_base",
    index: int | None = None,
    model: str | None = None,
    progress: ProgressCallback | None = None,
    limits: JobLimits = DEFAULT_LIMITS,
) -> CompactResult:
    """``load_conversation`` then ``compact_messages``."""
    conv = load_conversation(path, index=index)
    result = compact_messages(
        conv.messages,
        budget=budget,
        preset=preset,
        encoding=encoding,
        model=model,
        progress=progress,
        limits=limits,
    )
    return replace(result, source=conv.source, conversation_id=conv.id)
