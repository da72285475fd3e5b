"""The audit API: read the tenant's chain, verify it, and take its signed head.

``GET /audit/head`` returns a digest a client keeps elsewhere; ``POST /audit/verify``
with that digest later proves the history up to it was not rewritten. Under
``/audit/tlog/<tenant>/`` the log is served as C2SP ``tlog-tiles`` (:mod:`audit.tiles`),
the prefix a mirror or a monitor is given.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.middleware.gzip import GZipMiddleware
from django.utils.cache import patch_cache_control
from ninja import Path, Query, Router
from pydantic import Field

from audit.checkpoints import cosigned_note, latest_checkpoint, log_origin, log_verifier_key
from audit.exports import MAX_PREVIOUS, export_bundle
from audit.proofs import consistency, inclusion
from audit.schemas import (
    AuditFiltersIn,
    AuditPageOut,
    ChainDigestIn,
    ChainDigestOut,
    ChainReportOut,
    ConsistencyProofOut,
    InclusionProofOut,
    SignedCheckpointPageOut,
    VerifierKeyOut,
    b64_hashes,
    checkpoint_out,
    event_out,
    report_out,
)
from audit.selectors import audit_checkpoints, audit_digest, audit_events, audit_verify
from audit.tiles import entry_bundle, hash_tile, parse_tile_path
from sitekit.api import MAX_ID, READ_ERRORS, SLUG, WRITE_ERRORS, responses
from sitekit.errors import NotFoundError
from tenants.access import require_role
from tenants.api_auth import API_AUTH, Caller, TenantQuery, caller_of
from tenants.models import Role

router = Router(tags=["audit"], auth=API_AUTH)

Seq = Annotated[int | None, Query(None, ge=0, le=MAX_ID)]
PreviousSize = Annotated[int, Field(ge=1, le=MAX_ID)]
"""The size of a checkpoint an auditor kept (checkpoints are signed over one event or more)."""


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
    description=(
        "Walk the tenant's whole log and report the first break (200 either way: read `ok`). After "
        "a retirement the walk starts at the cut, from the tree's kept hashes."
    ),
)
def verify(request: HttpRequest, tenant: TenantQuery = None) -> ChainReportOut:
    caller = caller_of(request, tenant)
    return report_out(audit_verify(tenant_id=caller.tenant_id))


@router.post(
    "/audit/verify",
    response=responses({200: ChainReportOut}, (*WRITE_ERRORS, 410)),
    summary="Verify the audit chain against a kept digest",
    description=(
        "As `GET /audit/verify`, and the chain must still hold the digest's head (reason "
        "`digest_mismatch` otherwise). A digest that is malformed, of another tenant or not "
        "signed by this site is 422 (`digest_invalid`, `digest_key_mismatch`, "
        "`digest_signature_invalid`). A digest of a retired event that names a chain hash, not a "
        "root the kept hashes prove, is 410 `audit_retired`: check it against the archive."
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


@router.get(
    "/audit/checkpoint",
    response=responses({}, READ_ERRORS),  # 200 is text/plain, documented below
    summary="Get the latest signed checkpoint",
    description=(
        "The tenant's newest C2SP `tlog-checkpoint`, as a C2SP signed note (`text/plain`): as signed, "
        "then a C2SP `cosignature/v1` line per witness that cosigned it (`KEELGATE_AUDIT_WITNESSES`). "
        "Verify it with `GET /audit/key` (a verifier skips lines of keys it does not know), and the "
        "cosignatures with the witnesses' keys. 404 `not_found` before the first checkpoint."
    ),
    openapi_extra={
        "responses": {200: {"description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}}}
    },
)
def checkpoint(request: HttpRequest, tenant: TenantQuery = None) -> HttpResponse:
    caller = caller_of(request, tenant)
    latest = latest_checkpoint(caller.tenant_id)
    if latest is None:
        raise NotFoundError("no checkpoint yet")
    return HttpResponse(cosigned_note(latest), content_type="text/plain; charset=utf-8")


@router.get(
    "/audit/checkpoints",
    response=responses({200: SignedCheckpointPageOut}, READ_ERRORS),
    summary="List signed checkpoints",
    description="Every checkpoint the site signed for the tenant, newest first, before `before_size`.",
)
def checkpoints(
    request: HttpRequest,
    before_size: Annotated[int | None, Query(None, ge=1, le=MAX_ID)] = None,
    limit: Annotated[int, Query(100, ge=1, le=500)] = 100,
    tenant: TenantQuery = None,
) -> SignedCheckpointPageOut:
    caller = caller_of(request, tenant)
    page = audit_checkpoints(tenant_id=caller.tenant_id, before=before_size, limit=limit)
    return SignedCheckpointPageOut(
        items=[checkpoint_out(row) for row in page.rows],
        next_before_size=page.next_key[0] if page.next_key else None,
    )


@router.get(
    "/audit/proof/inclusion",
    response=responses({200: InclusionProofOut}, (*READ_ERRORS, 410)),
    summary="Prove an event is in the log",
    description=(
        "The RFC 9162 inclusion proof of event `seq` (leaf `seq - 1`) in the tree of `tree_size` "
        "leaves (default: the log's size), for Go's `tlog.CheckRecord` or any RFC 9162 verifier. "
        "422 naming the parameter when it is out of range; 410 `audit_retired` for an event "
        "retired from the live log (its archive proves it)."
    ),
)
def proof_inclusion(
    request: HttpRequest,
    seq: Annotated[int, Query(..., ge=1, le=MAX_ID)],
    tree_size: Annotated[int | None, Query(None, ge=1, le=MAX_ID)] = None,
    tenant: TenantQuery = None,
) -> InclusionProofOut:
    caller = caller_of(request, tenant)
    proof = inclusion(caller.tenant_id, seq=seq, tree_size=tree_size)
    return InclusionProofOut(
        leaf_index=proof.leaf_index, tree_size=proof.tree_size, hashes=b64_hashes(proof.hashes)
    )


@router.get(
    "/audit/proof/consistency",
    response=responses({200: ConsistencyProofOut}, READ_ERRORS),
    summary="Prove the log only grew",
    description=(
        "The RFC 9162 consistency proof that the tree of `first` leaves is a prefix of the tree of "
        "`second` (default: the log's size), for Go's `tlog.CheckTree`. 422 naming the parameter "
        "when it is out of range."
    ),
)
def proof_consistency(
    request: HttpRequest,
    first: Annotated[int, Query(..., ge=1, le=MAX_ID)],
    second: Annotated[int | None, Query(None, ge=1, le=MAX_ID)] = None,
    tenant: TenantQuery = None,
) -> ConsistencyProofOut:
    caller = caller_of(request, tenant)
    proof = consistency(caller.tenant_id, first=first, second=second)
    return ConsistencyProofOut(first=proof.first, second=proof.second, hashes=b64_hashes(proof.hashes))


@router.get(
    "/audit/key",
    response=responses({200: VerifierKeyOut}, READ_ERRORS),
    summary="Get the checkpoints' verifier key",
    description="The tenant's log origin and the C2SP verifier key that checks its checkpoints.",
)
def key(request: HttpRequest, tenant: TenantQuery = None) -> VerifierKeyOut:
    caller = caller_of(request, tenant)
    return VerifierKeyOut(origin=log_origin(caller.tenant_id), vkey=str(log_verifier_key(caller.tenant_id)))


EXPORT_PAGE = 5000
"""Events per exported bundle from the API: a larger range is asked for page by page."""


@router.get(
    "/audit/export",
    response=responses({200: dict[str, Any]}, (*READ_ERRORS, 403, 410)),
    summary="Export a bundle for offline verification",
    description=(
        "Admins: events `from_seq` (default: the first the live log keeps) to `to_seq` (default: "
        "the newest) with a signed checkpoint, the hashes to its root and the verifier key, at "
        f"most {EXPORT_PAGE} events a bundle (a bundle ends at its `to_seq`: ask again from the "
        f"next). `previous` (repeatable, at most {MAX_PREVIOUS}) adds the consistency proof from a "
        "checkpoint size the auditor kept. Check it with `python -m keelgate.audit.verify FILE`. "
        "A parameter out of range is 422 naming it; a range below the log's retention cut is 410 "
        "`audit_retired` (those events are in the archive made when they were retired)."
    ),
)
def export(
    request: HttpRequest,
    from_seq: Annotated[int | None, Query(None, ge=1, le=MAX_ID)] = None,
    to_seq: Annotated[int | None, Query(None, ge=1, le=MAX_ID)] = None,
    previous: Annotated[list[PreviousSize] | None, Query(None, max_length=MAX_PREVIOUS)] = None,
    tenant: TenantQuery = None,
) -> dict[str, Any]:
    caller = caller_of(request, tenant)
    require_role(caller.user, caller.tenant_id, Role.ADMIN)
    return export_bundle(
        caller.tenant_id, from_seq=from_seq, to_seq=to_seq, previous_sizes=previous or (), limit=EXPORT_PAGE
    )


# -- C2SP tlog-tiles: the log as static resources under /audit/tlog/<tenant>/ -----------------

TLOG = "/audit/tlog/{tenant}"
"""The tenant's ``tlog-tiles`` prefix (under ``/api/v1``), the tenant named in the path so the
prefix alone locates the log, for a key and a session alike."""
TenantPath = Annotated[
    str,
    Path(
        description="The tenant's slug: its log's prefix is `/api/v1/audit/tlog/<tenant>`. Another's is 404."
    ),
]
IMMUTABLE = 365 * 24 * 3600
"""How long a tile or a bundle may be cached: for good (its content never changes)."""
_GZIP = GZipMiddleware(lambda request: HttpResponse())
"""Django's gzip, for the bundles the spec says to compress (only its ``process_response``
is called: it reads ``Accept-Encoding``, adds ``Vary`` and skips what would not shrink)."""


def _text_ok(media: str) -> dict[str, Any]:
    schema = {"type": "string", "format": "binary"} if media.endswith("octet-stream") else {"type": "string"}
    return {"responses": {200: {"description": "OK", "content": {media: {"schema": schema}}}}}


def _tlog_caller(request: HttpRequest, tenant: str) -> Caller:
    """The caller, if it may read ``tenant``'s log (a viewer or above); a tenant that is not
    a slug is 404 as any path that names nothing is."""
    if not re.fullmatch(SLUG, tenant):
        raise NotFoundError()
    return caller_of(request, tenant)


def _immutable(response: HttpResponse) -> HttpResponse:
    patch_cache_control(response, private=True, max_age=IMMUTABLE, immutable=True)
    return response


@router.get(
    f"{TLOG}/checkpoint",
    response=responses({}, READ_ERRORS),  # 200 is text/plain, documented below
    summary="tlog-tiles: get the latest signed checkpoint",
    description=(
        "C2SP `tlog-tiles`: the tenant's newest signed checkpoint at `<prefix>/checkpoint`, the "
        "prefix being `/api/v1/audit/tlog/<tenant>`; the same note as `GET /audit/checkpoint`, with its "
        "witnesses' cosignatures. "
        "404 `not_found` before the first checkpoint, for another tenant, and for a tenant "
        "the caller is not a member of."
    ),
    openapi_extra=_text_ok("text/plain"),
)
def tlog_checkpoint(request: HttpRequest, tenant: TenantPath) -> HttpResponse:
    caller = _tlog_caller(request, tenant)
    latest = latest_checkpoint(caller.tenant_id)
    if latest is None:
        raise NotFoundError("no checkpoint yet")
    response = HttpResponse(cosigned_note(latest), content_type="text/plain; charset=utf-8")
    patch_cache_control(response, private=True, no_cache=True)
    return response


@router.get(
    f"{TLOG}/tile/entries/{{path:tile}}",
    response=responses({}, (*READ_ERRORS, 409, 410)),  # 200 is application/octet-stream
    summary="tlog-tiles: get an entry bundle",
    description=(
        "C2SP `tlog-tiles`: `tile/entries/<N>[.p/<W>]`, leaves `N * 256` to `N * 256 + W - 1`, "
        "each a big-endian uint16 length and the leaf's data (the RFC 8785 bytes of the event's "
        "`leaf`); gzip when asked for. Only what the latest checkpoint covers: 404 beyond it or "
        "for a path that is not the spec's encoding; 410 `audit_retired` for a bundle holding a "
        "retired event; 409 `audit_entry_too_large` for one holding a leaf over 65,535 bytes."
    ),
    openapi_extra=_text_ok("application/octet-stream"),
)
def tlog_entries(request: HttpRequest, tenant: TenantPath, tile: str) -> HttpResponseBase:
    caller = _tlog_caller(request, tenant)
    data = entry_bundle(caller.tenant_id, parse_tile_path(f"tile/entries/{tile}"))
    response = _immutable(HttpResponse(data, content_type="application/octet-stream"))
    return _GZIP.process_response(request, response)


@router.get(
    f"{TLOG}/tile/{{path:tile}}",
    response=responses({}, READ_ERRORS),  # 200 is application/octet-stream
    summary="tlog-tiles: get a hash tile",
    description=(
        "C2SP `tlog-tiles`: `tile/<L>/<N>[.p/<W>]`, the `W` (256 for a full tile) hashes at "
        "tree level `8 * L` from `N * 256`, concatenated (32 bytes each). Only what the latest "
        "checkpoint covers: 404 beyond it or for a path that is not the spec's encoding (`L` "
        "0 to 63, `N` in `x001/x234/067` form, `W` 1 to 255, no leading zeros). Served "
        "below a retention cut too: retiring keeps every hash."
    ),
    openapi_extra=_text_ok("application/octet-stream"),
)
def tlog_tile(request: HttpRequest, tenant: TenantPath, tile: str) -> HttpResponse:
    caller = _tlog_caller(request, tenant)
    data = hash_tile(caller.tenant_id, parse_tile_path(f"tile/{tile}"))
    return _immutable(HttpResponse(data, content_type="application/octet-stream"))
