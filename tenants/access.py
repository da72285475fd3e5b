"""Who may see and do what: every page, endpoint and service asks here.

A tenant the user does not belong to is *absent*: the error is the same not-found a
missing object gets, so nothing about another tenant leaks, not even its existence.
"""

from __future__ import annotations

from typing import Any

from django.db import connection

from sitekit.errors import ForbiddenError, NotFoundError
from tenants.models import ROLE_RANK, Membership, Role, Tenant


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


def role_in_sql(user: Any, tenant_id: str) -> tuple[str, list[Any]]:
    """The user's role in the tenant as a scalar subquery (SQL text and parameters), for a
    write that checks it in the statement that locks its row (one round trip, not two);
    NULL for no membership. See :func:`require_held_role`."""
    qn = connection.ops.quote_name
    membership, tenant = Membership._meta.db_table, Tenant._meta.db_table
    sql = (
        f"(SELECT m.{qn('role')} FROM {qn(membership)} m"
        f" JOIN {qn(tenant)} t ON t.{qn('id')} = m.{qn('tenant_id')}"
        f" WHERE m.{qn('user_id')} = %s AND t.{qn('slug')} = %s LIMIT 1)"
    )
    authenticated = user is not None and user.is_authenticated
    return sql, [user.pk if authenticated else None, tenant_id]


def require_held_role(held: str | None, role: str) -> list[str]:
    """The roles ``held`` (from :func:`role_in_sql`) includes, if it allows ``role``.

    No membership is NotFoundError, as in :func:`require_role`; a lower role is ForbiddenError.
    """
    if not held:
        raise NotFoundError()
    rank = ROLE_RANK[Role(held)]
    if rank < ROLE_RANK[Role(role)]:
        raise ForbiddenError(role)
    return [r.value for r in Role if ROLE_RANK[r] <= rank]
