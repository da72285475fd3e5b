"""Sending what is due: claim a delivery, POST it signed, record the attempt, retry with backoff.

A deliverer *claims* a due delivery with one conditional UPDATE (due and pending, or
delivering under a lease that ran out), so of several ``keelgate_notify`` processes
exactly one sends it. The claim and its :class:`~notifications.models.WebhookAttempt`
row commit before the request goes out: a deliverer SIGKILLed mid-request leaves a
claimed delivery with an unfinished attempt, and once the lease runs out another
deliverer sends it again with the same ``webhook-id`` and body (at least once).

After a failure the delivery waits ``KEELGATE_WEBHOOK_RETRY_SCHEDULE[n - 1]`` seconds
after attempt ``n``; when the schedule runs out it is marked failed and stays visible.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, connections, transaction
from django.db.models import F, Q
from django.utils import timezone

from notifications.models import DeliveryStatus, WebhookAttempt, WebhookDelivery
from notifications.webhooks.outbox import webhook_scan
from notifications.webhooks.signing import signed_headers
from notifications.webhooks.targets import check_url
from notifications.webhooks.transport import Response, post
from sitekit import metrics
from sitekit.errors import WebhookUrlRefusedError

log = logging.getLogger("keelgate.webhooks")

DUE_BATCH = 200
"""Deliveries looked at per pass."""
PER_ENDPOINT = 20
"""Deliveries one endpoint gets per pass, so one slow receiver cannot starve the others."""


def timeout_seconds() -> float:
    """How long one request may take in all."""
    return float(getattr(settings, "KEELGATE_WEBHOOK_TIMEOUT_SECONDS", 10.0))


def retry_schedule() -> list[float]:
    """Seconds to wait after attempt 1, 2, ...; its length + 1 is the number of attempts."""
    return [float(s) for s in getattr(settings, "KEELGATE_WEBHOOK_RETRY_SCHEDULE", [5, 300, 1800, 7200])]


def lease_seconds() -> float:
    """How long a claim holds: never shorter than a request may take, or a live sender is raced."""
    lease = float(getattr(settings, "KEELGATE_WEBHOOK_LEASE_SECONDS", 60.0))
    return max(lease, timeout_seconds() + 1.0)


def workers() -> int:
    """Endpoints served side by side in one pass (threads; each request waits on the network)."""
    return max(1, int(getattr(settings, "KEELGATE_WEBHOOK_WORKERS", 4)))


@dataclass(frozen=True)
class Claim:
    """A delivery this process holds: send it, then record the attempt under ``token``."""

    delivery: WebhookDelivery
    token: str
    number: int


def deliver_due() -> int:
    """One pass: record what the chain owes, send every due delivery once; the number delivered."""
    webhook_scan()
    now = timezone.now()
    due = (
        WebhookDelivery.objects.filter(_due(now), endpoint__enabled=True)
        .order_by("next_attempt_at", "id")
        .values_list("pk", "endpoint_id")[:DUE_BATCH]
    )
    by_endpoint: dict[int, list[int]] = defaultdict(list)
    for pk, endpoint_id in due:
        if len(by_endpoint[endpoint_id]) < PER_ENDPOINT:
            by_endpoint[endpoint_id].append(pk)
    groups = list(by_endpoint.values())
    if len(groups) <= 1 or workers() == 1:
        return sum(deliver_group(group) for group in groups)
    with ThreadPoolExecutor(max_workers=min(workers(), len(groups))) as pool:
        return sum(pool.map(_threaded_group, groups))


def _threaded_group(pks: list[int]) -> int:
    try:
        return deliver_group(pks)
    finally:
        connections.close_all()  # this thread's own connections


def deliver_group(pks: list[int]) -> int:
    """Send one endpoint's due deliveries in order; stop at the first failure (it is down)."""
    delivered = 0
    try:
        for pk in pks:
            claim = delivery_claim(pk)
            if claim is None:
                continue
            response = delivery_send(claim.delivery)
            delivery_record(claim, response)
            if not response.ok:
                break
            delivered += 1
    except DatabaseError:
        # A claim that was taken stays claimed; its lease runs out and it is sent again.
        log.exception("webhook delivery failed on the database; the next pass retries")
    return delivered


def delivery_claim(pk: int) -> Claim | None:
    """Take delivery ``pk`` if it is still due; None if it is not, or another process won it."""
    now = timezone.now()
    token = secrets.token_hex(16)
    with transaction.atomic():
        # Columns of this row only: a condition through a join becomes ``id IN (SELECT
        # ..)``, which PostgreSQL does not re-check against the row a concurrent claim
        # just changed, so both claims would win.
        won = WebhookDelivery.objects.filter(_due(now), pk=pk).update(
            status=DeliveryStatus.DELIVERING,
            lease_token=token,
            lease_until=now + timedelta(seconds=lease_seconds()),
            attempts=F("attempts") + 1,
        )
        if won != 1:
            return None
        delivery = WebhookDelivery.objects.select_related("endpoint").get(pk=pk)
        if not delivery.endpoint.enabled:  # disabled since the pass began: leave it due
            transaction.set_rollback(True)
            return None
        WebhookAttempt.objects.create(delivery=delivery, number=delivery.attempts, started_at=now)
    return Claim(delivery, token, delivery.attempts)


def delivery_send(delivery: WebhookDelivery) -> Response:
    """POST the delivery, signed now, to its endpoint; a refused address is a failed attempt."""
    started = time.monotonic()
    try:
        target, addresses = check_url(delivery.endpoint.url)
    except WebhookUrlRefusedError as exc:
        return Response(None, f"refused: {exc.detail}", int((time.monotonic() - started) * 1000))
    body = delivery.payload.encode()
    headers = signed_headers(delivery.endpoint.secret, delivery.webhook_id, int(time.time()), body)
    return post(target, addresses[0], body, headers, timeout_seconds())


def delivery_record(claim: Claim, response: Response) -> None:
    """Write the attempt's result; move the delivery to delivered, a later retry, or failed."""
    now = timezone.now()
    with transaction.atomic():
        WebhookAttempt.objects.filter(delivery_id=claim.delivery.pk, number=claim.number).update(
            finished_at=now,
            status_code=response.status,
            error=response.error[:500],
            duration_ms=response.duration_ms,
        )
        result = {"last_status_code": response.status, "last_error": response.error[:500]}
        if response.ok:
            # Delivered is delivered, even if our lease ran out and another process holds it now.
            WebhookDelivery.objects.filter(pk=claim.delivery.pk).exclude(
                status=DeliveryStatus.DELIVERED
            ).update(
                status=DeliveryStatus.DELIVERED, delivered_at=now, lease_until=None, lease_token="", **result
            )
            transaction.on_commit(lambda: metrics.WEBHOOK_ATTEMPTS.labels("delivered").inc())
            return
        schedule = retry_schedule()
        if claim.number <= len(schedule):
            later = {
                "status": DeliveryStatus.PENDING,
                "next_attempt_at": now + timedelta(seconds=schedule[claim.number - 1]),
            }
        else:
            later = {"status": DeliveryStatus.FAILED}
        WebhookDelivery.objects.filter(
            pk=claim.delivery.pk, lease_token=claim.token, status=DeliveryStatus.DELIVERING
        ).update(lease_until=None, lease_token="", **later, **result)
        outcome = "failed" if later["status"] == DeliveryStatus.FAILED else "retry"
        transaction.on_commit(lambda: metrics.WEBHOOK_ATTEMPTS.labels(outcome).inc())


def _due(now: object) -> Q:
    """Pending and due, or claimed by a deliverer whose lease ran out (it died or hung)."""
    return Q(status=DeliveryStatus.PENDING, next_attempt_at__lte=now) | Q(
        status=DeliveryStatus.DELIVERING, lease_until__lt=now
    )
