"""Reads of the audit log: its events a page at a time, verifying a tenant's history, listing the logs.

Every read first sequences what is pending for its tenants (:func:`audit.wiring.integrate_pending`,
never waiting for a sequencer that is at work), so a committed event is never missing
from what a reader sees. Verification is :mod:`audit.verification`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from audit.digest import ChainDigest, sign_head
from audit.models import AuditEvent as EventRow
from audit.models import ChainHead, Checkpoint
from audit.verification import HEAD_MISMATCH, verify_log
from audit.wiring import integrate_pending
from keelgate.audit import ChainReport
from keelgate.errors import ChainBrokenError
from sitekit import metrics
from sitekit.errors import EmptyChainError
from sitekit.paging import Filter, Keyset, Listing, Page

__all__ = [
    "AUDIT_EVENTS",
    "HEAD_MISMATCH",
    "audit_checkpoints",
    "audit_digest",
    "audit_events",
    "audit_heads",
    "audit_tenants",
    "audit_verify",
]


AUDIT_EVENTS = Listing(Keyset(EventRow, "seq"), Filter("kind"))
"""A tenant's chain, oldest first, by kind (``seq`` is unique within a tenant's chain).
A filter the chain's readers add (``actor``, a ``created`` range) is declared here."""

_NEWEST_FIRST = AUDIT_EVENTS.reversed()


def audit_events(
    *,
    tenant_id: str,
    filters: Mapping[str, Any] | None = None,
    after: int | None = None,
    newest_first: bool = False,
    limit: int,
) -> Page[EventRow]:
    """A page of the tenant's chain under ``filters`` (names of :data:`AUDIT_EVENTS`): oldest
    first after the number ``after``, or newest first before it."""
    integrate_pending([tenant_id])
    listing = _NEWEST_FIRST if newest_first else AUDIT_EVENTS
    rows = EventRow.objects.filter(tenant_id=tenant_id)
    return listing.page(rows, filters, after=None if after is None else (after,), limit=limit)


def audit_tenants() -> list[str]:
    """Every tenant with a chain, sorted: a head row or at least one event.

    Events count too, so deleting a tenant's head row cannot hide its chain from
    ``verify_audit``.
    """
    heads = set(ChainHead.objects.values_list("tenant_id", flat=True))
    # order_by(): Meta.ordering would add seq to the DISTINCT and return every row.
    events = set(EventRow.objects.order_by().values_list("tenant_id", flat=True).distinct())
    return sorted(heads | events)


def audit_heads(tenant_ids: Iterable[str]) -> dict[str, int]:
    """The newest chain number of each tenant (0 for a tenant without a chain yet)."""
    ids = list(tenant_ids)
    heads = dict(ChainHead.objects.filter(tenant_id__in=ids).values_list("tenant_id", "seq"))
    return {t: int(heads.get(t, 0)) for t in ids}


def audit_digest(*, tenant_id: str) -> ChainDigest:
    """Verify the tenant's chain and sign its head.

    Raises :class:`ChainBrokenError` rather than sign a broken chain (the digest would
    vouch for tampered history) and :class:`EmptyChainError` for a tenant without events.
    """
    report = audit_verify(tenant_id=tenant_id)
    if not report.ok:
        raise ChainBrokenError(f"tenant {tenant_id}, seq {report.first_bad_seq}, {report.reason}")
    if report.head_seq == 0:
        raise EmptyChainError(tenant_id)
    return sign_head(tenant_id, report.head_seq, report.head_hash)


def audit_verify(*, tenant_id: str, against: Mapping[str, Any] | None = None) -> ChainReport:
    """:func:`_audit_verify`, and a broken chain counted in ``keelgate_audit_verify_failures_total``."""
    report = verify_log(tenant_id=tenant_id, against=against)
    if not report.ok:
        metrics.AUDIT_VERIFY_FAILURES.inc()
    return report


CHECKPOINTS = Listing(Keyset(Checkpoint, "size")).reversed()
"""A tenant's checkpoints, newest first (``size`` is unique within a tenant's)."""


def audit_checkpoints(*, tenant_id: str, before: int | None = None, limit: int) -> Page[Checkpoint]:
    """A page of the tenant's checkpoints, newest first, smaller than ``before``."""
    rows = Checkpoint.objects.filter(tenant_id=tenant_id)
    return CHECKPOINTS.page(rows, None, after=None if before is None else (before,), limit=limit)
