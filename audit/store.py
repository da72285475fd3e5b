"""The engine's AuditLog on the Django ORM: one chain per tenant, appends serialised.

An append locks the tenant's ``ChainHead`` row until its transaction ends
(``SELECT ... FOR UPDATE``; on SQLite the IMMEDIATE transaction already holds the write
lock), inserts the event with the next number and the hash linking it to the head, and
moves the head, so two writers in any number of processes can never fork the chain or
reuse a number. The append joins the caller's transaction when there is one (or its
commit group's): a state change and its audit event commit together or not at all.

This is the readable default, what SQLite runs. On PostgreSQL the wiring
(:func:`audit.wiring.audit_log`) hands out :class:`audit.store_postgresql.PostgresAuditLog`,
which writes the same rows in fewer round trips and wakes the console with ``NOTIFY``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from django.db import transaction

from audit.models import AuditEvent as EventRow
from audit.models import ChainHead
from keelgate.audit import GENESIS_HASH, AuditEvent, encode_body, format_at, stored_event
from keelgate.clock import Clock, SystemClock
from keelgate.errors import ChainBrokenError
from sitekit import metrics
from sitekit.commits import DjangoCommitGroup

NOTIFY_CHANNEL = "keelgate_audit"
"""Where PostgreSQL's log announces each committed event (``approvals.outbox`` listens)."""


class DjangoAuditLog:
    """Per-tenant hash chains in the ``audit_auditevent`` table."""

    def __init__(self, *, clock: Clock | None = None, group: DjangoCommitGroup | None = None) -> None:
        self.clock: Clock = clock or SystemClock()
        self.commit_group = group
        """The commit group shared with a loop's other stores, or None (each append its own)."""

    def append(self, tenant_id: str, *, actor: str, kind: str, body: Mapping[str, Any]) -> AuditEvent:
        """Append one event under the tenant's head lock and return it."""
        encoded = encode_body(body)  # refuse a non-JSON body before taking the lock
        with self._write():
            head = lock_head(tenant_id)
            event = stored_event(tenant_id, head.seq + 1, self.clock.now(), actor, kind, encoded, head.hash)
            EventRow.objects.create(
                tenant_id=tenant_id,
                seq=event.seq,
                at=format_at(event.at),
                actor=actor,
                kind=kind,
                body=encoded[0],
                prev_hash=event.prev_hash,
                hash=event.hash,
            )
            ChainHead.objects.filter(tenant_id=tenant_id, seq=head.seq).update(seq=event.seq, hash=event.hash)
            transaction.on_commit(lambda: metrics.audit_appended(kind, body))  # counted once committed
        return event

    def record(self, tenant_id: str, *, actor: str, kind: str, body: Mapping[str, Any]) -> None:
        """Append without answering with the event (``keelgate.audit.RecordingAuditLog``)."""
        self.append(tenant_id, actor=actor, kind=kind, body=body)

    def _write(self) -> AbstractContextManager[Any]:
        """The transaction an append joins: its group's, else the caller's or its own."""
        if self.commit_group is not None:
            return self.commit_group.write()
        return transaction.atomic(savepoint=False)

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


def lock_head(tenant_id: str) -> ChainHead:
    """The tenant's head, locked until the transaction ends (created first if missing).

    Only a tenant's first append finds no row: the insert that leaves an existing one
    alone makes it, whoever wins, and the locking read then waits for the winner.
    """
    heads = ChainHead.objects.select_for_update()
    head = heads.filter(tenant_id=tenant_id).first()
    if head is None:
        ChainHead.objects.bulk_create(
            [ChainHead(tenant_id=tenant_id, seq=0, hash=GENESIS_HASH)], ignore_conflicts=True
        )
        head = heads.get(tenant_id=tenant_id)
    return head


def event_from_row(row: EventRow) -> AuditEvent:
    """Rebuild the engine's event exactly as stored (the hash is checked by verify, not here)."""
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
        hash=row.hash,
    )
