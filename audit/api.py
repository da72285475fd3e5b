"""The audit API: read the tenant's chain, verify it, and take its signed head.

``GET /audit/head`` returns a digest a client keeps elsewhere; ``POST /audit/verify``
with that digest later proves the history up to it was not rewritten.
"""

from __future__ import annotations

from typing import Annotated

from django.http import HttpRequest
from ninja import Query, Router

from audit.schemas import (
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

KIND = r"^[a-z][a-z0-9_.]{0,63}$"
"""The shape of an audit event kind (``loop.reconciled``)."""


@router.get(
    "/audit/events",
    response=responses({200: AuditPageOut}, READ_ERRORS),
    summary="List audit events",
    description=(
        "The tenant's chain, oldest first, after `after_seq`; only events of one `kind` "
        "(e.g. `loop.reconciled`) when given."
    ),
)
def list_events(
    request: HttpRequest,
    after_seq: Annotated[int, Query(0, ge=0, le=MAX_ID)] = 0,
    limit: Annotated[int, Query(100, ge=1, le=500)] = 100,
    kind: Annotated[str, Query(None, pattern=KIND, description="Only events of this kind.")] = None,  # noqa: RUF013
    tenant: TenantQuery = None,
) -> AuditPageOut:
    caller = caller_of(request, tenant)
    page = audit_events(tenant_id=caller.tenant_id, filters={"kind": kind}, after=after_seq, limit=limit)
    next_after_seq = page.next_key[0] if page.next_key else None
    return AuditPageOut(items=[event_out(r) for r in page.rows], next_after_seq=next_after_seq)


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
