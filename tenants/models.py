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


class ActiveMemberships(models.Manager["Membership"]):
    """Memberships in force: a deactivated one is no membership to any check, page or key."""

    def get_queryset(self) -> models.QuerySet[Membership]:
        return super().get_queryset().filter(deactivated_at__isnull=True)


class Membership(models.Model):
    """An operator belongs to a tenant with one role.

    Deactivating a membership keeps its row (who was a member, with which role, is still
    shown on the People page) but takes it out of ``objects``, the default manager every
    access check, page and key lookup reads; ``all_objects`` sees both.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    deactivated_at = models.DateTimeField(null=True, blank=True)

    objects = ActiveMemberships()
    all_objects = models.Manager()

    class Meta:
        base_manager_name = "all_objects"
        constraints = [models.UniqueConstraint(fields=["user", "tenant"], name="one_membership_per_tenant")]

    def allows(self, role: str) -> bool:
        """True if this membership's role is at least ``role``."""
        return ROLE_RANK[Role(self.role)] >= ROLE_RANK[Role(role)]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} as {self.role}"


class ApiKey(models.Model):
    """A bearer key for the REST API, of one tenant and one user, stored hashed.

    The key is ``kg_<prefix>_<secret>``: ``prefix`` finds the row, the secret is checked
    against ``hashed``. It is shown once, when created, and cannot be recovered. Every
    decision made with it is attributed to ``user``, whose role in ``tenant`` is what
    the key may do.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, unique=True)
    hashed = models.CharField(max_length=64)
    """sha256 hex of the secret. A fast hash is right here, unlike for passwords: the
    secret is 32 random bytes, so a leaked hash cannot be brute-forced at any speed,
    and a slow KDF would only add its cost to every API request."""
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"kg_{self.prefix}_… ({self.name or self.user})"


class Invitation(models.Model):
    """An email invitation to join a tenant with a role: a link that works once, until it expires.

    Only the sha256 of the link's token is stored, as for an API key: the token is 32
    random bytes, sent in the email and nowhere else.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField()
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    token_hash = models.CharField(max_length=64, unique=True)
    invited_by = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    def __str__(self) -> str:
        return f"invitation of {self.email} to {self.tenant} as {self.role}"
