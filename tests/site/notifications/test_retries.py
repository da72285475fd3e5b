"""Retries: a receiver that fails half the calls still gets every event, duplicates only by the same id."""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import timedelta

from django.utils import timezone

from notifications.models import DeliveryStatus, WebhookAttempt, WebhookDelivery
from notifications.webhooks import deliver_due
from notifications.webhooks.services import webhook_endpoint_register
from tenants.models import Tenant
from tests.site.notifications._receiver import Received, Receiver, always, fail_every_other
from tests.site.notifications._scenario import deliver_until_settled, every_event


def register(receiver, **kwargs):
    endpoint, secret = webhook_endpoint_register(
        tenant=Tenant.objects.get(slug="t1"), url=receiver.url, actor="test", **kwargs
    )
    receiver.secret = secret
    return endpoint


def expected_ids() -> set[str]:
    return set(WebhookDelivery.objects.values_list("webhook_id", flat=True))


def test_a_receiver_failing_half_the_calls_gets_every_event_none_lost(operator, brokerage_path, receivers):
    """Every other request is a 500: every event is delivered, each retry carries the same id and body."""
    receiver = receivers(policy=fail_every_other)
    register(receiver)
    every_event(operator)
    deliver_until_settled()

    ids = expected_ids()
    figures = receiver.figures(ids)
    print(f"\nwebhook figures, receiver failing every other call: {figures}")
    assert figures["events"] == 13  # 4 requested, 3 decided, 1 unknown, 1 settled, 3 finished, 1 expiring
    assert figures["lost"] == 0 and figures["bad_signatures"] == 0 and figures["unexpected_ids"] == 0
    assert figures["attempts"] >= 2 * figures["events"] - 1  # half the calls failed and were retried
    bodies: dict[str, set[str]] = defaultdict(set)
    for request in receiver.requests:
        bodies[request.webhook_id].add(repr(request.payload))
    assert all(len(b) == 1 for b in bodies.values()), "a retry changed the body of a message"
    assert set(WebhookDelivery.objects.values_list("status", flat=True)) == {DeliveryStatus.DELIVERED}
    attempts = WebhookAttempt.objects.count()
    assert attempts == figures["attempts"]
    assert WebhookAttempt.objects.filter(status_code=500).count() == sum(
        1 for r in receiver.requests if r.answered == 500
    )


def test_a_failure_waits_its_turn_in_the_retry_schedule(operator, settings, receivers):
    """After attempt n fails, the next waits schedule[n-1]; nothing is sent before then."""
    settings.KEELGATE_WEBHOOK_RETRY_SCHEDULE = [0.3, 30.0]
    receiver = receivers(policy=always(503))
    register(receiver)
    every_event_lite()

    deliver_due()
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("pending", 1, 503)
    wait = (delivery.next_attempt_at - timezone.now()).total_seconds()
    assert 0 < wait <= 0.3
    deliver_due()
    assert len(receiver.requests) == 1  # not yet due
    time.sleep(0.35)
    deliver_due()
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("pending", 2)
    assert timedelta(seconds=25) < delivery.next_attempt_at - timezone.now() <= timedelta(seconds=30)
    assert len(receiver.requests) == 2


def test_a_delivery_that_never_succeeds_is_marked_failed_after_the_schedule(operator, settings, receivers):
    """With a schedule of three retries, the fourth failure marks it failed: visible, and not retried."""
    settings.KEELGATE_WEBHOOK_RETRY_SCHEDULE = [0.01, 0.01, 0.01]
    receiver = receivers(policy=always(500))
    register(receiver)
    every_event_lite()
    for _ in range(12):
        deliver_due()
        time.sleep(0.02)
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("failed", 4, 500)
    assert len(receiver.requests) == 4
    assert list(delivery.attempt_log.values_list("number", "status_code")) == [(n, 500) for n in (1, 2, 3, 4)]


def test_a_redirect_is_a_failure_and_is_not_followed(operator, receivers):
    """A 302 to another receiver counts as a failed attempt; the other receiver is never called."""
    elsewhere = receivers()

    def redirect(receiver: Receiver, n: int, request: Received) -> int:
        return 302

    receiver = receivers(policy=redirect)
    register(receiver)
    every_event_lite()
    deliver_due()
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.last_status_code) == ("pending", 302)
    assert not elsewhere.requests


def test_a_receiver_that_is_down_fails_once_per_pass_not_for_every_message(operator, receivers):
    """Connection refused: one attempt this pass, the endpoint's other messages wait (not hammered)."""
    receiver = receivers()
    endpoint = register(receiver)
    receiver.close()
    every_event_lite(count=3)
    deliver_due()
    attempts = WebhookAttempt.objects.filter(delivery__endpoint=endpoint)
    assert attempts.count() == 1
    (attempt,) = attempts
    assert attempt.status_code is None and "refused" in attempt.error
    assert WebhookDelivery.objects.filter(attempts=0).count() == 2


def every_event_lite(count: int = 1) -> None:
    """``count`` approval.expiring events appended straight to t1's chain (no runs needed)."""
    from audit.wiring import audit_log

    for n in range(count):
        audit_log().append(
            "t1",
            actor="keelgate:reminders",
            kind="approval.expiring",
            body={"run_id": f"r{n}", "action_id": "1-2", "tool": "place_order", "expires_at": "2030-01-01"},
        )
