"""What notifications remember: receivers, how far each has read the chain, and deliveries."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from tenants.models import Tenant

# -- webhooks ---------------------------------------------------------------------------


class WebhookEndpoint(models.Model):
    """One tenant's receiver of Standard Webhooks, signed with its ``whsec_`` secret."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="webhook_endpoints")
    url = models.URLField(max_length=2000)
    secret = models.CharField(max_length=100)
    """``whsec_<base64>``: shown once, when registered; the admin never lists it."""
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


class WebhookCursor(models.Model):
    """How far one endpoint has read its tenant's audit chain (the outbox).

    Kept apart from the endpoint so that saving the endpoint (the admin) never moves it.
    It moves only in the transaction that records the deliveries for what it passed.
    """

    endpoint = models.OneToOneField(
        WebhookEndpoint, on_delete=models.CASCADE, primary_key=True, related_name="cursor"
    )
    seq = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)


class DeliveryStatus(models.TextChoices):
    """Where one message to one endpoint stands."""

    PENDING = "pending", "Pending"
    DELIVERING = "delivering", "Delivering"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"


class WebhookDelivery(models.Model):
    """One message (an audit event) owed to one endpoint, until it is delivered or given up.

    ``webhook_id`` and ``payload`` are fixed when the record is made, so every retry,
    including one after the deliverer died mid-request, sends the same id and body.
    """

    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    tenant_id = models.CharField(max_length=63)
    seq = models.BigIntegerField()
    """The audit event's number in the tenant's chain."""
    event_type = models.CharField(max_length=64)
    webhook_id = models.CharField(max_length=100)
    payload = models.TextField()
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    lease_until = models.DateTimeField(null=True, blank=True)
    """While ``delivering``: after this, the claim is presumed dead and may be taken again."""
    lease_token = models.CharField(max_length=32, blank=True)
    last_status_code = models.IntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["endpoint", "seq"], name="webhook_delivery_per_event")]
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="webhook_delivery_due"),
            models.Index(fields=["tenant_id", "-created_at"], name="webhook_delivery_recent"),
        ]
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.webhook_id} {self.event_type} ({self.status})"


class WebhookAttempt(models.Model):
    """One try at sending a delivery; ``finished_at`` stays empty if the deliverer died."""

    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    status_code = models.IntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    duration_ms = models.IntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["delivery", "number"], name="webhook_attempt_number_unique")
        ]
        ordering = ["delivery_id", "number"]

    def __str__(self) -> str:
        return f"{self.delivery_id}#{self.number} {self.status_code or self.error or 'unfinished'}"


# -- email ------------------------------------------------------------------------------


class EmailCursor(models.Model):
    """How far the email pass has read one tenant's audit chain (the outbox).

    It moves only in the transaction that queues the :class:`EmailBatch` rows for what it
    passed, so a pass that dies leaves it where it was and nothing is lost.
    """

    tenant_id = models.CharField(max_length=63, primary_key=True)
    seq = models.BigIntegerField(default=0)
    unresolved = models.JSONField(default=list)
    """Items the chain announced before their inbox row was committed (the projection
    writes it with the next checkpoint): ``[{"kind", "run_id", "action_id", "since"}]``,
    looked up again each pass until found or ``KEELGATE_EMAIL_UNRESOLVED_SECONDS`` old."""
    updated_at = models.DateTimeField(auto_now=True)


class EmailBatchOutcome(models.TextChoices):
    """How a batch ended."""

    SENT = "sent", "Sent"
    NOTHING_LEFT = "nothing_left", "Nothing left"
    """Every item was decided (or the person lost the role) before it was sent."""
    GAVE_UP = "gave_up", "Gave up"


class EmailBatch(models.Model):
    """Items one pass found for one person; sent with the person's other due batches as one email.

    ``items`` are inbox rows, ``[{"kind": "approval" | "unknown", "id": pk}]``: what the
    message says is read when it is sent, so an item decided meanwhile is left out.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    items = models.JSONField()
    created_at = models.DateTimeField()
    due_at = models.DateTimeField()
    """Not sent before this (a retry waits here)."""
    attempts = models.PositiveIntegerField(default=0)
    claim_token = models.CharField(max_length=32, blank=True)
    claimed_until = models.DateTimeField(null=True, blank=True)
    """While a sender holds it; after this, the sender is presumed dead and it is sent again."""
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=EmailBatchOutcome.choices, blank=True)
    last_error = models.CharField(max_length=200, blank=True)
    """The SMTP reply code or exception class of the last failure: never an address or secret."""

    class Meta:
        indexes = [
            models.Index(fields=["finished_at", "due_at"], name="email_batch_due"),
            models.Index(fields=["user", "finished_at"], name="email_batch_user"),
        ]

    def __str__(self) -> str:
        return f"email batch {self.pk} to user {self.user_id} ({self.outcome or 'queued'})"
