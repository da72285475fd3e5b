"""The runs API: start, list, read, timeline, resume. Parse, call one service, render.

``POST /runs`` is idempotent two ways: with a ``run_id`` (``runs.services.run_start``
returns the existing run for a repeated request) or with an ``Idempotency-Key`` header
(``runs.idempotency_keys.run_start_once``). A first request answers 201, a repeat 200
with ``Idempotent-Replayed: true``.
"""

from __future__ import annotations

from typing import Annotated

from django.http import HttpRequest, HttpResponse
from ninja import Header, Path, Query, Router, Status

from keelgate.loop import StopReason
from runs.idempotency_keys import run_start_once
from runs.models import RunStatus
from runs.outcomes import RunOutcome
from runs.schemas import (
    AGENT,
    RUN_ID,
    RUN_OUT_COLUMNS,
    CheckpointPageOut,
    RunDetailOut,
    RunOut,
    RunPageOut,
    RunResumeIn,
    RunStartIn,
    checkpoint_out,
    run_detail_out,
    run_out,
    run_page_out,
)
from runs.selectors import run_get, run_rows_page, run_state, run_timeline
from runs.services import run_resume
from sitekit.api import CURSOR, READ_ERRORS, WRITE_ERRORS, responses
from tenants.api_auth import API_AUTH, TenantQuery, caller_of

router = Router(tags=["runs"], auth=API_AUTH)

RunIdPath = Annotated[str, Path(pattern=RUN_ID, max_length=128, description="The run's id.")]
IdempotencyKeyHeader = Annotated[
    str,
    Header(
        None,
        alias="Idempotency-Key",
        pattern=r"^[\x21-\x7e]{1,255}$",
        description="Any unique string (e.g. a UUID): a repeated request with it starts nothing new.",
    ),
]


@router.post(
    "/runs",
    response=responses({201: RunOut, 200: RunOut}, WRITE_ERRORS),
    summary="Start a run",
    description=(
        "Queue a run of a registered agent for a worker. 201 with the new run; 200 with the "
        "existing run for a repeat (same `run_id` and request, or same `Idempotency-Key` and "
        "body). Errors: `unknown_agent`, `goal_not_understood` (422), `run_exists` (409: the "
        "`run_id` is taken by another request), `idempotency_key_reused` (422), "
        "`idempotency_key_in_progress` (409), `forbidden` (403: viewers cannot start runs)."
    ),
)
def start_run(
    request: HttpRequest,
    response: HttpResponse,
    payload: RunStartIn,
    tenant: TenantQuery = None,
    idempotency_key: IdempotencyKeyHeader = None,
) -> Status[RunOut]:
    caller = caller_of(request, tenant)
    run, created = run_start_once(
        key=idempotency_key,
        request=payload.model_dump(mode="json"),
        tenant_id=caller.tenant_id,
        agent=payload.agent,
        goal=payload.goal,
        user=caller.user,
        run_id=payload.run_id,
        limits=payload.limits.limits() if payload.limits else None,
    )
    if not created:
        response["Idempotent-Replayed"] = "true"
    return Status(201 if created else 200, run_out(run))


@router.get(
    "/runs",
    response=responses({200: RunPageOut}, READ_ERRORS),
    summary="List runs",
    description=(
        "The tenant's runs, newest first, filtered by status, agent, stop reason and outcome; "
        "cursor-paginated (`invalid_cursor` is 422; a value a filter does not know is 422 "
        "`invalid_input` naming it)."
    ),
)
# Optional query parameters are typed without ``| None``: the OpenAPI schema then says
# "string" (a query value is never JSON null), and None still means absent.
def list_runs(
    request: HttpRequest,
    status: Annotated[RunStatus, Query(None)] = None,
    agent: Annotated[str, Query(None, pattern=AGENT, max_length=64)] = None,  # noqa: RUF013
    stop_reason: Annotated[StopReason, Query(None)] = None,
    outcome: Annotated[RunOutcome, Query(None, description="What happened (runs that ended).")] = None,
    cursor: Annotated[str, Query(None, pattern=CURSOR, description="From `next_cursor`.")] = None,  # noqa: RUF013
    limit: Annotated[int, Query(50, ge=1, le=200)] = 50,
    tenant: TenantQuery = None,
) -> RunPageOut:
    caller = caller_of(request, tenant)
    page = run_rows_page(
        tenant_ids=caller.tenant_ids,
        columns=RUN_OUT_COLUMNS,
        status=status.value if status else None,
        agent=agent,
        stop_reason=stop_reason.value if stop_reason else None,
        outcome=outcome.value if outcome else None,
        cursor=cursor,
        limit=limit,
    )
    return run_page_out(page.rows, page.next_cursor)


@router.get(
    "/runs/{run_id}",
    response=responses({200: RunDetailOut}, READ_ERRORS),
    summary="Read a run",
    description="State, actions with their statuses, usage, stop reason and whether it can be resumed.",
)
def get_run(request: HttpRequest, run_id: RunIdPath, tenant: TenantQuery = None) -> RunDetailOut:
    caller = caller_of(request, tenant)
    run = run_get(tenant_ids=caller.tenant_ids, run_id=run_id)
    return run_detail_out(run, run_state(run))


@router.get(
    "/runs/{run_id}/checkpoints",
    response=responses({200: CheckpointPageOut}, READ_ERRORS),
    summary="List a run's checkpoints",
    description="The run's timeline: every saved state, oldest first, after `after_seq`.",
)
def list_checkpoints(
    request: HttpRequest,
    run_id: RunIdPath,
    after_seq: Annotated[int, Query(0, ge=0, le=2**31 - 1)] = 0,
    limit: Annotated[int, Query(100, ge=1, le=200)] = 100,
    tenant: TenantQuery = None,
) -> CheckpointPageOut:
    caller = caller_of(request, tenant)
    run = run_get(tenant_ids=caller.tenant_ids, run_id=run_id)
    entries = run_timeline(run, after_seq=after_seq, limit=limit + 1)
    more = len(entries) > limit
    entries = entries[:limit]
    return CheckpointPageOut(
        items=[checkpoint_out(e) for e in entries], next_after_seq=entries[-1].seq if more else None
    )


@router.post(
    "/runs/{run_id}/resume",
    response=responses({200: RunOut}, WRITE_ERRORS),
    summary="Resume a stopped run",
    description=(
        "Queue a stopped run (a budget stop or an error) again, optionally with new stop "
        "conditions. `not_resumable` (409) for a run in any other state."
    ),
)
def resume_run(
    request: HttpRequest, run_id: RunIdPath, payload: RunResumeIn | None = None, tenant: TenantQuery = None
) -> RunOut:
    caller = caller_of(request, tenant)
    run_get(tenant_ids=caller.tenant_ids, run_id=run_id)
    given = payload.limits if payload is not None else None
    run = run_resume(
        tenant_id=caller.tenant_id, run_id=run_id, user=caller.user, limits=given.limits() if given else None
    )
    return run_out(run)
