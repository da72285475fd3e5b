"""Reads of the audit log: its events a page at a time under filters, one event, the
checkpoints, verifying a tenant's history, listing the logs.

Every read of events first sequences what is pending for its tenant
(:func:`audit.wiring.integrate_pending`, never waiting for a sequencer that is at work), so
a committed event is never missing from what a reader sees; an event still pending (a
``PendingEvent``, not numbered) is not part of the log anyone can cite, and no read shows
it. Verification is :mod:`audit.verification`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet

from audit.digest import ChainDigest, sign_head
from audit.models import AuditEvent as EventRow
from audit.models import ChainHead, Checkpoint
from audit.retention import RETIRED
from audit.retired import refuse_retired
from audit.verification import HEAD_MISMATCH, verify_log
from audit.wiring import integrate_pending
from keelgate.audit import ChainReport, format_at
from keelgate.errors import ChainBrokenError
from keelgate.tracing import DECISION_KINDS as TRACED_DECISIONS
from sitekit import metrics
from sitekit.errors import EmptyChainError, NotFoundError
from sitekit.paging import Filter, Keyset, Listing, Page, Range, Span, flag, time_span

__all__ = [
    "AUDIT_EVENTS",
    "CHECKPOINTS",
    "DECISION_KINDS",
    "HEAD_MISMATCH",
    "QUALIFIERS",
    "audit_checkpoints",
    "audit_digest",
    "audit_event",
    "audit_events",
    "audit_events_exist",
    "audit_head",
    "audit_heads",
    "audit_retirement",
    "audit_tenants",
    "audit_verify",
    "audit_window",
]

DECISION_KINDS = (*sorted(TRACED_DECISIONS), "run.cancel_requested")
"""The kinds the Decisions view lists: the decisions the engine applies and traces
(approve, deny, edit, reconcile, escalate, expire, cancel: ``keelgate.tracing``), and a
person's request to cancel a running run, a decision whose effect comes at its next step."""


def at_span(value: str) -> Span:
    """A time as the stored ``at`` text compares: :func:`~sitekit.paging.time_span`'s
    stretch in :func:`~keelgate.audit.format_at`'s form (UTC, microseconds), whose text
    order is time order. ``at`` is text (hashed exactly), so a bound must be text too."""
    span = time_span(value)
    return Span(format_at(span.start), format_at(span.end))


def _search(value: str) -> str:
    found = value.strip()
    if not found:
        raise ValueError("empty")
    return found


class _Decisions(Filter):
    """``decisions``: only the kinds of :data:`DECISION_KINDS` (on, or not given)."""

    def __init__(self) -> None:
        super().__init__("decisions", "kind", lookup="in", parse=flag)

    def where(self, value: Any) -> Q:
        return Q(kind__in=DECISION_KINDS) if value else Q()


AUDIT_EVENTS = Listing(
    Keyset(EventRow, "seq"),
    Filter("kind"),
    Filter("actor"),
    Filter("run", "run_id"),
    Filter("tool"),
    Filter("from", "at", lookup="gte", parse=lambda value: at_span(value).start),
    Filter("to", "at", lookup="lt", parse=lambda value: at_span(value).end),
    Range("created", "at", parse=at_span),
    Filter("q", "run_id", lookup="icontains", parse=_search),
    _Decisions(),
)
"""A tenant's log, oldest first (``seq`` is unique within a tenant's log), read by the
audit pages and ``GET /audit/events`` alike. Filters, all combined: ``kind``, ``actor``,
``run`` (a run id, exactly), ``tool``; ``from`` and ``to`` (a date is its whole day, a time
as precise as written, UTC unless it says otherwise; both ends included); ``created`` (a
GitHub-style range of the same times: ``>=2026-12-01``, ``2026-12-01..2026-12-03``);
``q``, text found in run ids; ``decisions`` (the kinds of :data:`DECISION_KINDS`)."""

QUALIFIERS = ("kind", "action", "actor", "run", "tool", "created")
"""The words of a search line read as filters (``action:`` is GitHub's name for ``kind:``)."""

_NEWEST_FIRST = AUDIT_EVENTS.reversed()


def _sequenced(tenant_id: str) -> QuerySet[EventRow]:
    """The tenant's numbered events (pending ones are another table's rows)."""
    return EventRow.objects.filter(tenant_id=tenant_id)


def audit_events(
    *,
    tenant_id: str,
    filters: Mapping[str, Any] | None = None,
    after_seq: int | None = None,
    before_seq: int | None = None,
    newest_first: bool = False,
    limit: int,
) -> Page[EventRow]:
    """A page of the tenant's sequenced events under ``filters`` (names of
    :data:`AUDIT_EVENTS`, parsed), numbered between ``after_seq`` and ``before_seq`` (both
    excluded, either open): the ``limit`` oldest, or with ``newest_first`` the newest. The
    page's ``next_key`` is where the next page in the same direction starts."""
    integrate_pending([tenant_id])
    rows = _sequenced(tenant_id)
    if newest_first:
        if after_seq is not None:
            rows = rows.filter(seq__gt=after_seq)
        start = before_seq
        listing = _NEWEST_FIRST
    else:
        if before_seq is not None:
            rows = rows.filter(seq__lt=before_seq)
        start = after_seq
        listing = AUDIT_EVENTS
    return listing.page(rows, filters, after=None if start is None else (start,), limit=limit)


def audit_events_exist(
    *,
    tenant_id: str,
    filters: Mapping[str, Any] | None = None,
    after_seq: int | None = None,
    before_seq: int | None = None,
) -> bool:
    """Whether any sequenced event under ``filters`` is numbered between the two (excluded)."""
    rows = _sequenced(tenant_id)
    if after_seq is not None:
        rows = rows.filter(seq__gt=after_seq)
    if before_seq is not None:
        rows = rows.filter(seq__lt=before_seq)
    return AUDIT_EVENTS.filtered(rows, filters).exists()


@dataclass(frozen=True)
class Window:
    """A console page of events, newest first, and where the pages beside it start."""

    rows: list[EventRow]
    newer: int | None
    """``after_seq`` of the page of newer events (None: there are none)."""
    older: int | None
    """``before_seq`` of the page of older events (None: there are none)."""


def audit_window(
    *,
    tenant_id: str,
    filters: Mapping[str, Any] | None = None,
    before_seq: int | None = None,
    after_seq: int | None = None,
    limit: int,
) -> Window:
    """``limit`` events under ``filters``, newest first: the newest, those just below
    ``before_seq``, or those just above ``after_seq``; in two queries at most, however long
    the log (a page, and whether there is anything on the other side)."""
    if after_seq is not None:
        page = audit_events(tenant_id=tenant_id, filters=filters, after_seq=after_seq, limit=limit)
        rows = page.rows[::-1]
        newer = int(page.next_key[0]) if page.next_key else None
        edge = rows[-1].seq if rows else after_seq + 1
        older = edge if audit_events_exist(tenant_id=tenant_id, filters=filters, before_seq=edge) else None
        return Window(rows, newer, older)
    page = audit_events(
        tenant_id=tenant_id, filters=filters, before_seq=before_seq, newest_first=True, limit=limit
    )
    older = int(page.next_key[0]) if page.next_key else None
    if before_seq is None:
        return Window(page.rows, None, older)
    edge = page.rows[0].seq if page.rows else before_seq - 1
    newer = edge if audit_events_exist(tenant_id=tenant_id, filters=filters, after_seq=edge) else None
    return Window(page.rows, newer, older)


def audit_event(*, tenant_id: str, seq: int) -> EventRow:
    """The tenant's event numbered ``seq`` (what is pending numbered first); AuditRetiredError
    if it was retired, NotFoundError if there is none."""
    integrate_pending([tenant_id])
    row = _sequenced(tenant_id).filter(seq=seq).first()
    if row is None:
        refuse_retired(tenant_id, seq, "seq")
        raise NotFoundError()
    return row


def audit_retirement(*, tenant_id: str, seq: int) -> EventRow | None:
    """The kept ``audit.retired`` event that retired event ``seq``, if the log still keeps it
    (a later retirement may have retired it too)."""
    found = _sequenced(tenant_id).filter(kind=RETIRED).order_by("-seq")
    for row in found[:_RETIREMENTS_READ]:
        try:
            body = json.loads(row.body)
            if body["from_seq"] <= seq <= body["to_seq"]:
                return row
        except (ValueError, KeyError, TypeError):
            continue
    return None


_RETIREMENTS_READ = 50
"""Retirements :func:`audit_retirement` looks through, newest first (one every six months is usual)."""


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
    """The newest event's number of each tenant (0 for a tenant without events yet), as
    the head says: a baseline for a live stream, which hears of what is numbered later."""
    ids = list(tenant_ids)
    heads = dict(ChainHead.objects.filter(tenant_id__in=ids).values_list("tenant_id", "seq"))
    return {t: int(heads.get(t, 0)) for t in ids}


def audit_head(*, tenant_id: str) -> tuple[int, int]:
    """The newest event's number of the tenant (0 without events yet) and the first the live
    log keeps (1 until a retirement), in one read of the head."""
    found = ChainHead.objects.filter(tenant_id=tenant_id).values_list("seq", "retired_below").first()
    return (int(found[0]), max(int(found[1]), 1)) if found else (0, 1)


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
    rows = Checkpoint.objects.filter(tenant_id=tenant_id).prefetch_related("cosignatures")
    return CHECKPOINTS.page(rows, None, after=None if before is None else (before,), limit=limit)
