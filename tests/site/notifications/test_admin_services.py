"""What an admin does to a webhook endpoint, through the services the console, CLI and admin share.

A rotated secret is checked with the ``standardwebhooks`` package, not our signing code:
during the grace a receiver holding only the old secret, and one holding only the new,
both verify every message; after it, only the new one does.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from audit.models import AuditEvent
from notifications.models import ChainCursor, DeliveryStatus, WebhookAttempt, WebhookDelivery, WebhookEndpoint
from notifications.webhooks import deliver_due
from notifications.webhooks.services import (
    webhook_delivery_redeliver,
    webhook_endpoint_delete,
    webhook_endpoint_enable,
    webhook_endpoint_register,
    webhook_endpoint_update,
    webhook_secret_rotate,
    webhook_test_send,
)
from sitekit.errors import WebhookDeliveryUnfinishedError, WebhookUrlRefusedError
from tenants.models import Tenant
from tests.site.notifications._receiver import always


def register(receiver, **kwargs):
    endpoint, secret = webhook_endpoint_register(
        tenant=Tenant.objects.get(slug="t1"), url=receiver.url, actor="op", **kwargs
    )
    receiver.secret = secret
    return endpoint, secret


def events(kind: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(tenant_id="t1", kind=kind).order_by("seq"))


def verifies(secret: str, request) -> bool:
    """Does a receiver holding only ``secret`` accept this request (the reference library)?"""
    try:
        Webhook(secret).verify(request.body, request.headers)
    except WebhookVerificationError:
        return False
    return True


def send_test(endpoint, receiver):
    before = len(receiver.requests)
    webhook_test_send(endpoint=endpoint, actor="op")
    deliver_due()
    assert receiver.wait_for(lambda: len(receiver.acknowledged()) > before)
    return receiver.requests[-1]


def test_during_the_grace_old_and_new_secret_both_verify_and_after_it_only_the_new(
    operator, receivers, settings
):
    """Two signatures while the grace runs, each verifying alone; then the old one fails."""
    settings.KEELGATE_WEBHOOK_SECRET_GRACE_SECONDS = 3600
    receiver = receivers()
    endpoint, old = register(receiver)
    before = send_test(endpoint, receiver)
    assert verifies(old, before) and len(before.headers["webhook-signature"].split(" ")) == 1

    endpoint, new = webhook_secret_rotate(endpoint=endpoint, actor="op")
    assert new != old and new.startswith("whsec_")
    assert endpoint.previous_secret_until - timezone.now() > timedelta(minutes=59)
    during = send_test(endpoint, receiver)
    assert len(during.headers["webhook-signature"].split(" ")) == 2
    assert verifies(old, during) and verifies(new, during)

    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(
        previous_secret_until=timezone.now() - timedelta(seconds=1)
    )  # the grace is over
    after = send_test(endpoint, receiver)
    assert len(after.headers["webhook-signature"].split(" ")) == 1
    assert verifies(new, after) and not verifies(old, after)

    (rotated,) = events("webhook.secret_rotated")
    body = json.loads(rotated.body)
    assert rotated.actor == "op" and body["grace_seconds"] == 3600 and body["endpoint_id"] == endpoint.pk
    assert old not in rotated.body and new not in rotated.body


def test_no_grace_means_the_old_secret_stops_at_once(operator, receivers):
    """A zero grace: the next message carries the new signature only."""
    receiver = receivers()
    endpoint, old = register(receiver)
    endpoint, new = webhook_secret_rotate(endpoint=endpoint, actor="op", grace=timedelta(0))
    assert endpoint.previous_secret == "" and endpoint.previous_secret_until is None
    request = send_test(endpoint, receiver)
    assert verifies(new, request) and not verifies(old, request)
    assert json.loads(events("webhook.secret_rotated")[0].body)["previous_valid_until"] is None


def test_a_second_rotation_in_the_grace_keeps_only_the_last_two_secrets(operator, receivers):
    """Secrets 1, 2, 3: after the second rotation messages verify with 2 and 3, not with 1."""
    receiver = receivers()
    endpoint, first = register(receiver)
    endpoint, second = webhook_secret_rotate(endpoint=endpoint, actor="op")
    endpoint, third = webhook_secret_rotate(endpoint=endpoint, actor="op")
    request = send_test(endpoint, receiver)
    assert verifies(second, request) and verifies(third, request) and not verifies(first, request)


def test_a_test_message_goes_whatever_the_filter_and_is_audited(operator, receivers):
    """``webhook.test`` to an endpoint that wants run.finished only; its id is its audit event's."""
    receiver = receivers()
    endpoint, _ = register(receiver, events=["run.finished"])
    request = send_test(endpoint, receiver)
    assert request.verified and request.payload["type"] == "webhook.test"
    assert request.payload["data"]["endpoint_id"] == endpoint.pk and request.payload["data"]["by"] == "op"
    (sent,) = events("webhook.test_sent")
    assert request.webhook_id == f"msg_t1_{sent.seq}" and sent.actor == "op"
    assert request.payload["timestamp"] == sent.at  # the event's time, as the chain's own messages


def test_redelivery_sends_the_same_id_and_body_and_refuses_an_unfinished_message(operator, receivers):
    """A delivered message goes again, byte for byte; a pending one is refused with 409."""
    receiver = receivers()
    endpoint, _ = register(receiver)
    first = send_test(endpoint, receiver)
    delivery = WebhookDelivery.objects.get(endpoint=endpoint)
    assert delivery.status == DeliveryStatus.DELIVERED

    webhook_delivery_redeliver(delivery=delivery, actor="op")
    deliver_due()
    assert receiver.wait_for(lambda: len(receiver.acknowledged()) == 2)
    again = receiver.requests[-1]
    assert (again.webhook_id, again.body) == (first.webhook_id, first.body) and again.verified
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("delivered", 2)
    assert list(delivery.attempt_log.values_list("number", flat=True)) == [1, 2]
    (redelivered,) = events("webhook.redelivered")
    assert json.loads(redelivered.body)["message_id"] == first.webhook_id and redelivered.actor == "op"

    pending = webhook_test_send(endpoint=endpoint, actor="op")
    with pytest.raises(WebhookDeliveryUnfinishedError) as refused:
        webhook_delivery_redeliver(delivery=pending, actor="op")
    assert refused.value.http_status == 409 and refused.value.code == "webhook_delivery_unfinished"
    assert len(events("webhook.redelivered")) == 1


def test_a_disabled_endpoint_gets_nothing_until_enabled_and_nothing_is_lost(operator, receivers):
    """Disabled: its test message waits; enabled again: it goes out. Each change once in the chain."""
    receiver = receivers()
    endpoint, _ = register(receiver)
    webhook_endpoint_enable(endpoint=endpoint, actor="op", enabled=False)
    webhook_endpoint_enable(endpoint=endpoint, actor="op", enabled=False)  # no change, no event
    webhook_test_send(endpoint=endpoint, actor="op")
    deliver_due()
    assert receiver.requests == []
    webhook_endpoint_enable(endpoint=endpoint, actor="op", enabled=True)
    deliver_due()
    assert receiver.wait_for(lambda: len(receiver.acknowledged()) == 1)
    assert [len(events("webhook.disabled")), len(events("webhook.enabled"))] == [1, 1]


def test_delete_takes_the_deliveries_and_cursor_and_leaves_the_event(operator, receivers):
    """Deleted: no endpoint, deliveries or cursor; the chain says who deleted it and how many went."""
    receiver = receivers()
    endpoint, _ = register(receiver)
    send_test(endpoint, receiver)
    pk = endpoint.pk
    webhook_endpoint_delete(endpoint=endpoint, actor="op")
    assert not WebhookEndpoint.objects.filter(pk=pk).exists()
    assert not WebhookDelivery.objects.filter(endpoint_id=pk).exists()
    assert not ChainCursor.objects.filter(channel="webhooks", subscriber=str(pk)).exists()
    (deleted,) = events("webhook.deleted")
    assert json.loads(deleted.body) == {"endpoint_id": pk, "host": "127.0.0.1", "deliveries": 1}


def test_an_update_checks_a_new_url_and_records_what_changed(operator, receivers):
    """A private URL is refused (nothing changes); events and label change with one event naming them."""
    receiver = receivers()
    endpoint, _ = register(receiver)
    with pytest.raises(WebhookUrlRefusedError):
        webhook_endpoint_update(endpoint=endpoint, actor="op", url="http://10.1.2.3/x")
    endpoint.refresh_from_db()
    assert endpoint.url == receiver.url and events("webhook.updated") == []
    webhook_endpoint_update(endpoint=endpoint, actor="op", events=["run.finished"], description="pager")
    (updated,) = events("webhook.updated")
    body = json.loads(updated.body)
    assert body["changed"] == ["description", "events"] and body["events"] == ["run.finished"]
    assert "token" not in updated.body  # the URL's query never reaches the chain


def test_the_receivers_answer_is_kept_bounded_with_the_attempt(operator, receivers):
    """The start of a long answer body (1000 characters) is kept with the attempt, as the receiver sent it."""
    receiver = receivers(policy=always(500))
    receiver.answer = b"<b>oops</b>" + b"x" * 5000
    endpoint, _ = register(receiver)
    webhook_test_send(endpoint=endpoint, actor="op")
    deliver_due()
    attempt = WebhookAttempt.objects.get(delivery__endpoint=endpoint)
    assert attempt.status_code == 500 and attempt.response.startswith("<b>oops</b>xx")
    assert len(attempt.response) == 1000
