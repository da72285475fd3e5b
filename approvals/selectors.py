"""Reads of the inbox, always scoped to tenants the caller may see."""

from __future__ import annotations

from collections.abc import Iterable

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


def inbox_counts(*, tenant_ids: Iterable[str]) -> dict[str, int]:
    """How many approvals and unknown outcomes wait, for the navigation badges."""
    ids = list(tenant_ids)
    return {
        "approvals": Approval.objects.filter(tenant_id__in=ids, status=ApprovalStatus.PENDING).count(),
        "unknown": UnknownOutcome.objects.filter(tenant_id__in=ids, settled=False).count(),
    }
