"""The audit log on PostgreSQL: appends that only insert, so writers never wait for each other.

Every hand-written statement of the audit log lives here. The rows are the ORM store's
(:mod:`audit.store`), and so are the reads and the sequencing (:mod:`audit.tree`);
what differs is the append:

- :meth:`PostgresAuditLog.record` (what the loop, the gateway and the services call)
  inserts the event unnumbered (a ``PendingEvent``) with one statement
  (:data:`INSERT_PENDING`): in a commit group it is sent unanswered, with the next round
  trip; in the caller's transaction it joins it; with none, it is one autocommit
  statement. No row is locked: one tenant's writers no longer queue on its head. It
  sends no ``NOTIFY``: PostgreSQL commits every transaction that notifies one after the
  other, each waiting for the one before to reach the disk, so writers that would
  otherwise share a WAL flush queue instead (docs/performance.md#audit-append). The
  sequencer (``keelgate_sequencer``) looks for pending events every few tens of
  milliseconds instead, and so does the console's outbox for the tenants it watches.
- :meth:`PostgresAuditLog.append`, which must answer with the event's number, inserts
  and then sequences in the caller's transaction, waiting for the tenant's head, as the
  ORM store does.
- Sequencing (:mod:`audit.tree`) writes each batch with ``COPY`` (:func:`write_batch`):
  through the ORM's bulk inserts the sequencer spent several times the CPU per event
  (docs/performance.md#audit-append), and its work shares the machine with the writers.
- Sequencing announces each tenant's new head on ``keelgate_audit`` (:func:`announce`),
  so the console's outbox (``approvals.outbox``) wakes at that commit.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from django.db import connection, transaction

from audit.models import AuditEvent as EventRow
from audit.models import PendingEvent, TreeNode
from audit.store import NOTIFY_CHANNEL, DjangoAuditLog, pending_event
from audit.tree import integrate, integrate_all
from keelgate.audit import AuditEvent
from sitekit import metrics

__all__ = ["INSERT_PENDING", "PostgresAuditLog", "announce", "write_batch"]

_PENDING = PendingEvent._meta.db_table

_COLUMNS = ("tenant_id", "at", "actor", "kind", "body", "run_id", "tool")
_NAMES = ", ".join(f'"{c}"' for c in _COLUMNS)
_VALUES = ", ".join(["%s"] * len(_COLUMNS))

INSERT_PENDING = f'INSERT INTO "{_PENDING}" ({_NAMES}) VALUES ({_VALUES})'
"""One unnumbered event."""

ANNOUNCE = "SELECT pg_notify(%s, %s)"

_EVENT_COLUMNS = (
    "tenant_id",
    "seq",
    "at",
    "actor",
    "kind",
    "body",
    "run_id",
    "tool",
    "version",
    "leaf_hash",
    "prev_hash",
    "hash",
)
_EVENT_NAMES = ", ".join(f'"{c}"' for c in _EVENT_COLUMNS)
COPY_EVENTS = f'COPY "{EventRow._meta.db_table}" ({_EVENT_NAMES}) FROM STDIN'
COPY_NODES = f'COPY "{TreeNode._meta.db_table}" ("tenant_id", "level", "index", "hash") FROM STDIN'
DELETE_PENDING = f'DELETE FROM "{_PENDING}" WHERE "id" = ANY(%s)'


class PostgresAuditLog(DjangoAuditLog):
    """:class:`audit.store.DjangoAuditLog`, whose ``record`` only inserts."""

    def record(self, tenant_id: str, *, actor: str, kind: str, body: Mapping[str, Any]) -> None:
        """Insert the event unnumbered, in the caller's (or its group's) transaction, or
        as one autocommit statement when there is none."""
        columns = pending_event(tenant_id, self.clock.now(), actor, kind, body)
        params = [columns[c] for c in _COLUMNS]
        group = self.commit_group
        if group is not None:
            with group.write():
                group.send(INSERT_PENDING, params)
                transaction.on_commit(lambda: metrics.audit_appended(kind, body))
            return
        if connection.get_autocommit():  # no transaction to join: the statement is its own
            with connection.cursor() as cursor:
                cursor.execute(INSERT_PENDING, params)
            metrics.audit_appended(kind, body)
            return
        with transaction.atomic(savepoint=False), connection.cursor() as cursor:
            cursor.execute(INSERT_PENDING, params)
            transaction.on_commit(lambda: metrics.audit_appended(kind, body))

    def events(self, tenant_id: str, *, after_seq: int = 0, limit: int | None = None) -> Iterator[AuditEvent]:
        """The tenant's events after ``after_seq``, what is pending numbered first."""
        integrate_all([tenant_id], announce=announce, write=write_batch)
        return super().events(tenant_id, after_seq=after_seq, limit=limit)

    def head(self, tenant_id: str) -> AuditEvent | None:
        """The newest event of the tenant's log, what is pending numbered first."""
        integrate_all([tenant_id], announce=announce, write=write_batch)
        return super().head(tenant_id)

    def _integrate(self, tenant_id: str) -> dict[int, EventRow]:
        # No announce: an append's transaction sends no NOTIFY (see the module), as before.
        return integrate(tenant_id, wait=True, write=write_batch)


def write_batch(
    tenant_id: str,
    events: Sequence[EventRow],
    nodes: Sequence[tuple[int, int, bytes]],
    pending_ids: Sequence[int],
) -> None:
    """:data:`audit.tree.WriteBatch` with ``COPY``: the same rows as the ORM's bulk inserts,
    without building a statement of every value in Python (see the module)."""
    from psycopg import Cursor  # the postgres extra's: imported where PostgreSQL is in use

    with connection.cursor() as cursor, connection.wrap_database_errors:
        raw = cursor.cursor
        with raw.copy(COPY_EVENTS) as copy:
            for event in events:
                copy.write_row([getattr(event, column) for column in _EVENT_COLUMNS])
        with raw.copy(COPY_NODES) as copy:
            for level, index, hash_ in nodes:
                copy.write_row((tenant_id, level, index, hash_))
        # Bound on the server: one array parameter, not two thousand literals.
        Cursor(connection.connection).execute(DELETE_PENDING, [list(pending_ids)])


def announce(tenant_id: str, seq: int) -> None:
    """``NOTIFY keelgate_audit '<tenant>:<seq>'`` at the commit of the sequencing transaction."""
    with connection.cursor() as cursor:
        cursor.execute(ANNOUNCE, [NOTIFY_CHANNEL, f"{tenant_id}:{seq}"])
