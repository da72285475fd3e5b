"""The engine's AuditLog on the Django ORM: one chain per tenant, appends serialised.

An append locks the tenant's ``ChainHead`` row (``SELECT ... FOR UPDATE`` on
PostgreSQL, outside a grouped transaction in the one statement that also inserts the
event and moves the head; on SQLite the IMMEDIATE transaction already holds the write
lock), so two writers in any number of processes can never fork the chain or reuse a
number. The append joins the caller's transaction when there is one: a state change
and its audit event commit together or not at all. On PostgreSQL it also sends ``NOTIFY`` on commit,
so the console wakes at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from django.db import connection, transaction

from audit.models import AuditEvent as EventRow
from audit.models import ChainHead
from keelgate.audit import GENESIS_HASH, AuditEvent, encode_body, format_at, linked_parts, stored_event
from keelgate.clock import Clock, SystemClock
from keelgate.errors import ChainBrokenError
from sitekit import metrics
from sitekit.commits import DjangoCommitGroup
from sitekit.db import insert_sql
from sitekit.postgresql.commits import PostgresCommitGroup

NOTIFY_CHANNEL = "keelgate_audit"


class DjangoAuditLog:
    """Per-tenant hash chains in the ``audit_auditevent`` table."""

    def __init__(self, *, clock: Clock | None = None, group: DjangoCommitGroup | None = None) -> None:
        self.clock: Clock = clock or SystemClock()
        self.commit_group = group
        """The commit group shared with a loop's other stores, or None (each append its own)."""

    def append(self, tenant_id: str, *, actor: str, kind: str, body: Mapping[str, Any]) -> AuditEvent:
        """Append one event under the tenant's head lock and return it."""
        encoded = encode_body(body)  # refuse a non-JSON body before taking the lock
        group = self.commit_group
        if group is None and connection.vendor == "postgresql":
            return self._append_on_server(tenant_id, actor, kind, encoded, body)
        if group is None:
            with transaction.atomic():
                head_seq, head_hash = _lock_head(tenant_id)
                event = self._event(tenant_id, head_seq, head_hash, actor, kind, encoded)
                with connection.cursor() as cursor:
                    cursor.execute(insert_sql(EventRow, _EVENT_COLUMNS), _event_row(event, encoded))
                _move_head(tenant_id, event.seq, event.hash)
                transaction.on_commit(lambda: metrics.audit_appended(kind, body))
            return event
        with group.write():
            # The head stays locked until the commit, so once this transaction has read
            # it, it knows it: later appends of the same transaction need no round trip,
            # and the insert and the head's move go with the next one.
            memo = group.memo
            head = memo.get((_MEMO, tenant_id))
            if head is None or head is _ON_SERVER:
                head = _lock_head(tenant_id, group.query)
            event = self._event(tenant_id, head[0], head[1], actor, kind, encoded)
            group.send(insert_sql(EventRow, _EVENT_COLUMNS), _event_row(event, encoded))
            # No check of the move, so the commit can go with it: were the head not
            # where this transaction left it, the event's seq is taken and the unique
            # (tenant, seq) constraint aborts the whole transaction.
            group.send(*_move_head_sql(tenant_id, event.seq, event.hash))
            memo[(_MEMO, tenant_id)] = (event.seq, event.hash)
            transaction.on_commit(lambda: metrics.audit_appended(kind, body))  # counted once committed
        return event

    def record(self, tenant_id: str, *, actor: str, kind: str, body: Mapping[str, Any]) -> None:
        """Append without answering with the event (``keelgate.audit.RecordingAuditLog``).

        In a grouped transaction on PostgreSQL that has not read the tenant's head, the
        server links the event: one statement locks the head, inserts the event with
        the next number and the hash of ``head.hash + before + seq + after``
        (:func:`keelgate.audit.linked_parts`), and moves the head. It is sent, so the
        transaction needs no round trip for the head, and a planner's barrier can
        keep it. Otherwise, or once the head is known, this is :meth:`append`.
        """
        group = self.commit_group
        if not isinstance(group, PostgresCommitGroup):
            self.append(tenant_id, actor=actor, kind=kind, body=body)
            return
        encoded = encode_body(body)
        with group.write():
            memo = group.memo
            if memo.get((_MEMO, tenant_id), _ON_SERVER) is not _ON_SERVER:
                self.append(tenant_id, actor=actor, kind=kind, body=body)  # the head is known here
                return
            if (_MEMO, tenant_id) not in memo:  # the head row exists (an index probe, no write)
                group.send(_ENSURE_HEAD, [tenant_id, GENESIS_HASH])
            at = format_at(_utc_now(self.clock))
            before, after = linked_parts(tenant_id, at, actor, kind, encoded[0])
            group.send(_LINK_ON_SERVER, _link_params(tenant_id, at, actor, kind, encoded[0], before, after))
            memo[(_MEMO, tenant_id)] = _ON_SERVER
            transaction.on_commit(lambda: metrics.audit_appended(kind, body))  # counted once committed

    def _append_on_server(
        self, tenant_id: str, actor: str, kind: str, encoded: Any, body: Mapping[str, Any]
    ) -> AuditEvent:
        """One statement links the event on the server (see :meth:`record`), in the
        caller's transaction without a savepoint: an event that cannot be written
        aborts the change it records. Only a tenant's first event finds no head row
        and takes two more statements, to make it and link again."""
        at = _utc_now(self.clock)
        at_text = format_at(at)
        before, after = linked_parts(tenant_id, at_text, actor, kind, encoded[0])
        params = _link_params(tenant_id, at_text, actor, kind, encoded[0], before, after)
        with transaction.atomic(savepoint=False), connection.cursor() as cursor:
            cursor.execute(_LINK_ON_SERVER_RETURNING, params)
            row = cursor.fetchone()
            if row is None:
                cursor.execute(_ENSURE_HEAD, [tenant_id, GENESIS_HASH])
                cursor.execute(_LINK_ON_SERVER_RETURNING, params)
                row = cursor.fetchone()
            transaction.on_commit(lambda: metrics.audit_appended(kind, body))
        seq, prev_hash = int(row[1]), str(row[2])
        return stored_event(tenant_id, seq, at, actor, kind, encoded, prev_hash)

    def _event(
        self, tenant_id: str, head_seq: int, head_hash: str, actor: str, kind: str, encoded: Any
    ) -> AuditEvent:
        return stored_event(tenant_id, head_seq + 1, self.clock.now(), actor, kind, encoded, head_hash)

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


_EVENT_COLUMNS = ("tenant_id", "seq", "at", "actor", "kind", "body", "prev_hash", "hash")
_LOCK_HEAD_TAIL = (
    f' ON CONFLICT ("tenant_id") DO UPDATE SET "seq" = "{ChainHead._meta.db_table}"."seq"'
    ' RETURNING "seq", "hash"'
)


def _lock_head(tenant_id: str, query: Any = None) -> tuple[int, str]:
    """The tenant's head, locked until the commit (created first if missing).

    ``SELECT .. FOR UPDATE`` on PostgreSQL, which writes nothing (the head's move does,
    once); on SQLite the IMMEDIATE transaction already holds the write lock. Only a
    tenant's first append finds no row: an upsert that always takes its ``DO UPDATE``
    branch then creates or locks it, whoever wins. ``query`` is a commit group's, which
    sends the writes waiting before it along.
    """

    def run(sql: str, params: list[str | int]) -> list[tuple[Any, ...]]:
        if query is not None:
            return list(query(sql, params).rows)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    rows = run(_SELECT_HEAD if connection.vendor == "postgresql" else _SELECT_HEAD_SQLITE, [tenant_id])
    if not rows:
        rows = run(
            insert_sql(ChainHead, ("tenant_id", "seq", "hash"), _LOCK_HEAD_TAIL), [tenant_id, 0, GENESIS_HASH]
        )
    seq, hash_ = rows[0]
    return int(seq), str(hash_)


def _event_row(event: AuditEvent, encoded: Any) -> tuple[Any, ...]:
    return (
        event.tenant_id,
        event.seq,
        format_at(event.at),
        event.actor,
        event.kind,
        encoded[0],
        event.prev_hash,
        event.hash,
    )


def _move_head(tenant_id: str, seq: int, hash_: str) -> None:
    sql, params = _move_head_sql(tenant_id, seq, hash_)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def _move_head_sql(tenant_id: str, seq: int, hash_: str) -> tuple[str, list[str | int]]:
    """Point the head at the new event, from the one before it; on PostgreSQL the same
    statement queues the NOTIFY."""
    params: list[str | int] = [seq, hash_, tenant_id, seq - 1]
    if connection.vendor == "postgresql":
        return f"{_MOVE_HEAD} RETURNING pg_notify(%s, %s)", [*params, NOTIFY_CHANNEL, f"{tenant_id}:{seq}"]
    return _MOVE_HEAD, params


_SELECT_HEAD_SQLITE = f'SELECT "seq", "hash" FROM "{ChainHead._meta.db_table}" WHERE "tenant_id" = %s'
_SELECT_HEAD = f"{_SELECT_HEAD_SQLITE} FOR UPDATE"
_MEMO = "audit.head"
_ON_SERVER = ("linked on the server",)
"""The memo's head when this transaction's events were linked by the server: unknown here."""
_ENSURE_HEAD = (
    f'INSERT INTO "{ChainHead._meta.db_table}" ("tenant_id", "seq", "hash") VALUES (%s, 0, %s)'
    ' ON CONFLICT ("tenant_id") DO NOTHING'
)
_LINK_ON_SERVER = (
    f'WITH head AS (SELECT "seq", "hash" FROM "{ChainHead._meta.db_table}"'
    ' WHERE "tenant_id" = %s FOR UPDATE),'
    f' event AS (INSERT INTO "{EventRow._meta.db_table}"'
    ' ("tenant_id", "seq", "at", "actor", "kind", "body", "prev_hash", "hash")'
    " SELECT %s, head.seq + 1, %s, %s, %s, %s, head.hash,"
    " encode(sha256(convert_to(head.hash || %s || (head.seq + 1)::text || %s, 'UTF8')), 'hex')"
    ' FROM head RETURNING "seq", "prev_hash", "hash")'
    f' UPDATE "{ChainHead._meta.db_table}" AS h SET "seq" = event.seq, "hash" = event.hash FROM event'
    ' WHERE h."tenant_id" = %s RETURNING pg_notify(%s, %s || event.seq)'
)
_LINK_ON_SERVER_RETURNING = f"{_LINK_ON_SERVER}, event.seq, event.prev_hash"
"""The same, answering with the event's number and the hash it links to."""

_MOVE_HEAD = (
    f'UPDATE "{ChainHead._meta.db_table}" SET "seq" = %s, "hash" = %s WHERE "tenant_id" = %s AND "seq" = %s'
)


def _link_params(
    tenant_id: str, at: str, actor: str, kind: str, body_text: str, before: str, after: str
) -> list[str]:
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


def _utc_now(clock: Clock) -> datetime:
    now = clock.now()
    if now.tzinfo is None:
        raise ValueError("audit times must be timezone-aware")
    return now.astimezone(UTC)


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
