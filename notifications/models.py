"""What notifications remember: how far each channel has read the chain, what it owes whom.

Two kinds of rows belong to the shared engine, whatever the channel:

- :class:`ChainCursor`: how far one subscriber of one channel has read its tenant's
  audit chain (the outbox). It moves only in the transaction that records the
  deliveries for what it passed.
- :class:`Delivery` (abstract): one message owed to one recipient, claimed under a
  lease, retried with backoff, finished as delivered, skipped or failed. Each channel
  has one concrete table of it, with the columns only it needs; :class:`Attempt`
  (abstract) is the optional log of every try.

Then each channel's own rows: webhooks (receivers, deliveries, attempts), email
(batches of items per person, and the links to decide in a message) and Slack (workspaces,
links to people, posts and updates, the clicks waiting to be decided).
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


# -- Slack ------------------------------------------------------------------------------


class SlackWorkspace(models.Model):
    """A tenant's Slack workspace: where its approvals are posted and who may click there.

    The bot token and the signing secret are never stored: ``token_env`` and
    ``secret_env`` name the environment variables that hold them, read when used, so a
    database dump, the admin and the logs never see them.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="slack_workspaces")
    team_id = models.CharField(max_length=32, unique=True)
    """Slack's id of the workspace (``T0123``): every request from Slack names it."""
    token_env = models.CharField(max_length=100)
    """The environment variable holding the bot token (``xoxb-…``)."""
    secret_env = models.CharField(max_length=100)
    """The environment variable holding the app's signing secret."""
    channel = models.CharField(max_length=32)
    """The default target channel's id (``C0123``)."""
    agent_channels = models.JSONField(default=dict, blank=True)
    """An agent's own channel, ``{agent: channel id}``; the rest go to ``channel``."""
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant_id", "team_id"]

    def __str__(self) -> str:
        return f"{self.tenant_id}: Slack {self.team_id}"

    def channel_for(self, agent: str) -> str:
        """Where an item of ``agent`` is posted."""
        chosen = (self.agent_channels or {}).get(agent)
        return chosen if isinstance(chosen, str) and chosen else self.channel


class SlackLink(models.Model):
    """A Slack user of a workspace acts as this Keelgate user, and only as this user."""

    workspace = models.ForeignKey(SlackWorkspace, on_delete=models.CASCADE, related_name="links")
    slack_user = models.CharField(max_length=32)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    linked_by = models.CharField(max_length=150)
    """Who made the link: the user themself (a one-time code) or an admin."""
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "slack_user"], name="slack_link_per_slack_user"),
            models.UniqueConstraint(fields=["workspace", "user"], name="slack_link_per_user"),
        ]

    def __str__(self) -> str:
        return f"{self.workspace.team_id}/{self.slack_user} -> user {self.user_id}"


class SlackLinkCode(models.Model):
    """A one-time code a person made in the console to link their Slack user (stored hashed)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    code_hash = models.CharField(max_length=64, unique=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"link code of user {self.user_id} in {self.tenant_id}"


class SlackDelivery(Delivery):
    """One post or update of one item's message in one workspace.

    ``item`` is ``approval:<run>:<action>`` or ``unknown:<run>:<action>``; the post's
    receipt is ``<channel>:<ts>``, which the item's updates read back. What the message
    says is read from the inbox when it is sent, so a message sent late still says
    how the item stands now; ``actor`` and ``via`` are who settled it and how, from
    the event that made the delivery.
    """

    RECIPIENT = "workspace_id"

    workspace = models.ForeignKey(SlackWorkspace, on_delete=models.CASCADE, related_name="deliveries")
    tenant_id = models.CharField(max_length=63)
    seq = models.BigIntegerField()
    event_kind = models.CharField(max_length=64)
    update = models.BooleanField(default=False)
    """False: post the item's message; True: update the message its post made."""
    actor = models.CharField(max_length=150, blank=True)
    via = models.CharField(max_length=32, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "seq", "item"], name="slack_delivery_per_event_item")
        ]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="slack_delivery_due")]

    def __str__(self) -> str:
        return f"slack {'update' if self.update else 'post'} {self.item} ({self.status})"


class SlackInteractionStatus(models.TextChoices):
    """Where a click stands."""

    PENDING = "pending", "Pending"
    DECIDED = "decided", "Decided"
    REFUSED = "refused", "Refused"


class SlackInteraction(models.Model):
    """One verified button click (or form), recorded before Slack is answered; decided afterwards.

    Unique per (workspace, user, ``action_ts``): Slack's retry of the same request is
    the same click, recorded once.
    """

    workspace = models.ForeignKey(SlackWorkspace, on_delete=models.CASCADE, related_name="interactions")
    slack_user = models.CharField(max_length=32)
    action = models.CharField(max_length=32)
    """``approve`` (the Approve button, or a high-impact call's form) or ``deny`` (the Deny form)."""
    note = models.TextField(blank=True)
    """A denial's reason, as typed in the form."""
    confirmed = models.BooleanField(default=False)
    """"approve" was typed in a high-impact call's form (the console's typed confirmation)."""
    approval_id = models.BigIntegerField()
    arguments_hash = models.CharField(max_length=64)
    """The hash of the arguments the message showed: another call is refused as stale."""
    action_ts = models.CharField(max_length=32)
    response_url = models.URLField(max_length=500, blank=True)
    status = models.CharField(
        max_length=16, choices=SlackInteractionStatus.choices, default=SlackInteractionStatus.PENDING
    )
    reason = models.CharField(max_length=64, blank=True)
    """Why it was refused: an error code (``approval_stale``, ``forbidden``) or ``unlinked``."""
    detail = models.CharField(max_length=200, blank=True)
    """The refusal's detail (who settled it first), for the message the clicker gets."""
    decided_as = models.CharField(max_length=150, blank=True)
    """The Keelgate user it acted as."""
    received_at = models.DateTimeField(auto_now_add=True)
    processed_at = models.DateTimeField(null=True, blank=True)
    replied = models.BooleanField(default=False)
    """The clicker was told what happened (a message only they see)."""

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "slack_user", "action_ts"], name="slack_interaction_once"
            )
        ]
        indexes = [models.Index(fields=["status", "id"], name="slack_interaction_todo")]

    def __str__(self) -> str:
        return f"{self.slack_user} {self.action} approval {self.approval_id} ({self.status})"
