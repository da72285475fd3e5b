"""The audit log on PostgreSQL: appends that only insert, so writers never wait for each other.

Every hand-written statement of the audit log lives here. The rows are the ORM store's
(:mod:`audit.store`), and so are the reads and the sequencing (:mod:`audit.tree`);
what differs is the append:

- :meth:`PostgresAuditLog.record` (what the loop, the gateway and the services call)
  inserts the event unnumbered (a ``PendingEvent``) with one statement (:data:`INSERT_PENDING`); in a commit
  group it is sent unanswered, with the next round trip. No row is locked: one tenant's
  writers no longer queue on its head. The insert ``NOTIFY``s :data:`PENDING_CHANNEL`
  at the commit, which wakes the sequencer (``keelgate_sequencer``).
- :meth:`PostgresAuditLog.append`, which must answer with the event's number, inserts
  and then sequences in the caller's transaction, waiting for the tenant's head, as the
  ORM store does.
- Sequencing announces each tenant's new head on ``keelgate_audit`` (:func:`announce`),
  so the console's outbox (``approvals.outbox``) wakes at that commit.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from django.db import connection, transaction

from audit.models import PendingEvent
from audit.store import NOTIFY_CHANNEL, PENDING_CHANNEL, DjangoAuditLog, pending_event
from audit.tree import integrate_all
from keelgate.audit import AuditEvent
from sitekit import metrics

__all__ = ["INSERT_PENDING", "PostgresAuditLog", "announce"]

_PENDING = PendingEvent._meta.db_table

_COLUMNS = ("tenant_id", "at", "actor", "kind", "body", "run_id", "tool")
_NAMES = ", ".join(f'"{c}"' for c in _COLUMNS)
_VALUES = ", ".join(["%s"] * len(_COLUMNS))

INSERT_PENDING = f'INSERT INTO "{_PENDING}" ({_NAMES}) VALUES ({_VALUES}) RETURNING pg_notify(%s, %s)'
"""One unnumbered event, and the sequencer's wake-up at the commit."""

ANNOUNCE = "SELECT pg_notify(%s, %s)"


class PostgresAuditLog(DjangoAuditLog):
    """:class:`audit.store.DjangoAuditLog`, whose ``record`` only inserts."""

    def record(self, tenant_id: str, *, actor: str, kind: str, body: Mapping[str, Any]) -> None:
        """Insert the event unnumbered, in the caller's (or its group's) transaction."""
        columns = pending_event(tenant_id, self.clock.now(), actor, kind, body)
        params = [*(columns[c] for c in _COLUMNS), PENDING_CHANNEL, tenant_id]
        group = self.commit_group
        if group is not None:
            with group.write():
                group.send(INSERT_PENDING, params)
                transaction.on_commit(lambda: metrics.audit_appended(kind, body))
            return
        with transaction.atomic(savepoint=False), connection.cursor() as cursor:
            cursor.execute(INSERT_PENDING, params)
            transaction.on_commit(lambda: metrics.audit_appended(kind, body))

    def events(self, tenant_id: str, *, after_seq: int = 0, limit: int | None = None) -> Iterator[AuditEvent]:
        """The tenant's events after ``after_seq``, what is pending numbered first."""
        integrate_all([tenant_id], announce=announce)
        return super().events(tenant_id, after_seq=after_seq, limit=limit)

    def head(self, tenant_id: str) -> AuditEvent | None:
        """The newest event of the tenant's log, what is pending numbered first."""
        integrate_all([tenant_id], announce=announce)
        return super().head(tenant_id)


def announce(tenant_id: str, seq: int) -> None:
    """``NOTIFY keelgate_audit '<tenant>:<seq>'`` at the commit of the sequencing transaction."""
    with connection.cursor() as cursor:
        cursor.execute(ANNOUNCE, [NOTIFY_CHANNEL, f"{tenant_id}:{seq}"])
