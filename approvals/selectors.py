"""Reads of the inbox, always scoped to tenants the caller may see."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet

from approvals.models import Approval, ApprovalStatus, UnknownOutcome
from sitekit.errors import NotFoundError


def approvals_for(
    *, tenant_ids: Iterable[str], status: str | None = ApprovalStatus.PENDING
) -> QuerySet[Approval]:
    """Approvals of the given tenants, newest first; pending ones unless told otherwise."""
    rows = Approval.objects.filter(tenant_id__in=list(tenant_ids)).order_by("-requested_at", "-id")
    return rows.filter(status=status) if status else rows


def unknown_outcomes_for(
    *, tenant_ids: Iterable[str], settled: bool | None = False
) -> QuerySet[UnknownOutcome]:
    """Unknown outcomes of the given tenants, newest first; open ones unless told otherwise."""
    rows = UnknownOutcome.objects.filter(tenant_id__in=list(tenant_ids)).order_by("-detected_at", "-id")
    return rows if settled is None else rows.filter(settled=settled)


def approval_get(*, tenant_ids: Iterable[str], approval_id: int) -> Approval:
    """One approval the caller may see, or NotFoundError."""
    row = Approval.objects.filter(tenant_id__in=list(tenant_ids), pk=approval_id).first()
    if row is None:
        raise NotFoundError()
    return row


def unknown_outcome_get(*, tenant_ids: Iterable[str], run_id: str, action_id: str) -> UnknownOutcome:
    """The unknown outcome of one action, or NotFoundError."""
    row = UnknownOutcome.objects.filter(
        tenant_id__in=list(tenant_ids), run_id=run_id, action_id=action_id
    ).first()
    if row is None:
        raise NotFoundError()
    return row


@dataclass(frozen=True)
class Decided:
    """One settled inbox item, as words: who did what to which call, and when."""

    tenant_id: str
    run_id: str
    tool: str
    verdict: str
    by: str
    at: datetime | None


def recently_decided(*, tenant_ids: Iterable[str], limit: int = 10) -> list[Decided]:
    """The latest decisions of the given tenants, newest first: approvals and reconciles."""
    ids = list(tenant_ids)
    approvals = (
        Approval.objects.filter(tenant_id__in=ids)
        .exclude(status=ApprovalStatus.PENDING)
        .exclude(decided_at=None)
        .order_by("-decided_at", "-id")[:limit]
    )
    found = [
        Decided(
            a.tenant_id,
            a.run_id,
            a.tool,
            "edited, then approved" if a.replaced_by else str(a.status),
            a.decided_by or "expiry",
            a.decided_at,
        )
        for a in approvals
    ]
    settled = UnknownOutcome.objects.filter(tenant_id__in=ids, settled=True).order_by("-settled_at", "-id")
    found += [
        Decided(
            u.tenant_id,
            u.run_id,
            u.tool,
            "settled as executed" if u.executed else "settled as not executed",
            u.settled_by,
            u.settled_at,
        )
        for u in settled[:limit]
    ]
    found.sort(key=lambda d: d.at.timestamp() if d.at else 0.0, reverse=True)
    return found[:limit]


def inbox_counts(*, tenant_ids: Iterable[str]) -> dict[str, int]:
    """How many approvals and unknown outcomes wait, for the navigation badges."""
    ids = list(tenant_ids)
    return {
        "approvals": Approval.objects.filter(tenant_id__in=ids, status=ApprovalStatus.PENDING).count(),
        "unknown": UnknownOutcome.objects.filter(tenant_id__in=ids, settled=False).count(),
    }
