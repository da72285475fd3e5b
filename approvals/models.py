"""The inbox: one row per action that waits for a person.

Rows are projected from checkpoints in the same transaction that saves them, and a
decision is a conditional update on the row (``WHERE status = 'pending'``), so of two
people deciding at once exactly one takes effect.
"""

from __future__ import annotations

from typing import Any

from django.db import models

from keelgate.errors import AlreadyDecidedError, ApprovalExpiredError, KeelgateError
from sitekit.errors import ApprovalWithdrawnError
from tenants.models import ROLE_RANK, Role


class ApprovalStatus(models.TextChoices):
    """Where an approval stands."""

    PENDING = "pending", "Pending"
    APPROVED = "approved", "Approved"
    DENIED = "denied", "Denied"
    EXPIRED = "expired", "Expired"
    WITHDRAWN = "withdrawn", "Withdrawn"
    """The run was cancelled while it waited: nobody needs to decide it."""


class Approval(models.Model):
    """A proposed call that waits for one or more approvers."""

    tenant_id = models.CharField(max_length=63)
    run_id = models.CharField(max_length=128)
    action_id = models.CharField(max_length=64)
    agent = models.CharField(max_length=64)
    tool = models.CharField(max_length=128)
    arguments = models.TextField()
    """The proposed arguments as JSON text. Untrusted: always rendered escaped."""
    reason = models.TextField(blank=True)
    required = models.IntegerField(default=1)
    votes = models.JSONField(default=list)
    """Approvals so far: ``[{"by": ..., "at": ..., "note": ...}]``."""
    approver_roles = models.JSONField(default=list, blank=True)
    """The policy's ``approver_roles``: when not empty, only a member holding one of them
    (a role includes the ones below it) may approve or deny."""
    status = models.CharField(max_length=16, choices=ApprovalStatus.choices, default=ApprovalStatus.PENDING)
    requested_at = models.DateTimeField()
    expires_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.CharField(max_length=150, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    note = models.TextField(blank=True)
    arguments_hash = models.CharField(max_length=64, blank=True)
    """``canonical_sha256`` of the arguments: an approval names the hash it was given for."""
    edit_of = models.CharField(max_length=64, blank=True)
    """The action this one replaces (a person edited its arguments), or empty."""
    replaced_by = models.CharField(max_length=64, blank=True)
    """The edited action that replaced this one, or empty."""
    goal = models.TextField(blank=True)
    """The run's goal. Untrusted: always rendered escaped."""
    observations = models.JSONField(default=list)
    """What the agent had read this step when it proposed: ``[{"tool", "output"}]``. Untrusted."""
    impact = models.TextField(blank=True)
    """The tool's plain-words line of what the call will do. Untrusted."""
    high_impact = models.BooleanField(default=False)
    """The policy marked it high impact: approving takes a typed confirmation."""
    escalates_to = models.CharField(max_length=32, blank=True)
    """The role the current deadline hands it to; empty when the deadline denies it."""
    escalated_to = models.CharField(max_length=32, blank=True)
    """The role its deadline escalated it to: only that role (or above) may decide it now."""
    warn_at = models.DateTimeField(null=True, blank=True)
    """When the warning of the current deadline is due (none without ``warn_before``)."""
    warned_at = models.DateTimeField(null=True, blank=True)
    """When the current deadline's ``approval.expiring`` warning was given, or None."""

    @property
    def required_role(self) -> str:
        """The least role that may decide it: the escalation role once escalated, else approver."""
        return self.escalated_to or Role.APPROVER

    def decidable_by(self, role: str | None) -> bool:
        """True if a member with ``role`` may decide it; a role the site does not know, nobody."""
        needed = self.required_role
        if role not in Role.values or needed not in Role.values:
            return False
        rank = ROLE_RANK[Role(role)]
        if rank < ROLE_RANK[Role(needed)]:
            return False
        named = [r for r in self.approver_roles or [] if r in Role.values]
        return not self.approver_roles or any(rank >= ROLE_RANK[Role(r)] for r in named)

    @property
    def approved_by(self) -> list[str]:
        """Who approved so far, once each, in the order they did."""
        names: list[str] = []
        for vote in self.votes or []:
            by = vote.get("by") if isinstance(vote, dict) else None
            if isinstance(by, str) and by not in names:
                names.append(by)
        return names

    @property
    def remaining(self) -> int:
        """How many more distinct people must approve (0 once enough have)."""
        return max(self.required - len(self.approved_by), 0)

    def settled_error(self) -> KeelgateError:
        """Why this settled approval cannot be decided, in words true of how it was settled.

        Expired: ApprovalExpiredError (its deadline denied it, as when a decision finds the
        deadline passed). Withdrawn: ApprovalWithdrawnError naming who cancelled the run.
        Approved or denied: AlreadyDecidedError naming who decided it.
        """
        if self.status == ApprovalStatus.EXPIRED:
            return ApprovalExpiredError(str(self.pk))
        if self.status == ApprovalStatus.WITHDRAWN:
            return ApprovalWithdrawnError(self.decided_by)
        return AlreadyDecidedError(self.decided_by)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant_id", "run_id", "action_id"], name="approval_per_action")
        ]
        indexes = [
            models.Index(fields=["tenant_id", "status", "-requested_at"], name="approval_inbox"),
            models.Index(fields=["status", "expires_at"], name="approval_expiry"),
            models.Index(fields=["status", "warn_at"], name="approval_warning"),
        ]


class StandingApproval(models.Model):
    """A standing rule: calls of one agent's tool in one tenant, within its constraints,
    approved by the people who made it, until it expires or is revoked
    (:mod:`approvals.standing` matches, applies and changes it)."""

    tenant_id = models.CharField(max_length=63)
    agent = models.CharField(max_length=64)
    tool = models.CharField(max_length=128)
    exact_arguments = models.JSONField(null=True, blank=True)
    """When set, only a call with exactly these arguments matches (canonical JSON)."""
    bounds = models.JSONField(default=dict, blank=True)
    """Per named field: ``{"quantity": {"max": 10}, "symbol": {"equals": "ACME"}}``."""
    required = models.IntegerField(default=1)
    """How many distinct makers it needs before it is live (the M of the calls it may approve)."""
    makers = models.JSONField(default=list)
    """Who made it, in order, once each: ``[{"by": ..., "at": ...}]``."""
    note = models.TextField(blank=True)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.CharField(max_length=150, blank=True)
    uses = models.IntegerField(default=0)
    last_used_at = models.DateTimeField(null=True, blank=True)
    source_approval = models.IntegerField(null=True, blank=True)
    """The inbox approval it was made from ("approve, and the same from now on"), if any."""

    @property
    def maker_names(self) -> list[str]:
        """Who made it, once each, in order."""
        return [str(m.get("by")) for m in self.makers or [] if isinstance(m, dict)]

    def live_at(self, now: Any) -> bool:
        """Made by enough people, not revoked, not expired."""
        return self.revoked_at is None and now < self.expires_at and len(self.maker_names) >= self.required

    class Meta:
        indexes = [models.Index(fields=["tenant_id", "agent", "tool", "expires_at"], name="standing_match")]


class UnknownOutcome(models.Model):
    """A side-effecting call whose outcome nobody knows: a person must reconcile it."""

    tenant_id = models.CharField(max_length=63)
    run_id = models.CharField(max_length=128)
    action_id = models.CharField(max_length=64)
    agent = models.CharField(max_length=64)
    tool = models.CharField(max_length=128)
    arguments = models.TextField()
    idempotency_key = models.CharField(max_length=128)
    code = models.CharField(max_length=64, blank=True)
    detected_at = models.DateTimeField()
    settled = models.BooleanField(default=False)
    settled_by = models.CharField(max_length=150, blank=True)
    settled_at = models.DateTimeField(null=True, blank=True)
    executed = models.BooleanField(null=True)
    note = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant_id", "run_id", "action_id"], name="unknown_per_action")
        ]
        indexes = [models.Index(fields=["tenant_id", "settled", "-detected_at"], name="unknown_inbox")]
