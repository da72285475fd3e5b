"""Tenants, and operators' memberships in them with a role."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

SLUG = RegexValidator(r"^[a-z0-9][a-z0-9_-]{0,62}$", "Lowercase letters, digits, - and _ (max 63).")


class Tenant(models.Model):
    """One customer's isolated world: its runs, keys, approvals and audit chain.

    The engine knows a tenant by ``slug``; every other table stores that slug.
    """

    slug = models.CharField(max_length=63, unique=True, validators=[SLUG])
    name = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.slug


class Role(models.TextChoices):
    """What an operator may do in a tenant; each role includes the ones before it."""

    VIEWER = "viewer", "Viewer"
    APPROVER = "approver", "Approver"
    RECONCILER = "reconciler", "Reconciler"
    ADMIN = "admin", "Admin"


ROLE_RANK = {Role.VIEWER: 0, Role.APPROVER: 1, Role.RECONCILER: 2, Role.ADMIN: 3}


class Membership(models.Model):
    """An operator belongs to a tenant with one role."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "tenant"], name="one_membership_per_tenant")]

    def allows(self, role: str) -> bool:
        """True if this membership's role is at least ``role``."""
        return ROLE_RANK[Role(self.role)] >= ROLE_RANK[Role(role)]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} as {self.role}"
