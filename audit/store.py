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
import threading
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any

from django.db import transaction

from audit.models import AuditEvent as EventRow
from audit.models import PendingEvent
from audit.tree import integrate
from keelgate.audit import MAX_SAFE_INTEGER, AuditEvent, format_at
from keelgate.canonical import canonical_json
from keelgate.clock import Clock, SystemClock
from keelgate.errors import ChainBrokenError
from sitekit import metrics
from sitekit.commits import DjangoCommitGroup

NOTIFY_CHANNEL = "keelgate_audit"
"""Where PostgreSQL's log announces each tenant's new head (``approvals.outbox`` listens)."""


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
                written = self._integrate(tenant_id)
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

    def _integrate(self, tenant_id: str) -> dict[int, EventRow]:
        """Sequence a batch of the tenant's pending events, waiting for its head (:func:`integrate`)."""
        return integrate(tenant_id, wait=True)

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

    Raises TypeError or ValueError for a body that is not JSON, or that RFC 8785 cannot
    carry: refused here, in the writer's transaction, never found by the sequencer. An
    integer RFC 8785 cannot carry (beyond 2**53) is kept as its decimal text
    (:func:`keelgate.audit.i_json`).

    The body is encoded once and read back once; only a body holding such an integer,
    found as it is read back, is encoded again. What else RFC 8785 refuses, json has
    refused already (a float that is not finite) except a lone surrogate, which has no
    UTF-8 form: every other value json writes, JCS writes too (a test holds this to the
    readable version, which encoded every body three times and wrote its leaf bytes).
    """
    if not isinstance(body, Mapping):
        raise TypeError(f"audit body must be a mapping, not {type(body).__name__}")
    text = canonical_json(dict(body))
    _READ_BACK.beyond = False
    value: dict[str, Any] = _READ_BACK_DECODER.decode(text)
    if _READ_BACK.beyond:  # read back as its decimal text: write that
        text = canonical_json(value)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"not representable in RFC 8785: {exc}") from exc
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


class _ReadBack(threading.local):
    beyond = False
    """Whether the body this thread is reading back held an integer beyond 2**53."""


_READ_BACK = _ReadBack()


def _int_or_text(digits: str) -> int | str:
    """A JSON integer as :func:`keelgate.audit.i_json` keeps it: beyond 2**53, its text."""
    number = int(digits)
    if -MAX_SAFE_INTEGER <= number <= MAX_SAFE_INTEGER:
        return number
    _READ_BACK.beyond = True
    return digits


_READ_BACK_DECODER = json.JSONDecoder(parse_int=_int_or_text)


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
