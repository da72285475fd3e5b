"""The audit chain as every channel's outbox: each subscriber's cursor, and the deliveries it leaves.

Every state change writes its audit event in the same transaction, so the chain holds
exactly what committed. :func:`tail` reads each subscriber's tenant chain past its
:class:`~notifications.models.ChainCursor`, lets the channel route what it read into
deliveries, and in **one transaction** records them and moves the cursors. A process
that dies before the commit moved nothing, and the next pass reads the same stretch
again; one that commits has recorded everything it passed.

Several processes may tail at once. The cursors of a group are locked (``SELECT ... FOR
UPDATE SKIP LOCKED`` on PostgreSQL: a group another pass holds is skipped; SQLite's
IMMEDIATE transactions take turns) and each moves with a conditional UPDATE from where
it was read; if another pass moved one first, this pass rolls back and leaves that
stretch to it. A pass with nothing new for a group takes no write lock.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from audit.models import AuditEvent
from audit.selectors import audit_heads
from audit.wiring import integrate_pending
from notifications.channel import ChainEvent, Channel, Feed, Subscription
from notifications.models import ChainCursor

log = logging.getLogger("keelgate.notifications")

EVENTS_PER_READ = 1000
"""Events of the channel's kinds read per cursor per transaction."""
READS_PER_PASS = 20
"""A longer backlog is read over several passes, so deliveries start meanwhile."""


class _CursorMoved(Exception):
    """Another pass moved a cursor first: roll this one back, the other has it."""


def tail(channel: Channel[Any]) -> int:
    """Record what the chain owes the channel's subscribers; the number of deliveries recorded."""
    groups = [group for group in channel.subscriptions() if group]
    tenants = {s.tenant_id for group in groups for s in group}
    integrate_pending(tenants)  # a reader of the log numbers what is pending first
    heads = audit_heads(tenants)
    made = 0
    for group in groups:
        try:
            for _ in range(READS_PER_PASS):
                recorded, more = _tail_group(channel, group, heads)
                made += recorded
                if not more:
                    break
        except _CursorMoved:
            continue
        except Exception:
            # Its cursors did not move (the transaction rolled back): the next pass tries
            # again, and the other subscribers must not wait for this one.
            log.exception("notifications: %s could not read the chain for %s", channel.name, group[0])
    return made


def cursor_open(channel: Channel[Any] | str, subscription: Subscription) -> ChainCursor:
    """The subscriber's cursor, made at the chain's head or start if it has none yet."""
    name = channel if isinstance(channel, str) else channel.name
    seq = audit_heads([subscription.tenant_id])[subscription.tenant_id] if subscription.from_head else 0
    cursor, _ = ChainCursor.objects.get_or_create(
        channel=name,
        subscriber=subscription.subscriber,
        defaults={"tenant_id": subscription.tenant_id, "seq": seq},
    )
    return cursor


def _tail_group(channel: Channel[Any], group: list[Subscription], heads: dict[str, int]) -> tuple[int, bool]:
    """One read of one group: deliveries recorded, and whether more events wait."""
    keys = [s.subscriber for s in group]
    known = {c.subscriber: c for c in ChainCursor.objects.filter(channel=channel.name, subscriber__in=keys)}
    busy = [s for s in group if s.subscriber not in known or _behind(known[s.subscriber], heads)]
    if not busy:
        return 0, False
    now = timezone.now()
    more = False
    with transaction.atomic():
        for subscription in busy:
            if subscription.subscriber not in known:
                cursor_open(channel, subscription)
        cursors = {
            c.subscriber: c
            for c in ChainCursor.objects.select_for_update(skip_locked=True).filter(
                channel=channel.name, subscriber__in=[s.subscriber for s in busy]
            )
        }
        feeds = []
        for subscription in busy:
            cursor = cursors.get(subscription.subscriber)
            if cursor is None:  # another pass holds it
                continue
            events, upto = _read(channel, cursor, heads[subscription.tenant_id])
            more = more or upto < heads[subscription.tenant_id]
            feeds.append((cursor, upto, Feed(subscription, events, list(cursor.held))))
        if not feeds:
            return 0, False
        routed = channel.route([feed for _, _, feed in feeds], now)
        channel.model.objects.bulk_create(routed.deliveries, ignore_conflicts=True)
        for cursor, upto, feed in feeds:
            moved = ChainCursor.objects.filter(pk=cursor.pk, seq=cursor.seq).update(
                seq=upto, held=routed.held.get(feed.subscription.subscriber, []), updated_at=now
            )
            if not moved:
                raise _CursorMoved(cursor.subscriber)
    return len(routed.deliveries), more


def _behind(cursor: ChainCursor, heads: dict[str, int]) -> bool:
    return heads.get(cursor.tenant_id, 0) > cursor.seq or bool(cursor.held)


def _read(channel: Channel[Any], cursor: ChainCursor, head: int) -> tuple[list[ChainEvent], int]:
    """The channel's events in ``(cursor, head]``, at most a read's worth, and where the cursor goes."""
    rows = list(
        AuditEvent.objects.filter(
            tenant_id=cursor.tenant_id, seq__gt=cursor.seq, seq__lte=head, kind__in=channel.kinds
        )
        .order_by("seq")
        .values_list("seq", "at", "actor", "kind", "body")[:EVENTS_PER_READ]
    )
    events = [
        ChainEvent(cursor.tenant_id, seq, at, actor, kind, _body(body)) for seq, at, actor, kind, body in rows
    ]
    upto = rows[-1][0] if len(rows) == EVENTS_PER_READ else max(cursor.seq, head)
    return events, upto


def _body(text: str) -> dict[str, Any]:
    try:
        body = json.loads(text)
    except ValueError:  # a damaged row is the verifier's business; skip it, do not stall
        return {}
    return body if isinstance(body, dict) else {}


__all__ = ["cursor_open", "tail"]
