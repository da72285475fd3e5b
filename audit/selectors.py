"""Reads of the audit log: its events a page at a time under filters, one event, the
checkpoints, verifying a tenant's history, listing the chains.

Every read for a page or the API shows sequenced events only (``seq`` set): an event
inserted but not yet numbered is not part of the log anyone can cite.

Verification streams the chain from the database through the engine's
:func:`~keelgate.audit.verify_chain`, then checks the result against the tenant's
``ChainHead`` row. The hash links alone cannot see a deleted tail or a well-forged
event appended after the head; the head row, written in the same transaction as every
append, can. A signed digest (``against``) catches what the head row cannot: a rewrite
that also updated the head row.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet

from audit.digest import ChainDigest, sign_head, verify_digest
from audit.models import AuditEvent as EventRow
from audit.models import ChainHead, Checkpoint
from audit.wiring import audit_log
from keelgate.audit import GENESIS_HASH, AuditEvent, ChainReport, format_at, verify_chain
from keelgate.errors import ChainBrokenError
from keelgate.tracing import DECISION_KINDS as TRACED_DECISIONS
from sitekit import metrics
from sitekit.errors import DigestError, EmptyChainError, NotFoundError
from sitekit.paging import Filter, Keyset, Listing, Page, Range, Span, flag, time_span

__all__ = [
    "AUDIT_EVENTS",
    "CHECKPOINTS",
    "DECISION_KINDS",
    "HEAD_MISMATCH",
    "QUALIFIERS",
    "audit_checkpoint_latest",
    "audit_checkpoints",
    "audit_digest",
    "audit_event",
    "audit_events",
    "audit_events_exist",
    "audit_heads",
    "audit_tenants",
    "audit_verify",
    "audit_window",
]

HEAD_MISMATCH = "head_mismatch"
"""A :class:`ChainReport` reason added by the site: the events do not end at the
``ChainHead`` row (a deleted tail, an event appended behind the store's back, or an
edited head row). ``first_bad_seq`` is the first number that disagrees."""

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
    return EventRow.objects.filter(tenant_id=tenant_id, seq__isnull=False)


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
    """The tenant's sequenced event numbered ``seq``; NotFoundError if there is none."""
    row = _sequenced(tenant_id).filter(seq=seq).first()
    if row is None:
        raise NotFoundError()
    return row


CHECKPOINTS = Listing(Keyset(Checkpoint, "-size"))
"""A tenant's signed checkpoints, newest (largest) first; ``size`` is unique within a tenant."""


def audit_checkpoints(*, tenant_id: str, cursor: str | None, limit: int) -> Page[Checkpoint]:
    """A page of the tenant's checkpoints, newest first, after ``cursor``."""
    return CHECKPOINTS.page(Checkpoint.objects.filter(tenant_id=tenant_id), cursor=cursor, limit=limit)


def audit_checkpoint_latest(*, tenant_id: str) -> Checkpoint | None:
    """The tenant's largest checkpoint, or None before the first is signed."""
    return Checkpoint.objects.filter(tenant_id=tenant_id).order_by("-size").first()


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
    report = _audit_verify(tenant_id=tenant_id, against=against)
    if not report.ok:
        metrics.AUDIT_VERIFY_FAILURES.inc()
    return report


def _audit_verify(*, tenant_id: str, against: Mapping[str, Any] | None = None) -> ChainReport:
    """Verify ``tenant_id``'s chain from the database and report the first break.

    With ``against`` (a digest from :func:`audit.digest.chain_digest`), the digest is
    checked first (raising :class:`~audit.digest.DigestError` if it is malformed, for
    another tenant or not signed by this site) and the chain must still hold its
    ``(seq, hash)``: reason ``digest_mismatch`` otherwise, even if every hash after a
    rewrite was recomputed. Safe to run while other processes append.
    """
    expect_head: tuple[int, str] | None = None
    if against is not None:
        verify_digest(against)
        if against["tenant_id"] != tenant_id:
            raise DigestError("tenant_id is another tenant's")
        expect_head = (against["seq"], against["hash"])
    # The head before streaming bounds the chain from below (the stream must reach
    # it), the head after from above (later events would be forged): appends that
    # race with the walk land between the two and are not mistaken for tampering.
    before = _head_row(tenant_id)
    watch = _Watch({before[0] - 1, before[0]})
    events = watch.wrap(audit_log().events(tenant_id))
    try:
        report = verify_chain(events, tenant_id=tenant_id, expect_head=expect_head)
    finally:
        # A break ends the walk early: release the database cursor now, not at GC.
        events.close()
    if not report.ok:
        return report
    before_seq, before_hash = before
    if report.head_seq < before_seq:
        return _broken(report.head_seq, report.head_hash, report.head_seq + 1)
    if before_seq > 0 and watch.seen.get(before_seq) != before_hash:
        return _broken(before_seq - 1, watch.seen.get(before_seq - 1, GENESIS_HASH), before_seq)
    after_seq, _ = _head_row(tenant_id)
    if report.head_seq > after_seq:
        return _broken(after_seq, _stored_hash(tenant_id, after_seq), after_seq + 1)
    return report


class _Watch:
    """Passes events through, noting the hashes at a few numbers of interest.

    Also turns a row the store cannot even parse (bad JSON, a bad time) into
    :class:`ChainBrokenError`, which ``verify_chain`` reports as a broken link instead
    of crashing: ``event_from_row`` lets ValueError escape.
    """

    def __init__(self, seqs: set[int]) -> None:
        self.seqs = seqs
        self.seen: dict[int, str] = {}

    def wrap(self, events: Iterable[AuditEvent]) -> Generator[AuditEvent, None, None]:
        try:
            for event in events:
                if event.seq in self.seqs:
                    self.seen[event.seq] = event.hash
                yield event
        except (TypeError, ValueError) as exc:
            raise ChainBrokenError("unreadable audit row") from exc
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()


def _head_row(tenant_id: str) -> tuple[int, str]:
    row = ChainHead.objects.filter(tenant_id=tenant_id).values_list("seq", "hash").first()
    return (0, GENESIS_HASH) if row is None else (int(row[0]), str(row[1]))


def _stored_hash(tenant_id: str, seq: int) -> str:
    if seq <= 0:
        return GENESIS_HASH
    found = EventRow.objects.filter(tenant_id=tenant_id, seq=seq).values_list("hash", flat=True).first()
    return GENESIS_HASH if found is None else str(found)


def _broken(good_seq: int, good_hash: str, bad_seq: int) -> ChainReport:
    """A head mismatch at ``bad_seq``, the chain verified up to ``good_seq``."""
    return ChainReport(False, good_seq, good_seq, good_hash, bad_seq, HEAD_MISMATCH)
