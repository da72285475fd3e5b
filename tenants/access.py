"""Who may see and do what: every page, endpoint and service asks here.

A tenant the user does not belong to is *absent*: the error is the same not-found a
missing object gets, so nothing about another tenant leaks, not even its existence.
"""

from __future__ import annotations

from typing import Any

from sitekit.errors import ForbiddenError, NotFoundError
from tenants.models import ROLE_RANK, Membership, Role


def tenant_ids_for(user: Any) -> list[str]:
    """The slugs of the tenants ``user`` belongs to."""
    if user is None or not user.is_authenticated:
        return []
    return list(Membership.objects.filter(user=user).values_list("tenant__slug", flat=True))


def require_role(user: Any, tenant_id: str, role: str = Role.VIEWER) -> Membership:
    """The user's membership in the tenant if it allows ``role``; NotFound / Forbidden otherwise."""
    if user is None or not user.is_authenticated:
        raise NotFoundError()
    membership = Membership.objects.select_related("tenant").filter(user=user, tenant__slug=tenant_id).first()
    if membership is None:
        raise NotFoundError()
    if not membership.allows(role):
        raise ForbiddenError(role)
    return membership


def role_in(user: Any, tenant_id: str) -> str | None:
    """The user's role in the tenant, or None for no membership. See :func:`require_held_role`."""
    if user is None or not user.is_authenticated:
        return None
    return Membership.objects.filter(user=user, tenant__slug=tenant_id).values_list("role", flat=True).first()


def require_held_role(held: str | None, role: str) -> list[str]:
    """The roles ``held`` (from :func:`role_in`, or a decision's lock) includes, if it allows ``role``.

    No membership is NotFoundError, as in :func:`require_role`; a lower role is ForbiddenError.
    """
    if not held:
        raise NotFoundError()
    rank = ROLE_RANK[Role(held)]
    if rank < ROLE_RANK[Role(role)]:
        raise ForbiddenError(role)
    return [r.value for r in Role if ROLE_RANK[r] <= rank]
