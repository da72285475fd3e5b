"""Reads about the operator behind a request: their memberships, tenants and roles."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import F
from django.http import HttpRequest
from django.utils import timezone

from sitekit.errors import ForbiddenError
from tenants.models import ApiKey, Invitation, Membership, Role

__all__ = [
    "TenantPeople",
    "admin_tenant_ids",
    "allows",
    "memberships",
    "people_of",
    "require_admin_tenants",
    "tenant_ids",
]


def memberships(request: HttpRequest) -> dict[str, Membership]:
    """The user's memberships by tenant slug, read once per request."""
    cached: dict[str, Membership] | None = getattr(request, "_keelgate_memberships", None)
    if cached is None:
        user = request.user
        if user.is_authenticated:
            rows = Membership.objects.filter(user=user).select_related("tenant").order_by("tenant__slug")
            cached = {m.tenant.slug: m for m in rows}
        else:
            cached = {}
        request._keelgate_memberships = cached  # type: ignore[attr-defined]
    return cached


def tenant_ids(request: HttpRequest) -> list[str]:
    """The slugs of the tenants the user belongs to, sorted."""
    return list(memberships(request))


def allows(request: HttpRequest, tenant_id: str, role: str) -> bool:
    """True if the user's role in the tenant is at least ``role`` (for showing controls)."""
    membership = memberships(request).get(tenant_id)
    return membership is not None and membership.allows(role)


def admin_tenant_ids(request: HttpRequest) -> list[str]:
    """The slugs of the tenants the user is an admin of, sorted (the admin's pages)."""
    return [slug for slug, m in memberships(request).items() if m.allows(Role.ADMIN)]


def require_admin_tenants(request: HttpRequest) -> list[str]:
    """:func:`admin_tenant_ids`, or ForbiddenError (403) if none: the admin's pages
    (People, API keys, Webhooks) are for admins only."""
    ids = admin_tenant_ids(request)
    if not ids:
        raise ForbiddenError(Role.ADMIN)
    return ids


@dataclass(frozen=True)
class TenantPeople:
    """One tenant as its admin manages it: members (deactivated ones last), open invitations, keys."""

    tenant_id: str
    members: list[Membership]
    invitations: list[Invitation]
    keys: list[ApiKey]

    @property
    def active_members(self) -> list[Membership]:
        """The members a key may act as."""
        return [m for m in self.members if m.deactivated_at is None]


def people_of(tenant_ids: list[str]) -> list[TenantPeople]:
    """Members (with their last sign-in), open invitations and API keys of each tenant, in three queries."""
    members = (
        Membership.all_objects.filter(tenant__slug__in=tenant_ids)
        .select_related("user", "tenant")
        .order_by(F("deactivated_at").asc(nulls_first=True), "user__username")
    )
    invitations = Invitation.objects.filter(
        tenant__slug__in=tenant_ids, accepted_at__isnull=True, expires_at__gt=timezone.now()
    ).select_related("tenant")
    keys = (
        ApiKey.objects.filter(tenant__slug__in=tenant_ids)
        .select_related("user", "tenant")
        .order_by(F("revoked_at").asc(nulls_first=True), "-created_at")
    )
    return [
        TenantPeople(
            tenant_id=slug,
            members=[m for m in members if m.tenant.slug == slug],
            invitations=[i for i in invitations if i.tenant.slug == slug],
            keys=[k for k in keys if k.tenant.slug == slug],
        )
        for slug in tenant_ids
    ]
