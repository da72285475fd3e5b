"""The audit API: read the tenant's chain, verify it, and take its signed head.

``GET /audit/head`` returns a digest a client keeps elsewhere; ``POST /audit/verify``
with that digest later proves the history up to it was not rewritten.
"""

from __future__ import annotations

from typing import Annotated

from django.http import HttpRequest
from ninja import Query, Router

from audit.schemas import (
    AuditFiltersIn,
    AuditPageOut,
    ChainDigestIn,
    ChainDigestOut,
    ChainReportOut,
    event_out,
    report_out,
)
from audit.selectors import audit_digest, audit_events, audit_verify
from sitekit.api import MAX_ID, READ_ERRORS, WRITE_ERRORS, responses
from tenants.api_auth import API_AUTH, TenantQuery, caller_of

router = Router(tags=["audit"], auth=API_AUTH)

Seq = Annotated[int, Query(None, ge=0, le=MAX_ID)]


@router.get(
    "/audit/events",
    response=responses({200: AuditPageOut}, READ_ERRORS),
    summary="List audit events",
    description=(
        "The tenant's log, oldest first after `after_seq`, or with `newest_first` newest first "
        "before `before_seq` (the other bound narrows the window; both are excluded). The "
        "filters combine: `kind`, `actor`, `run`, `tool`, `from`, `to`, `decisions`, and `q`, a "
        "search line of qualifiers (`actor:alice created:>=2026-12-01`) and text found in run ids. "
        "A bad value is 422 naming its field."
    ),
)
def list_events(
    request: HttpRequest,
    filters: Query[AuditFiltersIn],
    after_seq: Seq = None,
    before_seq: Seq = None,
    newest_first: Annotated[bool, Query(False)] = False,
    limit: Annotated[int, Query(100, ge=1, le=500)] = 100,
    tenant: TenantQuery = None,
) -> AuditPageOut:
    caller = caller_of(request, tenant)
    page = audit_events(
        tenant_id=caller.tenant_id,
        filters=filters.listing_values(),
        after_seq=after_seq,
        before_seq=before_seq,
        newest_first=newest_first,
        limit=limit,
    )
    following = page.next_key[0] if page.next_key else None
    return AuditPageOut(
        items=[event_out(r) for r in page.rows],
        next_after_seq=None if newest_first else following,
        next_before_seq=following if newest_first else None,
    )


@router.get(
    "/audit/verify",
    response=responses({200: ChainReportOut}, READ_ERRORS),
    summary="Verify the audit chain",
    description="Walk the tenant's whole chain and report the first break (200 either way: read `ok`).",
)
def verify(request: HttpRequest, tenant: TenantQuery = None) -> ChainReportOut:
    caller = caller_of(request, tenant)
    return report_out(audit_verify(tenant_id=caller.tenant_id))


@router.post(
    "/audit/verify",
    response=responses({200: ChainReportOut}, WRITE_ERRORS),
    summary="Verify the audit chain against a kept digest",
    description=(
        "As `GET /audit/verify`, and the chain must still hold the digest's head (reason "
        "`digest_mismatch` otherwise). A digest that is malformed, of another tenant or not "
        "signed by this site is 422 (`digest_invalid`, `digest_key_mismatch`, "
        "`digest_signature_invalid`)."
    ),
)
def verify_against(
    request: HttpRequest, payload: ChainDigestIn, tenant: TenantQuery = None
) -> ChainReportOut:
    caller = caller_of(request, tenant)
    return report_out(audit_verify(tenant_id=caller.tenant_id, against=payload.model_dump()))


@router.get(
    "/audit/head",
    response=responses({200: ChainDigestOut}, (*READ_ERRORS, 409)),
    summary="Get the signed chain head",
    description=(
        "The verified head of the tenant's chain as a signed digest. 404 `audit_chain_empty` "
        "for a tenant without events, 409 `audit_chain_broken` rather than sign a broken chain."
    ),
)
def head(request: HttpRequest, tenant: TenantQuery = None) -> ChainDigestOut:
    caller = caller_of(request, tenant)
    return ChainDigestOut(**audit_digest(tenant_id=caller.tenant_id))
