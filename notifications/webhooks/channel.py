"""Webhooks on the shared engine: one signed POST per audit event, per endpoint, in order.

Each enabled endpoint reads its tenant's chain past a cursor of its own, made at the
chain's head when the endpoint was registered (it hears of events from then on). Every
audit event that maps to a webhook event the endpoint wants becomes a
:class:`~notifications.models.WebhookDelivery`, unique per (endpoint, event), so two
passes at once record it once. Its id (``msg_<tenant>_<seq>``, :func:`message_id`) and
body (:func:`webhook_payload`) are fixed when it is recorded: every retry, in any
process, sends the same id and bytes, and a receiver that deduplicates on
``webhook-id`` sees each event once. How one message is made, signed and sent is
:mod:`notifications.webhooks.messages`.

Each delivery is its own message, claimed just before it is sent, so a request that
outlives the lease is the only one another sender may take over. An endpoint's
deliveries go in order and stop at the first failure (it is down); endpoints are served
side by side on ``KEELGATE_WEBHOOK_WORKERS`` threads. The address is checked again
before every attempt (the SSRF guard), and a refused one is a failed attempt. After a
failure the delivery waits ``KEELGATE_WEBHOOK_RETRY_SCHEDULE[n - 1]`` seconds after
attempt ``n``; when the schedule runs out it is marked failed and stays visible.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q

from notifications.channel import ChannelDefaults, Delivered, Failed, Feed, Result, Routed, Subscription
from notifications.models import WebhookDelivery, WebhookEndpoint
from notifications.webhooks.events import AUDIT_KINDS, webhook_event
from notifications.webhooks.messages import delivery_send, message_id, timeout_seconds, webhook_payload
from sitekit import metrics


def retry_schedule() -> list[float]:
    """Seconds to wait after attempt 1, 2, ...; its length + 1 is the number of attempts."""
    return [float(s) for s in getattr(settings, "KEELGATE_WEBHOOK_RETRY_SCHEDULE", [5, 300, 1800, 7200])]


class WebhookChannel(ChannelDefaults[WebhookDelivery]):
    """Standard Webhooks to each tenant's registered receivers."""

    name = "webhooks"
    model = WebhookDelivery
    kinds = AUDIT_KINDS

    @property
    def workers(self) -> int:
        """Endpoints served side by side in one pass (threads; each request waits on the network)."""
        return max(1, int(getattr(settings, "KEELGATE_WEBHOOK_WORKERS", 4)))

    def subscriptions(self) -> list[list[Subscription]]:
        """Each enabled endpoint on its own, from the chain's head if it has no cursor yet."""
        endpoints = (
            WebhookEndpoint.objects.filter(enabled=True).order_by("pk").values_list("pk", "tenant__slug")
        )
        return [[Subscription(str(pk), tenant_id, from_head=True)] for pk, tenant_id in endpoints]

    def route(self, feeds: list[Feed], now: datetime) -> Routed[WebhookDelivery]:
        """A delivery per event the endpoint wants, its id and body fixed now."""
        routed: Routed[WebhookDelivery] = Routed()
        for feed in feeds:
            endpoint = WebhookEndpoint.objects.select_related("tenant").get(
                pk=int(feed.subscription.subscriber)
            )
            wanted = set(endpoint.events or [])
            for e in feed.events:
                event = webhook_event(e.kind, e.actor, e.body)
                if event is None or (wanted and event.type not in wanted):
                    continue
                routed.deliveries.append(
                    WebhookDelivery(
                        endpoint=endpoint,
                        tenant_id=e.tenant_id,
                        seq=e.seq,
                        event_type=event.type,
                        webhook_id=message_id(e.tenant_id, e.seq),
                        payload=webhook_payload(endpoint, e.seq, e.at, event),
                        next_attempt_at=now,
                    )
                )
        return routed

    def sendable(self) -> Q:
        """Only to enabled endpoints: one disabled since the pass began is left due."""
        return Q(endpoint__enabled=True)

    def send(self, deliveries: Sequence[WebhookDelivery]) -> Result:
        """POST the delivery, signed now, to its endpoint; a refused address is a failed attempt."""
        (delivery,) = deliveries
        response = delivery_send(delivery)
        code, took, said = response.status, response.duration_ms, response.body
        if response.ok:
            return Delivered(status_code=code, duration_ms=took, response=said)
        return Failed(response.error, status_code=code, duration_ms=took, response=said)

    def lease(self) -> timedelta:
        """``KEELGATE_WEBHOOK_LEASE_SECONDS``, never shorter than a request may take."""
        lease = float(getattr(settings, "KEELGATE_WEBHOOK_LEASE_SECONDS", 60.0))
        return timedelta(seconds=max(lease, timeout_seconds() + 1.0))

    def retry_after(self, attempts: int) -> timedelta | None:
        """The schedule's wait after attempt ``attempts``; None once it has run out."""
        schedule = retry_schedule()
        return timedelta(seconds=schedule[attempts - 1]) if attempts <= len(schedule) else None

    def counted(self, outcome: str) -> None:
        """``keelgate_webhook_attempts_total`` by result: delivered, retry or failed."""
        metrics.WEBHOOK_ATTEMPTS.labels(outcome).inc()
