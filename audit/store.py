"""The engine's AuditLog on the Django ORM: events inserted in the writer's transaction.

An append inserts the event unnumbered (a ``PendingEvent``) in the caller's transaction
(or its commit group's), so a state change and its audit event commit together or not
at all, and then sequences it (:func:`audit.tree.integrate`) in the same transaction,
waiting for the tenant's head lock: the readable default, what SQLite runs, where
writers are serialised anyway. Reads show sequenced events only.

On PostgreSQL the wiring (:func:`audit.wiring.audit_log`) hands out
:class:`audit.store_postgresql.PostgresAuditLog`, whose appends only insert: the
sequencer, or the next reader, numbers them, so writers never wait for one another.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any

from django.db import transaction

from audit.models import AuditEvent as EventRow
from audit.models import PendingEvent
from audit.tree import integrate
from keelgate.audit import AuditEvent, encode_body, format_at, i_json, leaf_bytes
from keelgate.clock import Clock, SystemClock
from keelgate.errors import ChainBrokenError
from sitekit import metrics
from sitekit.commits import DjangoCommitGroup

NOTIFY_CHANNEL = "keelgate_audit"
"""Where PostgreSQL's log announces each tenant's new head (``approvals.outbox`` listens)."""
PENDING_CHANNEL = "keelgate_audit_pending"
"""Where PostgreSQL's insert tells, at its commit, that a tenant has events to number."""


class DjangoAuditLog:
    """Per-tenant logs in the ``audit_auditevent`` table."""

    def __init__(self, *, clock: Clock | None = None, group: DjangoCommitGroup | None = None) -> None:
        self.clock: Clock = clock or SystemClock()
        self.commit_group = group
        """The commit group shared with a loop's other stores, or None (each append its own)."""

    def append(self, tenant_id: str, *, actor: str, kind: str, body: Mapping[str, Any]) -> AuditEvent:
        """Append one event, sequence it, and return it as stored."""
        with self._write():
            mine = self._insert(tenant_id, actor, kind, body)
            while True:  # a backlog may stand before this event
                written = integrate(tenant_id, wait=True)
                if mine.id in written:
                    return event_from_row(written[mine.id])
                if not written:
                    raise RuntimeError(f"tenant {tenant_id}: an appended event was not sequenced")

    def record(self, tenant_id: str, *, actor: str, kind: str, body: Mapping[str, Any]) -> None:
        """Append without answering with the event (``keelgate.audit.RecordingAuditLog``)."""
        self.append(tenant_id, actor=actor, kind=kind, body=body)

    def _insert(self, tenant_id: str, actor: str, kind: str, body: Mapping[str, Any]) -> PendingEvent:
        """Insert the event unnumbered, in the current transaction."""
        row = PendingEvent.objects.create(**pending_event(tenant_id, self.clock.now(), actor, kind, body))
        transaction.on_commit(lambda: metrics.audit_appended(kind, body))  # counted once committed
        return row

    def _write(self) -> AbstractContextManager[Any]:
        """The transaction an append joins: its group's, else the caller's or its own."""
        if self.commit_group is not None:
            return self.commit_group.write()
        return transaction.atomic(savepoint=False)

    def events(self, tenant_id: str, *, after_seq: int = 0, limit: int | None = None) -> Iterator[AuditEvent]:
        """The tenant's sequenced events after ``after_seq``, oldest first, streamed in chunks."""
        rows = EventRow.objects.filter(tenant_id=tenant_id, seq__gt=after_seq).order_by("seq")
        if limit is not None:
            rows = rows[:limit]
        for row in rows.iterator(chunk_size=2000):
            yield event_from_row(row)

    def head(self, tenant_id: str) -> AuditEvent | None:
        """The newest sequenced event of the tenant's log."""
        row = EventRow.objects.filter(tenant_id=tenant_id).order_by("-seq").first()
        return None if row is None else event_from_row(row)


def pending_event(
    tenant_id: str, at: datetime, actor: str, kind: str, body: Mapping[str, Any]
) -> dict[str, Any]:
    """An unnumbered event's columns.

    Raises TypeError or ValueError for a body that is not JSON: refused here, in the
    writer's transaction, never found by the sequencer. An integer RFC 8785 cannot
    carry (beyond 2**53) is kept as its decimal text (:func:`keelgate.audit.i_json`).
    """
    text, value = encode_body(body)
    if text != (safe := encode_body(i_json(value)))[0]:
        text, value = safe
    leaf_bytes({"body": value})
    run_id, tool = value.get("run_id"), value.get("tool")
    return {
        "tenant_id": tenant_id,
        "at": format_at(_aware(at)),
        "actor": actor,
        "kind": kind,
        "body": text,
        "run_id": run_id[:128] if isinstance(run_id, str) else "",
        "tool": tool[:200] if isinstance(tool, str) else "",
    }


def _aware(at: datetime) -> datetime:
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError("audit times must be timezone-aware")
    return at.astimezone(UTC)


def event_from_row(row: EventRow) -> AuditEvent:
    """Rebuild the engine's event exactly as stored (the hash is checked by verify, not here).

    A hash-chained event carries its link (``prev_hash``, ``hash``); a tree leaf no
    ``prev_hash`` and its leaf's hash."""
    try:
        at = datetime.fromisoformat(row.at)
        body = json.loads(row.body)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ChainBrokenError(f"unreadable audit row, seq {row.seq}") from exc
    if at.tzinfo is None:
        raise ChainBrokenError(f"audit row without a time zone, seq {row.seq}")
    return AuditEvent.model_construct(
        tenant_id=row.tenant_id,
        seq=row.seq,
        at=at,
        actor=row.actor,
        kind=row.kind,
        body=body,
        prev_hash=row.prev_hash,
        hash=row.hash or row.leaf_hash,  # a tree leaf's own hash; a chained event's link
    )
