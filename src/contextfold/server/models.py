"""The request and response bodies of ``/api/v1``: the OpenAPI spec is made from these.

The request models check shapes (types, lengths, the id pattern); the library
checks meaning (a tool result answering a call, a known preset) and refuses
with the same error shape. Messages are in OpenAI chat format, as the library
stores them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt

from contextfold.core.checks import MAX_BUDGET
from contextfold.core.folds import Fold
from contextfold.core.log import LoggedMessage, SessionInfo, ViewRecord
from contextfold.memory.config import as_read
from contextfold.memory.cycle import CompactionReport
from contextfold.server.ids import NAME

if TYPE_CHECKING:
    from contextfold.workers.queue import JobState

MAX_MESSAGES = 1000
"""The most messages one request may send: a REST append, or a proxy call's conversation."""
SESSION_ID_PATTERN = VIEW_NAME_PATTERN = f"^{NAME}$"
SessionPath = Annotated[str, Path(pattern=SESSION_ID_PATTERN, description="the session id")]
ViewPath = Annotated[str, Path(pattern=VIEW_NAME_PATTERN, description="the view's name")]


class Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ChatMessage(Closed):
    """One message in OpenAI chat format (``meta`` is stored, never sent to a model)."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    refusal: str | None = None
    meta: dict[str, Any] | None = None


class SessionIn(Closed):
    id: str | None = Field(None, pattern=SESSION_ID_PATTERN, description="generated when absent")
    system: str | None = Field(None, description="the system prompt, logged as message 1")
    meta: dict[str, Any] | None = None
    encoding: str | None = Field(None, description="o200k_base (default), cl100k_base, approx")


class SessionOut(BaseModel):
    id: str
    encoding: str
    meta: dict[str, Any]
    created_at: float
    last_seq: int
    messages: int
    tokens: int
    last_at: float

    @classmethod
    def of(cls, session_id: str, info: SessionInfo) -> SessionOut:
        return cls(
            id=session_id,
            encoding=info.encoding,
            meta=info.meta,
            created_at=info.created_at,
            last_seq=info.last_seq,
            messages=info.messages,
            tokens=info.tokens,
            last_at=info.last_at,
        )


class SessionList(BaseModel):
    sessions: list[SessionOut]
    next: str | None = Field(description="pass as ?after= for the next page; null on the last")


class MessagesIn(Closed):
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    parent: int | None = Field(
        None,
        ge=0,
        description="append after this seq (0: a new first message), starting a branch when "
        "it is not a branch's last; default: after the newest message",
    )


class LoggedOut(BaseModel):
    seq: int
    parent: int = Field(description="the seq of the message before it on its branch; 0: none")
    message: dict[str, Any]
    tokens: int
    created_at: float

    @staticmethod
    def data(logged: LoggedMessage) -> dict[str, Any]:
        return {
            "seq": logged.seq,
            "parent": logged.parent or 0,
            "message": logged.message,
            "tokens": logged.tokens,
            "created_at": logged.created_at,
        }


class BranchOut(BaseModel):
    head: int = Field(description="the branch's last seq: pass it as ?branch=")
    fork: int | None = Field(
        description="the nearest earlier message another branch continues too (0: the "
        "start); null for the only branch"
    )
    length: int
    last_at: float


class BranchList(BaseModel):
    branches: list[BranchOut] = Field(description="newest head first")


class Appended(BaseModel):
    messages: list[LoggedOut]


class History(BaseModel):
    messages: list[LoggedOut]
    next_after: int | None = Field(description="pass as ?after= for the next page; null at the end")


class ViewIn(Closed):
    """Settings to store; those left out keep their stored value."""

    preset: str | None = None
    options: dict[str, Any] | None = None
    pipeline: dict[str, Any] | None = None
    # Strict numbers: JSON's true is not the budget 1, nor the water mark 1.0.
    budget: StrictInt | None = Field(None, gt=0, le=MAX_BUDGET)
    model: str | None = Field(None, min_length=1)
    filter: dict[str, Any] | None = None
    high_water: StrictFloat | None = Field(None, gt=0, le=1)
    low_water: StrictFloat | None = Field(None, gt=0, le=1)
    recall: bool | dict[str, Any] | None = Field(
        None, description='recall from the log: true, false or {"share": 0.4, "limit": 16}'
    )
    wait_for_fold_s: StrictFloat | StrictInt | None = Field(
        None,
        ge=0,
        le=60,
        description="seconds a render that would leave messages out waits for the view's "
        "fold in flight before it stands provisional folds there; 0 (the default) waits not",
    )
    pins: list[str | dict[str, Any]] | None = Field(
        None,
        description='what comes back verbatim after the folds: pin presets ("todo", "rules", '
        '"plan") or rules {"filter": {...}, "mode": "latest" | "all", "key": "tool" | "path"}',
    )
    pins_share: StrictFloat | None = Field(
        None, gt=0, lt=1, description="the most of the budget pins take (default 0.25)"
    )
    expected_version: StrictInt | None = Field(
        None, ge=0, description="refuse the update (409) unless the view is at this version"
    )


class JobOut(BaseModel):
    """The view's background compaction job; with workers, as Redis tells it."""

    state: Literal["pending", "running", "parked", "failing"] = Field(
        description="pending: queued for a worker; running: being compacted; parked: failed "
        "too often in a row, nothing is queued until its settings change or compact is "
        "asked; failing: failed lately, tried again after a pause"
    )
    since: float | None = Field(
        default=None,
        description="epoch seconds: of the first append the job covers (pending, running), "
        "of parking; null when the runner runs in this process",
    )
    failures: int = Field(default=0, description="failures in a row")
    worker: str | None = Field(default=None, description="the worker running it (host:pid:id)")
    reason: str | None = Field(default=None, description="why the last attempt failed (parked)")

    @classmethod
    def of(cls, job: JobState | None) -> JobOut | None:
        if job is None:
            return None
        return cls(
            state=job.state,
            since=job.since,
            failures=job.failures,
            worker=job.worker or None,
            reason=job.reason or None,
        )


class ViewOut(BaseModel):
    name: str
    version: int
    config: dict[str, Any]
    updated_at: float
    floor: int = Field(
        description="the smallest budget the view renders at now: the system prompt and "
        "the latest user message (unless a fold holds it); a render below it is refused"
    )
    job: JobOut | None = Field(
        default=None,
        description="the view's compaction job; null when there is none (or, with workers, "
        "when their Redis does not answer)",
    )

    @classmethod
    def of(cls, record: ViewRecord, floor: int, job: JobOut | None = None) -> ViewOut:
        return cls(
            name=record.name,
            version=record.version,
            config=as_read(record.config),
            updated_at=record.updated_at,
            floor=floor,
            job=job,
        )


class ViewList(BaseModel):
    views: list[ViewOut]


class ProvisionalOut(BaseModel):
    id: str
    start: int
    end: int


class RenderReport(BaseModel):
    tokens: int
    budget: int | None
    folds: list[str] = Field(description="ids of the folds the prompt holds")
    omitted: int = Field(description="messages left out by the last-resort cut")
    clipped: list[int] = Field(description="seq of the messages shortened to fit")
    whole: bool = Field(description="nothing left out or shortened")
    recalled: list[int] = Field(description="seq of the logged messages recalled into the prompt")
    pinned: list[int] = Field(
        default_factory=list,
        description="seq of the logged messages the view's pins bring back after the folds",
    )
    provisional: list[ProvisionalOut] = Field(
        default_factory=list,
        description="provisional folds in the prompt: made at render, without a model, where "
        "the budget would have cut, until the view's own fold lands",
    )


class RenderOut(BaseModel):
    messages: list[dict[str, Any]]
    report: RenderReport


class FoldOut(BaseModel):
    id: str
    start: int
    end: int
    kind: str
    strategy: str
    model: str | None
    tokens_before: int = Field(
        description="what the view held over the range just before this fold (an older "
        "fold it supersedes, or the log)"
    )
    tokens_after: int = Field(description="the fold's own tokens")
    log_tokens: int = Field(
        description="tokens of the logged messages start..end: the fold saved "
        "log_tokens - tokens_after"
    )
    placement: str
    superseded_by: str | None
    created_at: float
    text: str

    @staticmethod
    def data(fold: Fold, log_tokens: int) -> dict[str, Any]:
        usage = fold.usage or {}
        model = usage.get("model")
        return {
            "id": fold.id,
            "start": fold.start,
            "end": fold.end,
            "kind": fold.kind,
            "strategy": fold.strategy,
            "model": model if isinstance(model, str) else None,
            "tokens_before": fold.tokens_before,
            "tokens_after": fold.tokens_after,
            "log_tokens": log_tokens,
            "placement": fold.placement,
            "superseded_by": fold.superseded_by,
            "created_at": fold.created_at,
            "text": fold.text,
        }


class FoldList(BaseModel):
    folds: list[FoldOut]


class CompactOut(BaseModel):
    folds: list[FoldOut] = Field(description="the folds this compaction committed")
    conflicts: int
    tokens_before: int
    tokens_after: int
    failed: list[str] = Field(description="strategies whose job failed")
    reasons: list[str] = Field(description="why each failed, in the order of failed")
    degraded: bool

    @classmethod
    def of(cls, report: CompactionReport, log_tokens: dict[str, int]) -> CompactOut:
        return cls(
            folds=[FoldOut(**FoldOut.data(f, log_tokens[f.id])) for f in report.folds],
            conflicts=report.conflicts,
            tokens_before=report.tokens_before,
            tokens_after=report.tokens_after,
            failed=list(report.failed),
            reasons=list(report.reasons),
            degraded=report.degraded,
        )


class CompactQueued(BaseModel):
    """Compact now with workers: the job is queued for them (answered 202)."""

    queued: bool = Field(description="this request queued the job; false: one was pending already")
    job: JobOut | None = Field(description="the view's job now; null if a worker has finished it")


class ErrorDetail(BaseModel):
    code: str
    message: str
    field: str | None
    index: int | None


class ErrorOut(BaseModel):
    error: ErrorDetail


ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut, "description": text}
    for status, text in {
        401: "missing, unknown or revoked API key",
        404: "no such session or view (for this key's tenant)",
        409: "conflict",
        413: "body over the size limit",
        422: "invalid input (field and index name the fault)",
        503: "the store is unavailable (store_unavailable), or the workers' Redis, for "
        "compact with workers (broker_unavailable)",
    }.items()
}
