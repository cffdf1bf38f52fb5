"""``/api/v1/sessions/{sid}/views``: store a view's settings, render it, list its folds, compact it.

A view stored or used here is handed to the background runner, which compacts
it after appends from then on. A view's answer carries its background job;
with workers, compact queues the job for them (202) instead of running it here.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from starlette.concurrency import run_in_threadpool

from contextfold.core.checks import MAX_BUDGET
from contextfold.core.errors import InvalidInput, NotFound
from contextfold.core.log import ViewRecord
from contextfold.memory.bridge import standing
from contextfold.memory.session import Session
from contextfold.memory.view import View
from contextfold.server.auth import Tenant
from contextfold.server.models import (
    ERRORS,
    CompactOut,
    CompactQueued,
    FoldList,
    FoldOut,
    JobOut,
    RenderOut,
    SessionPath,
    ViewIn,
    ViewList,
    ViewOut,
    ViewPath,
)
from contextfold.server.responses import FastJSON
from contextfold.server.service import Service, ServiceDep

router = APIRouter(prefix="/api/v1/sessions/{sid}/views", tags=["views"], responses=ERRORS)

Budget = Annotated[
    int | None,
    Query(gt=0, le=MAX_BUDGET, description="tokens; the view's budget when absent"),
]
BranchQuery = Annotated[
    int | None,
    Query(ge=0, description="the branch (its head seq, GET .../branches); default the newest"),
]


def stored_view(svc: Service, tenant: str, sid: str, name: str) -> View:
    """The session's stored view, watched by the runner; 404 when it was never stored."""
    session = svc.session(tenant, sid)
    if svc.view(session, name).version == 0:
        raise NotFound(f"no view {name!r} in session {sid!r}")
    return svc.watch(session, name)


@router.put("/{name}")
async def put_view(
    sid: SessionPath, name: ViewPath, body: ViewIn, svc: ServiceDep, tenant: Tenant
) -> ViewOut:
    """Create or update the view: settings given replace the stored ones, others stay."""
    changes: dict[str, Any] = body.model_dump(
        exclude_unset=True, exclude={"expected_version", "preset", "pipeline", "options"}
    )
    given = body.model_fields_set
    if body.preset is not None and body.pipeline is not None:
        raise InvalidInput("give a preset or a pipeline, not both", field="pipeline")
    if body.preset is not None:
        changes.update(preset=body.preset, pipeline=None, options=body.options or {})
    elif body.pipeline is not None:
        changes.update(pipeline=body.pipeline, preset=None, options={})
    elif "options" in given:
        changes["options"] = body.options or {}

    def put() -> tuple[Session, ViewRecord, int]:
        session = svc.session(tenant, sid)
        view = svc.view(session, name)
        view.update(expected_version=body.expected_version, **changes)
        svc.watch(session, name)
        record = session.view_record(name)
        if record is None:  # deleted in between by another request
            raise NotFound(f"no view {name!r} in session {sid!r}")
        return session, record, view.floor()

    session, record, floor = await svc.run(put)
    [job] = await svc.jobs(session, [name])
    return ViewOut.of(record, floor, job)


@router.get("")
async def list_views(sid: SessionPath, svc: ServiceDep, tenant: Tenant) -> ViewList:
    def listing() -> tuple[Session, list[tuple[ViewRecord, int]]]:
        session = svc.session(tenant, sid)
        records = session.view_records()
        return session, [(r, svc.view(session, r.name).floor()) for r in records]

    session, found = await svc.run(listing)
    jobs = await svc.jobs(session, [r.name for r, _ in found])
    return ViewList(
        views=[ViewOut.of(r, floor, job) for (r, floor), job in zip(found, jobs, strict=True)]
    )


@router.get("/{name}")
async def get_view(sid: SessionPath, name: ViewPath, svc: ServiceDep, tenant: Tenant) -> ViewOut:
    def get() -> tuple[Session, ViewRecord, int]:
        session = svc.session(tenant, sid)
        record = session.view_record(name)
        if record is None:
            raise NotFound(f"no view {name!r} in session {sid!r}")
        return session, record, svc.view(session, name).floor()

    session, record, floor = await svc.run(get)
    [job] = await svc.jobs(session, [name])
    return ViewOut.of(record, floor, job)


@router.get("/{name}/render", response_model=RenderOut)
async def render(
    sid: SessionPath,
    name: ViewPath,
    svc: ServiceDep,
    tenant: Tenant,
    budget: Budget = None,
    query: Annotated[
        str | None,
        Query(max_length=10_000, description="recall by this text, not the latest user message"),
    ] = None,
    branch: BranchQuery = None,
) -> FastJSON:
    """The view's prompt for the next model call, with what render did to fit it: the
    newest branch's, or ``branch``'s."""
    return FastJSON(await render_body(svc, tenant, sid, name, budget, query, branch))


async def render_body(
    svc: Service,
    tenant: str,
    sid: str,
    name: str,
    budget: int | None = None,
    query: str | None = None,
    branch: int | None = None,
) -> dict[str, Any]:
    """The render's answer, shared with ``server.hot``."""

    def rendered() -> dict[str, Any]:
        view = stored_view(svc, tenant, sid, name)
        prompt = view.render_report(budget, query=query, branch=branch)
        report = {
            "tokens": prompt.tokens,
            "budget": prompt.budget,
            "folds": list(prompt.folds),
            "omitted": prompt.omitted,
            "clipped": list(prompt.clipped),
            "whole": prompt.whole,
            "recalled": list(prompt.recalled),
            "pinned": list(prompt.pinned),
            "provisional": [
                {"id": i, "start": start, "end": end} for i, start, end in standing(prompt.folds)
            ],
        }
        return {"messages": prompt.messages, "report": report}

    body = await svc.run(rendered)
    svc.metrics.renders.inc()
    return body


@router.get("/{name}/folds", response_model=FoldList)
async def folds(
    sid: SessionPath,
    name: ViewPath,
    svc: ServiceDep,
    tenant: Tenant,
    superseded: Annotated[bool, Query(description="include superseded folds")] = False,
    branch: BranchQuery = None,
) -> FastJSON:
    """The view's folds of a branch (the newest, or ``branch``) by start: the range of the
    log each covers, how, and what it saved against the logged messages of that range
    (``log_tokens - tokens_after``)."""

    def listing() -> list[dict[str, Any]]:
        view = stored_view(svc, tenant, sid, name).on(branch)
        found = view.folds(include_superseded=superseded)
        log = view.log_tokens(found)
        return [FoldOut.data(f, log[f.id]) for f in found]

    return FastJSON({"folds": await svc.run(listing)})


@router.post(
    "/{name}/compact",
    response_model=CompactOut,
    responses={
        202: {
            "model": CompactQueued,
            "description": "with workers (serve --workers): the job is queued for them, "
            "a parked view unparked; the view's job says when it ran",
        }
    },
)
async def compact(
    sid: SessionPath, name: ViewPath, svc: ServiceDep, tenant: Tenant, budget: Budget = None
) -> CompactOut | Response:
    """Run the compaction cycle now, until no strategy plans a job (it may call a model).

    With workers the cycle runs on them: the job is queued (202), and a worker
    compacts to the view's stored budget, so ``budget`` is refused.
    """
    view = await svc.run(stored_view, svc, tenant, sid, name)
    workers = svc.workers
    if workers is not None:
        if budget is not None:
            raise InvalidInput(
                "with workers, compact uses the view's stored budget: PUT the view's budget",
                field="budget",
            )
        from contextfold.server.jobs import compact_later

        queued, job = await run_in_threadpool(compact_later, workers, view)
        answer = CompactQueued(queued=queued, job=JobOut.of(job))
        return Response(answer.model_dump_json(), status_code=202, media_type="application/json")
    # Always off the loop: the cycle may wait on a model for a long time.
    report = await run_in_threadpool(view.compact, budget)
    log = await run_in_threadpool(view.log_tokens, report.folds)
    return CompactOut.of(report, log)
