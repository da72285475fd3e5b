"""Reads about the operator behind a request: their memberships, tenants and roles."""

from __future__ import annotations

from django.http import HttpRequest

from tenants.models import Membership

__all__ = ["allows", "memberships", "tenant_ids"]


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
