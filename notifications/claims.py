"""Claim under a lease, log the attempt, record the result: delivered, skipped, retried or failed.

A sender *claims* a message's due deliveries with one conditional UPDATE of their own
columns (due and pending, or delivering under a lease that ran out), so of several
``keelgate_notify`` processes exactly one sends each. The claim, the attempt count and
the channel's attempt log rows commit **before** the message goes out: a sender
SIGKILLed mid-send leaves claimed deliveries with unfinished attempts, and once the
lease runs out another sender sends them again (at least once).

After a failure a delivery waits what the channel's :meth:`~notifications.channel.Channel.retry_after`
says for that attempt; when it says give up, the delivery is marked failed and stays visible.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from notifications.channel import Channel, D, Delivered, Failed, Result, Skipped
from notifications.models import Delivery, DeliveryStatus

log = logging.getLogger("keelgate.notifications")


@dataclass(frozen=True)
class Claim(Generic[D]):
    """Deliveries this process holds as one message: send it, then record the result under ``token``."""

    deliveries: list[D]
    token: str


def due(now: datetime) -> Q:
    """Pending and due, or claimed by a sender whose lease ran out (it died or hung)."""
    return Q(status=DeliveryStatus.PENDING, next_attempt_at__lte=now) | Q(
        status=DeliveryStatus.DELIVERING, lease_until__lt=now
    )


def claim(channel: Channel[D], pks: Sequence[int]) -> Claim[D] | None:
    """Take the deliveries ``pks`` that are still due, as one message; None if none are (any more)."""
    now = timezone.now()
    token = secrets.token_hex(16)
    model = channel.model
    with transaction.atomic():
        # Columns of these rows only: a condition through a join becomes ``id IN (SELECT
        # ..)``, which PostgreSQL does not re-check against the row a concurrent claim
        # just changed, so both claims would win.
        won = model._default_manager.filter(due(now), pk__in=list(pks)).update(
            status=DeliveryStatus.DELIVERING,
            lease_token=token,
            lease_until=now + channel.lease(),
            attempts=F("attempts") + 1,
        )
        if not won:
            return None
        held = list(model._default_manager.filter(channel.sendable(), lease_token=token).order_by("pk"))
        if len(held) != won:  # no longer sendable since the pass began (disabled): leave it due
            transaction.set_rollback(True)
            return None
        log_model = attempt_log(model)
        if log_model is not None:
            log_model._default_manager.bulk_create(
                [log_model(delivery=d, number=d.attempts, started_at=now) for d in held]
            )
    by_pk = {d.pk: d for d in held}
    return Claim([by_pk[pk] for pk in pks if pk in by_pk], token)


def record(channel: Channel[D], claim: Claim[D], result: Result) -> None:
    """Write the attempt's result; move each delivery to delivered, skipped, a later retry, or failed."""
    now = timezone.now()
    model = channel.model
    pks = [d.pk for d in claim.deliveries]
    error = result.error[:500] if isinstance(result, Failed) else ""
    code = None if isinstance(result, Skipped) else result.status_code
    with transaction.atomic():
        log_model = attempt_log(model)
        if log_model is not None:
            for delivery in claim.deliveries:
                log_model._default_manager.filter(delivery_id=delivery.pk, number=delivery.attempts).update(
                    finished_at=now,
                    status_code=code,
                    error=error,
                    duration_ms=None if isinstance(result, Skipped) else result.duration_ms,
                    response="" if isinstance(result, Skipped) else result.response,
                )
        finished = {"finished_at": now, "lease_until": None, "lease_token": ""}
        if isinstance(result, Delivered):
            # Delivered is delivered, even if our lease ran out and another process holds it now.
            model._default_manager.filter(pk__in=pks).exclude(status=DeliveryStatus.DELIVERED).update(
                status=DeliveryStatus.DELIVERED,
                receipt=result.receipt[:200],
                last_status_code=code,
                last_error="",
                **finished,
            )
            transaction.on_commit(lambda: channel.counted("delivered"))
            return
        mine = model._default_manager.filter(
            pk__in=pks, lease_token=claim.token, status=DeliveryStatus.DELIVERING
        )
        if isinstance(result, Skipped):
            mine.update(status=DeliveryStatus.SKIPPED, **finished)
            transaction.on_commit(lambda: channel.counted("skipped"))
            return
        final = isinstance(result, Failed) and result.final
        for delivery in claim.deliveries:
            wait = None if final else channel.retry_after(delivery.attempts)
            if wait is None:
                log.error(
                    "notifications: %s delivery %s given up after %s attempts",
                    channel.name,
                    delivery.pk,
                    delivery.attempts,
                )
                later: dict[str, Any] = {"status": DeliveryStatus.FAILED, "finished_at": now}
            else:
                later = {"status": DeliveryStatus.PENDING, "next_attempt_at": now + wait}
            mine.filter(pk=delivery.pk).update(
                lease_until=None, lease_token="", last_status_code=code, last_error=error, **later
            )
            outcome = "failed" if wait is None else "retry"
            transaction.on_commit(lambda outcome=outcome: channel.counted(outcome))  # type: ignore[misc]


def defer(channel: Channel[D], pks: Sequence[int], since: datetime) -> None:
    """Put off deliveries this pass did not try (the channel's server is down) one backoff step, uncounted."""
    now = timezone.now()
    untried = channel.model._default_manager.filter(
        pk__in=list(pks), status=DeliveryStatus.PENDING, next_attempt_at__lte=since
    )
    for delivery in untried:
        wait = channel.retry_after(max(delivery.attempts, 1))
        if wait is not None:
            channel.model._default_manager.filter(pk=delivery.pk, status=DeliveryStatus.PENDING).update(
                next_attempt_at=now + wait
            )


def receipt_for(delivery: Delivery) -> str:
    """The receipt of the newest delivered message about the same item to the same recipient, or "".

    What a channel that updates its messages reads before it sends the update.
    """
    if not delivery.item:
        return ""
    model = type(delivery)
    earlier = (
        model._default_manager.filter(
            item=delivery.item,
            status=DeliveryStatus.DELIVERED,
            **{model.RECIPIENT: getattr(delivery, model.RECIPIENT)},
        )
        .exclude(receipt="")
        .order_by("-finished_at", "-pk")
        .values_list("receipt", flat=True)
        .first()
    )
    return earlier or ""


def attempt_log(model: type[Delivery]) -> Any:
    """The channel's :class:`~notifications.models.Attempt` model, if its deliveries keep ``attempt_log``."""
    relation = getattr(model, "attempt_log", None)
    return None if relation is None else relation.rel.related_model
