"""What notifications remember: how far each channel has read the chain, what it owes whom.

Two kinds of rows belong to the shared engine, whatever the channel:

- :class:`ChainCursor`: how far one subscriber of one channel has read its tenant's
  audit chain (the outbox). It moves only in the transaction that records the
  deliveries for what it passed.
- :class:`Delivery` (abstract): one message owed to one recipient, claimed under a
  lease, retried with backoff, finished as delivered, skipped or failed. Each channel
  has one concrete table of it, with the columns only it needs; :class:`Attempt`
  (abstract) is the optional log of every try.

Then each channel's own rows: webhooks (receivers, deliveries, attempts) and email
(batches of items per person, and the links to decide in a message).
"""

from __future__ import annotations

from typing import ClassVar

from django.conf import settings
from django.db import models

from tenants.models import Tenant

# -- the engine's rows -------------------------------------------------------------------


class ChainCursor(models.Model):
    """How far one subscriber of one channel has read its tenant's audit chain.

    ``subscriber`` is the channel's name for who reads: a webhook endpoint's id, or the
    tenant itself for email. Kept apart from whatever it belongs to, so that saving that
    (an endpoint in the admin) never moves it.
    """

    channel = models.CharField(max_length=32)
    subscriber = models.CharField(max_length=100)
    tenant_id = models.CharField(max_length=63)
    seq = models.BigIntegerField(default=0)
    held = models.JSONField(default=list, blank=True)
    """What the channel read but could not route yet (email: an item announced before its
    inbox row committed); handed back to it on the next pass."""
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["channel", "subscriber"], name="chain_cursor_per_subscriber")
        ]

    def __str__(self) -> str:
        return f"{self.channel}:{self.subscriber} at {self.tenant_id}#{self.seq}"


class DeliveryStatus(models.TextChoices):
    """Where one delivery stands."""

    PENDING = "pending", "Pending"
    DELIVERING = "delivering", "Delivering"
    DELIVERED = "delivered", "Delivered"
    SKIPPED = "skipped", "Skipped"
    """Nothing was left to say when its turn came (every item decided meanwhile)."""
    FAILED = "failed", "Failed"


class Delivery(models.Model):
    """One message owed to one recipient, until it is delivered, skipped or given up.

    The engine (:mod:`notifications.claims`) alone writes these columns: a claim is one
    conditional UPDATE of this row's own columns (due and pending, or delivering under a
    lease that ran out), so of several processes exactly one sends it.
    """

    RECIPIENT: ClassVar[str]
    """The column naming who receives it: a channel's due deliveries are batched by it."""

    item = models.CharField(max_length=200, blank=True)
    """What the delivery is about (``approval:<run>:<action>``), for a channel that later
    updates what it sent about the same item; empty when it never will."""
    receipt = models.CharField(max_length=200, blank=True)
    """What the far side returned to refer to the message later (a chat message's id)."""
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    """Not sent before this (a retry waits here)."""
    lease_until = models.DateTimeField(null=True, blank=True)
    """While ``delivering``: after this, the claim is presumed dead and may be taken again."""
    lease_token = models.CharField(max_length=32, blank=True)
    last_status_code = models.IntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    """A status line or an exception's class: never an address or a secret."""
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True


class Attempt(models.Model):
    """One try at sending a delivery; ``finished_at`` stays empty if the sender died.

    A channel that keeps this log gives its concrete attempt a ``delivery`` foreign key
    with ``related_name="attempt_log"``; the engine writes a row when it claims and
    finishes it when the try ends.
    """

    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    status_code = models.IntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    duration_ms = models.IntegerField(null=True, blank=True)
    response = models.TextField(blank=True)
    """The start of what the far side answered (bounded by the channel), for a person to read."""

    class Meta:
        abstract = True


# -- webhooks ---------------------------------------------------------------------------


class WebhookEndpoint(models.Model):
    """One tenant's receiver of Standard Webhooks, signed with its ``whsec_`` secret."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="webhook_endpoints")
    url = models.URLField(max_length=2000)
    secret = models.CharField(max_length=100)
    """``whsec_<base64>``: shown once, when registered or rotated; the admin never lists it."""
    previous_secret = models.CharField(max_length=100, blank=True)
    """The secret before the last rotation: messages carry its signature too until
    ``previous_secret_until``, so receivers can switch without losing one."""
    previous_secret_until = models.DateTimeField(null=True, blank=True)
    events = models.JSONField(default=list, blank=True)
    """Event types this receiver wants; empty means all of them."""
    include_arguments = models.BooleanField(default=False)
    """The tenant opted in to send a call's arguments (they may be sensitive)."""
    enabled = models.BooleanField(default=True)
    description = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant_id", "id"]

    def __str__(self) -> str:
        # Never the query: a receiver's token may be in it, and admin pages print this.
        return f"{self.tenant_id}: {self.url.partition('?')[0].partition('#')[0]}"


class WebhookDelivery(Delivery):
    """One message (an audit event) owed to one endpoint.

    ``webhook_id`` and ``payload`` are fixed when the record is made, so every retry,
    including one after the deliverer died mid-request, sends the same id and body.
    """

    RECIPIENT = "endpoint_id"

    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    tenant_id = models.CharField(max_length=63)
    seq = models.BigIntegerField()
    """The audit event's number in the tenant's chain."""
    event_type = models.CharField(max_length=64)
    webhook_id = models.CharField(max_length=100)
    payload = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["endpoint", "seq"], name="webhook_delivery_per_event")]
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="webhook_delivery_due"),
            models.Index(fields=["tenant_id", "-created_at"], name="webhook_delivery_recent"),
        ]
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.webhook_id} {self.event_type} ({self.status})"


class WebhookAttempt(Attempt):
    """One POST of a webhook delivery."""

    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_log")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["delivery", "number"], name="webhook_attempt_number_unique")
        ]
        ordering = ["delivery_id", "number"]

    def __str__(self) -> str:
        return f"{self.delivery_id}#{self.number} {self.status_code or self.error or 'unfinished'}"


# -- email ------------------------------------------------------------------------------


class EmailBatch(Delivery):
    """Items one pass found for one person; sent with the person's other due batches as one email.

    ``items`` are inbox rows, ``[{"kind": "approval" | "unknown", "id": pk}]``: what the
    message says is read when it is sent, so an item decided meanwhile is left out (and a
    batch with nothing left is skipped).
    """

    RECIPIENT = "user_id"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    items = models.JSONField()
    created_at = models.DateTimeField()

    class Meta:
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="email_batch_due"),
            models.Index(fields=["user", "finished_at"], name="email_batch_user"),
        ]

    def __str__(self) -> str:
        return f"email batch {self.pk} to user {self.user_id} ({self.status})"


class DecisionLink(models.Model):
    """A link in one person's email that opens the confirmation page of one approval, once.

    Only the sha256 of the link's token is stored, as for an invitation: the token is 32
    random bytes, in the message and nowhere else. The row binds the link to its
    recipient (``user``), the approval and the ``arguments_hash`` the approval had when
    the message was made; it works until it is used, the approval is decided (anywhere)
    or passes its deadline, or ``expires_at``, whichever comes first
    (:mod:`notifications.emails.links`).
    """

    token_hash = models.CharField(max_length=64, unique=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    approval = models.ForeignKey("approvals.Approval", on_delete=models.CASCADE, related_name="+")
    arguments_hash = models.CharField(max_length=64)
    """The call the link was made for: other arguments (an edit) and it decides nothing."""
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    """``KEELGATE_EMAIL_LINK_HOURS`` after it was made, or sooner with the approval."""
    used_at = models.DateTimeField(null=True, blank=True)
    """When a decision was taken through it (claimed just before the decision, released if
    the decision was refused)."""
    decision = models.CharField(max_length=16, blank=True)
    """``approve`` or ``deny``, once used."""

    class Meta:
        indexes = [models.Index(fields=["expires_at"], name="decision_link_expiry")]

    def __str__(self) -> str:
        return f"decision link {self.pk} of approval {self.approval_id} for user {self.user_id}"
