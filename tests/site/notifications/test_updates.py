"""A channel can post about an item and later update that post: the seam a chat channel needs.

``PostThenEdit`` is the shape of such a channel (post each requested approval once, edit
the post when it is decided), written over the webhook table so that no test-only model
is needed: its route names each delivery's item, its send returns the far side's message
id as the receipt, and the update reads it back with ``receipt_for``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.utils import timezone

from audit.wiring import audit_log
from notifications.channel import Delivered, Failed, Feed, Result, Routed
from notifications.claims import receipt_for
from notifications.cursors import tail
from notifications.models import WebhookDelivery
from notifications.passes import run_pass
from notifications.webhooks import WebhookChannel
from notifications.webhooks.services import webhook_endpoint_register
from tenants.models import Tenant


class PostThenEdit(WebhookChannel):
    """Posts each requested approval once; edits that post when the approval is decided."""

    name = "post-then-edit"
    kinds = frozenset({"approval.requested", "approval.decided"})

    def __init__(self) -> None:
        self.posts: dict[str, str] = {}
        """The far side: message id -> what the message says now."""
        self.down = False

    def route(self, feeds: list[Feed], now: datetime) -> Routed[WebhookDelivery]:
        routed = super().route(feeds, now)
        for delivery in routed.deliveries:
            data = json.loads(delivery.payload)["data"]
            delivery.item = f"approval:{data['run_id']}:{data['action_id']}"
        return routed

    def send(self, deliveries: Sequence[WebhookDelivery]) -> Result:
        (delivery,) = deliveries
        if self.down:
            return Failed("connection refused")
        if delivery.event_type == "approval.requested":
            ts = f"ts-{len(self.posts) + 1}"
            self.posts[ts] = "waiting"
            return Delivered(receipt=ts)
        ts = receipt_for(delivery)
        if ts not in self.posts:
            return Failed("the post to edit was not found", stop="message")
        self.posts[ts] = json.loads(delivery.payload)["data"]["verdict"]
        return Delivered(receipt=ts)


def setup(run_id: str = "r1") -> PostThenEdit:
    channel = PostThenEdit()
    webhook_endpoint_register(tenant=Tenant.objects.get(slug="t1"), url="http://127.0.0.1:9/", actor="test")
    tail(channel)  # its cursor starts at the head
    log = audit_log()
    body = {"run_id": run_id, "action_id": "1-2", "tool": "place_order"}
    log.append("t1", actor="agent:x", kind="approval.requested", body=body)
    log.append("t1", actor="op", kind="approval.decided", body={**body, "decision": "approve"})
    return channel


def test_a_post_is_edited_in_place_when_its_item_is_decided(operator):
    """The decision edits the message the request posted (its receipt), and posts nothing new."""
    channel = setup()
    assert run_pass(channel) == 2
    assert channel.posts == {"ts-1": "approved"}
    receipts = list(WebhookDelivery.objects.order_by("seq").values_list("event_type", "item", "receipt"))
    assert receipts == [
        ("approval.requested", "approval:r1:1-2", "ts-1"),
        ("approval.decided", "approval:r1:1-2", "ts-1"),
    ]


def test_an_edit_never_overtakes_its_post(operator, settings):
    """The post fails: the edit waits, that pass and until the post's retry is due; then both go, in order."""
    settings.KEELGATE_WEBHOOK_RETRY_SCHEDULE = [30.0]
    channel = setup()
    channel.down = True
    assert run_pass(channel) == 0
    channel.down = False
    assert run_pass(channel) == 0  # the edit is due, its post is not: the edit waits
    attempts = list(WebhookDelivery.objects.order_by("seq").values_list("event_type", "attempts"))
    assert attempts == [("approval.requested", 1), ("approval.decided", 0)]
    WebhookDelivery.objects.update(next_attempt_at=timezone.now())  # the post's retry is due
    assert run_pass(channel) == 2
    assert channel.posts == {"ts-1": "approved"}


def test_a_failed_post_holds_back_its_own_edit_only(operator):
    """Another item's post goes on while the first item's post fails and its edit waits."""
    channel = setup("r1")
    log = audit_log()
    log.append("t1", actor="agent:x", kind="approval.requested", body={"run_id": "r2", "action_id": "1-2"})
    refused = {"approval:r1:1-2"}
    send = channel.send

    def picky(deliveries):
        if deliveries[0].item in refused:
            return Failed("refused", stop="message")
        return send(deliveries)

    channel.send = picky  # type: ignore[method-assign]
    assert run_pass(channel) == 1
    sent = list(WebhookDelivery.objects.order_by("seq").values_list("item", "status", "attempts"))
    assert sent == [
        ("approval:r1:1-2", "pending", 1),
        ("approval:r1:1-2", "pending", 0),
        ("approval:r2:1-2", "delivered", 1),
    ]


def test_a_backlogged_recipient_sends_a_post_before_its_edit(operator, settings):
    """With room for one message per recipient a pass, the post waiting out its retry goes
    before the edit made during that wait, though the edit was due first."""
    settings.KEELGATE_WEBHOOK_RETRY_SCHEDULE = [30.0, 30.0]
    channel = setup()
    channel.per_recipient = 1
    channel.down = True
    assert run_pass(channel) == 0  # the post fails; the edit, made since, is due before it
    channel.down = False
    now = timezone.now()
    WebhookDelivery.objects.filter(event_type="approval.requested").update(next_attempt_at=now)
    WebhookDelivery.objects.filter(event_type="approval.decided").update(
        next_attempt_at=now - timedelta(seconds=20)  # made during the post's backoff
    )
    assert run_pass(channel) == 1
    sent = list(WebhookDelivery.objects.order_by("seq").values_list("event_type", "status"))
    assert sent == [("approval.requested", "delivered"), ("approval.decided", "pending")]
    assert run_pass(channel) == 1
    assert channel.posts == {"ts-1": "approved"}
