"""The engine's AuditLog on the Django ORM: one chain per tenant, appends serialised.

An append locks the tenant's ``ChainHead`` row (``SELECT ... FOR UPDATE`` on
PostgreSQL; on SQLite the IMMEDIATE transaction already holds the write lock), so two
writers in any number of processes can never fork the chain or reuse a number. The
append joins the caller's transaction when there is one: a state change and its audit
event commit together or not at all. On PostgreSQL it also sends ``NOTIFY`` on commit,
so the console wakes at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from django.db import connection, transaction

from audit.models import AuditEvent as EventRow
from audit.models import ChainHead
from keelgate._canonical import canonical_json
from keelgate._clock import Clock, SystemClock
from keelgate.audit import GENESIS_HASH, AuditEvent
from keelgate.audit._event import format_at, normalize_body
from keelgate.errors import ChainBrokenError

NOTIFY_CHANNEL = "keelgate_audit"


class DjangoAuditLog:
    """Per-tenant hash chains in the ``audit_auditevent`` table."""

    def __init__(self, *, clock: Clock | None = None) -> None:
        self.clock: Clock = clock or SystemClock()

    def append(self, tenant_id: str, *, actor: str, kind: str, body: Mapping[str, Any]) -> AuditEvent:
        """Append one event under the tenant's head lock and return it."""
        body = normalize_body(body)  # refuse a non-JSON body before taking the lock
        with transaction.atomic():
            ChainHead.objects.bulk_create(
                [ChainHead(tenant_id=tenant_id, seq=0, hash=GENESIS_HASH)], ignore_conflicts=True
            )
            head = ChainHead.objects.select_for_update().get(tenant_id=tenant_id)
            event = AuditEvent.build(tenant_id, head.seq + 1, self.clock.now(), actor, kind, body, head.hash)
            EventRow.objects.create(
                tenant_id=tenant_id,
                seq=event.seq,
                at=format_at(event.at),
                actor=event.actor,
                kind=event.kind,
                body=canonical_json(event.body),
                prev_hash=event.prev_hash,
                hash=event.hash,
            )
            ChainHead.objects.filter(tenant_id=tenant_id).update(seq=event.seq, hash=event.hash)
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_notify(%s, %s)", [NOTIFY_CHANNEL, f"{tenant_id}:{event.seq}"])
        return event

    def events(self, tenant_id: str, *, after_seq: int = 0, limit: int | None = None) -> Iterator[AuditEvent]:
        """The tenant's events after ``after_seq``, oldest first, streamed in chunks."""
        rows = EventRow.objects.filter(tenant_id=tenant_id, seq__gt=after_seq).order_by("seq")
        if limit is not None:
            rows = rows[:limit]
        for row in rows.iterator(chunk_size=2000):
            yield event_from_row(row)

    def head(self, tenant_id: str) -> AuditEvent | None:
        """The newest event of the tenant's chain."""
        row = EventRow.objects.filter(tenant_id=tenant_id).order_by("-seq").first()
        return None if row is None else event_from_row(row)


def event_from_row(row: EventRow) -> AuditEvent:
    """Rebuild the engine's event exactly as stored (the hash is checked by verify, not here)."""
    try:
        at = datetime.fromisoformat(row.at)
        body = json.loads(row.body)
    except (TypeError, ValueError) as exc:
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
        hash=row.hash,
    )
