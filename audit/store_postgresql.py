"""The audit log on PostgreSQL: the ORM's chain (:mod:`audit.store`), in fewer round trips.

Every hand-written statement of the audit chain lives here. The rows are the ORM
store's, and so are the reads; what differs is how an append reaches them:

- Outside a commit group, one statement links the event (:data:`LINK`): it locks the
  tenant's head, inserts the event with the next number and its hash, and moves the
  head, in the caller's transaction without a savepoint.
- In a commit group (a worker's step, a decision), :meth:`PostgresAuditLog.record`
  sends that statement unanswered, so no transaction waits for the chain's head, and a
  planner's barrier can keep it; :meth:`PostgresAuditLog.append`, which must answer with
  the event, locks the head once per transaction (the group's memo keeps it until the
  commit) and sends the insert and the head's move with the next round trip.
- Each append also queues ``NOTIFY keelgate_audit`` with the head's move, so the
  console's outbox (``approvals.outbox``) wakes at the commit instead of polling.

The event's hash is the engine's (:func:`keelgate.audit.linked_parts`): the client sends
the bytes before and after the number, and the server, which alone knows the head,
hashes ``head.hash || before || seq || after`` (:data:`LINK_HASH`).
``tests/site/audit/test_store_postgresql.py`` pins the two together on arbitrary events.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from django.db import connection, transaction

from audit.models import AuditEvent as EventRow
from audit.models import ChainHead
from audit.store import NOTIFY_CHANNEL, DjangoAuditLog
from keelgate.audit import GENESIS_HASH, AuditEvent, encode_body, format_at, linked_parts, stored_event
from keelgate.clock import Clock
from sitekit import metrics
from sitekit.commits import DjangoCommitGroup

_HEAD = ChainHead._meta.db_table
_EVENTS = EventRow._meta.db_table

LINK_HASH = "encode(sha256(convert_to(head.hash || %s || (head.seq + 1)::text || %s, 'UTF8')), 'hex')"
"""The event's hash on the server: ``keelgate.audit.compute_hash(prev_hash, canonical)``,
with the canonical bytes as :func:`keelgate.audit.linked_parts` splits them around ``seq``."""

LINK = (
    f'WITH head AS (SELECT "seq", "hash" FROM "{_HEAD}" WHERE "tenant_id" = %s FOR UPDATE),'
    f' event AS (INSERT INTO "{_EVENTS}"'
    ' ("tenant_id", "seq", "at", "actor", "kind", "body", "prev_hash", "hash")'
    f" SELECT %s, head.seq + 1, %s, %s, %s, %s, head.hash, {LINK_HASH}"
    ' FROM head RETURNING "seq", "prev_hash", "hash")'
    f' UPDATE "{_HEAD}" AS h SET "seq" = event.seq, "hash" = event.hash FROM event'
    ' WHERE h."tenant_id" = %s RETURNING pg_notify(%s, %s || event.seq)'
)
"""Lock the head, insert the event linked to it, move the head, notify: one statement."""

LINK_RETURNING = f"{LINK}, event.seq, event.prev_hash"
"""The same, answering with the event's number and the hash it links to."""

ENSURE_HEAD = (
    f'INSERT INTO "{_HEAD}" ("tenant_id", "seq", "hash") VALUES (%s, 0, %s)'
    ' ON CONFLICT ("tenant_id") DO NOTHING'
)
SELECT_HEAD = f'SELECT "seq", "hash" FROM "{_HEAD}" WHERE "tenant_id" = %s FOR UPDATE'
LOCK_NEW_HEAD = (
    f'INSERT INTO "{_HEAD}" ("tenant_id", "seq", "hash") VALUES (%s, 0, %s)'
    f' ON CONFLICT ("tenant_id") DO UPDATE SET "seq" = "{_HEAD}"."seq" RETURNING "seq", "hash"'
)
"""A tenant's first append: an upsert that always takes its ``DO UPDATE`` branch creates
or locks the head, whoever wins."""
INSERT_EVENT = (
    f'INSERT INTO "{_EVENTS}" ("tenant_id", "seq", "at", "actor", "kind", "body", "prev_hash", "hash")'
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
)
MOVE_HEAD = (
    f'UPDATE "{_HEAD}" SET "seq" = %s, "hash" = %s WHERE "tenant_id" = %s AND "seq" = %s'
    " RETURNING pg_notify(%s, %s)"
)

_MEMO = "audit.head"
_ON_SERVER = ("linked on the server",)
"""The memo's head when this transaction's events were linked by the server: unknown here."""


class PostgresAuditLog(DjangoAuditLog):
    """:class:`audit.store.DjangoAuditLog`, appending with this module's statements."""

    def append(self, tenant_id: str, *, actor: str, kind: str, body: Mapping[str, Any]) -> AuditEvent:
        """Append one event under the tenant's head lock and return it."""
        encoded = encode_body(body)  # refuse a non-JSON body before taking the lock
        group = self.commit_group
        if group is None:
            return self._append_on_server(tenant_id, actor, kind, encoded, body)
        with group.write():
            # The head stays locked until the commit, so once this transaction has read
            # it, it knows it: later appends of the same transaction need no round trip,
            # and the insert and the head's move go with the next one.
            memo = group.memo
            head = memo.get((_MEMO, tenant_id))
            if head is None or head is _ON_SERVER:
                head = _lock_head(group, tenant_id)
            event = stored_event(tenant_id, head[0] + 1, self.clock.now(), actor, kind, encoded, head[1])
            group.send(
                INSERT_EVENT,
                [
                    tenant_id,
                    event.seq,
                    format_at(event.at),
                    actor,
                    kind,
                    encoded[0],
                    event.prev_hash,
                    event.hash,
                ],
            )
            # No check of the move, so the commit can go with it: were the head not
            # where this transaction left it, the event's seq is taken and the unique
            # (tenant, seq) constraint aborts the whole transaction.
            notice = f"{tenant_id}:{event.seq}"
            group.send(MOVE_HEAD, [event.seq, event.hash, tenant_id, event.seq - 1, NOTIFY_CHANNEL, notice])
            memo[(_MEMO, tenant_id)] = (event.seq, event.hash)
            transaction.on_commit(lambda: metrics.audit_appended(kind, body))  # counted once committed
        return event

    def record(self, tenant_id: str, *, actor: str, kind: str, body: Mapping[str, Any]) -> None:
        """Append without answering with the event (``keelgate.audit.RecordingAuditLog``).

        In a commit group whose transaction has not read the tenant's head, the server
        links the event (:data:`LINK`), sent unanswered; otherwise, or once the head is
        known, this is :meth:`append`.
        """
        group = self.commit_group
        if group is None:
            self.append(tenant_id, actor=actor, kind=kind, body=body)
            return
        encoded = encode_body(body)
        with group.write():
            memo = group.memo
            if memo.get((_MEMO, tenant_id), _ON_SERVER) is not _ON_SERVER:
                self.append(tenant_id, actor=actor, kind=kind, body=body)  # the head is known here
                return
            if (_MEMO, tenant_id) not in memo:  # the head row exists (an index probe, no write)
                group.send(ENSURE_HEAD, [tenant_id, GENESIS_HASH])
            at = format_at(_utc_now(self.clock))
            group.send(LINK, link_params(tenant_id, at, actor, kind, encoded[0]))
            memo[(_MEMO, tenant_id)] = _ON_SERVER
            transaction.on_commit(lambda: metrics.audit_appended(kind, body))  # counted once committed

    def _append_on_server(
        self, tenant_id: str, actor: str, kind: str, encoded: Any, body: Mapping[str, Any]
    ) -> AuditEvent:
        """One statement links the event (:data:`LINK`), in the caller's transaction
        without a savepoint: an event that cannot be written aborts the change it
        records. Only a tenant's first event finds no head row and takes two more
        statements, to make it and link again."""
        at = _utc_now(self.clock)
        params = link_params(tenant_id, format_at(at), actor, kind, encoded[0])
        with transaction.atomic(savepoint=False), connection.cursor() as cursor:
            cursor.execute(LINK_RETURNING, params)
            row = cursor.fetchone()
            if row is None:
                cursor.execute(ENSURE_HEAD, [tenant_id, GENESIS_HASH])
                cursor.execute(LINK_RETURNING, params)
                row = cursor.fetchone()
            transaction.on_commit(lambda: metrics.audit_appended(kind, body))
        seq, prev_hash = int(row[1]), str(row[2])
        return stored_event(tenant_id, seq, at, actor, kind, encoded, prev_hash)


def link_params(tenant_id: str, at: str, actor: str, kind: str, body_text: str) -> list[str]:
    """:data:`LINK`'s parameters for one event (``at`` as :func:`keelgate.audit.format_at`
    writes it, in UTC)."""
    before, after = linked_parts(tenant_id, at, actor, kind, body_text)
    return [
        tenant_id,
        tenant_id,
        at,
        actor,
        kind,
        body_text,
        before,
        after,
        tenant_id,
        NOTIFY_CHANNEL,
        f"{tenant_id}:",
    ]


def _lock_head(group: DjangoCommitGroup, tenant_id: str) -> tuple[int, str]:
    """The tenant's head, locked until the commit (created first if missing); the query
    sends the writes waiting before it along."""
    rows = (
        group.query(SELECT_HEAD, [tenant_id]).rows
        or group.query(LOCK_NEW_HEAD, [tenant_id, GENESIS_HASH]).rows
    )
    seq, hash_ = rows[0]
    return int(seq), str(hash_)


def _utc_now(clock: Clock) -> datetime:
    now = clock.now()
    if now.tzinfo is None:
        raise ValueError("audit times must be timezone-aware")
    return now.astimezone(UTC)
