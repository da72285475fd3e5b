"""Reads of the inbox, always scoped to tenants the caller may see."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet

from approvals.models import Approval, ApprovalStatus, UnknownOutcome
from runs.selectors import run_get, run_state
from sitekit.errors import NotAnUnknownOutcomeError, NotFoundError
from sitekit.paging import Filter, Keyset, Listing, Page

APPROVAL_LIST = Listing(Keyset(Approval, "-requested_at", "-id"), Filter("status"))
"""Approvals, newest first, by status: the API's list (the inbox's order is :mod:`approvals.queue`)."""

UNKNOWN_OUTCOME_LIST = Listing(Keyset(UnknownOutcome, "-detected_at", "-id"), Filter("settled"))
"""Unknown outcomes, newest first, open or settled: the API's list."""


def approvals_for(
    *, tenant_ids: Iterable[str], status: str | None = ApprovalStatus.PENDING
) -> QuerySet[Approval]:
    """Approvals of the given tenants, newest first; pending ones unless told otherwise."""
    return APPROVAL_LIST.filtered(Approval.objects.filter(tenant_id__in=list(tenant_ids)), {"status": status})


def approval_page(
    *, tenant_ids: Iterable[str], status: str | None, cursor: str | None, limit: int
) -> Page[Approval]:
    """A page of :func:`approvals_for`, after ``cursor``."""
    rows = Approval.objects.filter(tenant_id__in=list(tenant_ids))
    return APPROVAL_LIST.page(rows, {"status": status}, cursor=cursor, limit=limit)


def unknown_outcomes_for(
    *, tenant_ids: Iterable[str], settled: bool | None = False
) -> QuerySet[UnknownOutcome]:
    """Unknown outcomes of the given tenants, newest first; open ones unless told otherwise."""
    rows = UnknownOutcome.objects.filter(tenant_id__in=list(tenant_ids))
    return UNKNOWN_OUTCOME_LIST.filtered(rows, {"settled": settled})


def unknown_outcome_page(
    *, tenant_ids: Iterable[str], settled: bool | None, cursor: str | None, limit: int
) -> Page[UnknownOutcome]:
    """A page of :func:`unknown_outcomes_for`, after ``cursor``."""
    rows = UnknownOutcome.objects.filter(tenant_id__in=list(tenant_ids))
    return UNKNOWN_OUTCOME_LIST.page(rows, {"settled": settled}, cursor=cursor, limit=limit)


def approval_get(*, tenant_ids: Iterable[str], approval_id: int) -> Approval:
    """One approval the caller may see, or NotFoundError."""
    row = Approval.objects.filter(tenant_id__in=list(tenant_ids), pk=approval_id).first()
    if row is None:
        raise NotFoundError()
    return row


def unknown_outcome_get(*, tenant_ids: Iterable[str], run_id: str, action_id: str) -> UnknownOutcome:
    """The unknown outcome of one action; NotAnUnknownOutcomeError for an action of a run
    the caller sees whose outcome is known, NotFoundError for anything else."""
    tenants = list(tenant_ids)
    row = UnknownOutcome.objects.filter(tenant_id__in=tenants, run_id=run_id, action_id=action_id).first()
    if row is not None:
        return row
    state = run_state(run_get(tenant_ids=tenants, run_id=run_id))
    action = next((a for a in state.actions if a.action_id == action_id), None) if state else None
    if action is None:
        raise NotFoundError()
    raise NotAnUnknownOutcomeError(f"the call {action.tool} is {action.status.value.replace('_', ' ')}")


def approvals_of(unknowns: Iterable[UnknownOutcome]) -> dict[tuple[str, str, str], Approval]:
    """The approvals of these unknown outcomes' calls, by (tenant, run, action), in one query:
    an edited call's own approval, the one that let it run; none for a call no person approved."""
    rows = list(unknowns)
    if not rows:
        return {}
    found = Approval.objects.filter(
        tenant_id__in={r.tenant_id for r in rows},
        run_id__in={r.run_id for r in rows},
        action_id__in={r.action_id for r in rows},
        status=ApprovalStatus.APPROVED,
    )
    return {(a.tenant_id, a.run_id, a.action_id): a for a in found}


@dataclass(frozen=True)
class Decided:
    """One settled inbox item, as words: who did what to which call, when, and their note."""

    tenant_id: str
    run_id: str
    tool: str
    verdict: str
    by: str
    at: datetime | None
    note: str = ""


def recently_decided(*, tenant_ids: Iterable[str], limit: int = 10) -> list[Decided]:
    """The latest decisions of the given tenants, newest first: approvals and reconciles.

    An edit is one decision: the original's row says "edited, then approved"; the edited
    call's own approval by the same person, in the same moment, is not said again."""
    ids = list(tenant_ids)
    approvals = list(
        Approval.objects.filter(tenant_id__in=ids)
        .exclude(status=ApprovalStatus.PENDING)
        .exclude(decided_at=None)
        .order_by("-decided_at", "-id")[: 2 * limit]
    )

    def key(a: Approval, action_id: str) -> tuple[str, str, str, str]:
        return (a.tenant_id, a.run_id, action_id, a.decided_by)

    edits = {key(a, a.replaced_by) for a in approvals if a.replaced_by}
    # the edited call's approval by its editor: its note is the person's own words
    edited = {key(a, a.action_id): _said(a) for a in approvals if key(a, a.action_id) in edits}
    found = [
        Decided(
            a.tenant_id,
            a.run_id,
            a.tool,
            "edited, then approved" if a.replaced_by else str(a.status),
            a.decided_by or "expiry",
            a.decided_at,
            edited.get(key(a, a.replaced_by), "") if a.replaced_by else _said(a),
        )
        for a in approvals
        if key(a, a.action_id) not in edits
    ][:limit]
    settled = UnknownOutcome.objects.filter(tenant_id__in=ids, settled=True).order_by("-settled_at", "-id")
    found += [
        Decided(
            u.tenant_id,
            u.run_id,
            u.tool,
            "settled as executed" if u.executed else "settled as not executed",
            u.settled_by,
            u.settled_at,
            u.note,
        )
        for u in settled[:limit]
    ]
    found.sort(key=lambda d: d.at.timestamp() if d.at else 0.0, reverse=True)
    return found[:limit]


def _said(row: Approval) -> str:
    """The decider's own words: the decision's note, else the note of their vote."""
    if row.note:
        return row.note
    votes = [v for v in row.votes or [] if isinstance(v, dict) and v.get("by") == row.decided_by]
    note = votes[-1].get("note", "") if votes else ""
    return note if isinstance(note, str) else ""


def inbox_counts(*, tenant_ids: Iterable[str]) -> dict[str, int]:
    """How many approvals and unknown outcomes wait, for the navigation badges."""
    ids = list(tenant_ids)
    return {
        "approvals": Approval.objects.filter(tenant_id__in=ids, status=ApprovalStatus.PENDING).count(),
        "unknown": UnknownOutcome.objects.filter(tenant_id__in=ids, settled=False).count(),
    }
