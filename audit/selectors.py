"""Reads of the audit chain: its events a page at a time, verifying a tenant's history, listing the chains.

Verification streams the chain from the database through the engine's
:func:`~keelgate.audit.verify_chain`, then checks the result against the tenant's
``ChainHead`` row. The hash links alone cannot see a deleted tail or a well-forged
event appended after the head; the head row, written in the same transaction as every
append, can. A signed digest (``against``) catches what the head row cannot: a rewrite
that also updated the head row.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping
from typing import Any

from audit.digest import ChainDigest, sign_head, verify_digest
from audit.models import AuditEvent as EventRow
from audit.models import ChainHead
from audit.wiring import audit_log
from keelgate.audit import GENESIS_HASH, AuditEvent, ChainReport, verify_chain
from keelgate.errors import ChainBrokenError
from sitekit import metrics
from sitekit.errors import DigestError, EmptyChainError
from sitekit.paging import Filter, Keyset, Listing, Page

__all__ = [
    "AUDIT_EVENTS",
    "HEAD_MISMATCH",
    "audit_digest",
    "audit_events",
    "audit_heads",
    "audit_tenants",
    "audit_verify",
]

HEAD_MISMATCH = "head_mismatch"
"""A :class:`ChainReport` reason added by the site: the events do not end at the
``ChainHead`` row (a deleted tail, an event appended behind the store's back, or an
edited head row). ``first_bad_seq`` is the first number that disagrees."""


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
