"""A locked-out login, written into the chain of each tenant the user belongs to.

django-axes sends ``user_locked_out`` when a username and address pair passes the
failure limit; tenants are identity (below this app), so the audit app subscribes
(``AuditConfig.ready``). A username that names nobody, or nobody in a tenant, has no
chain to write to: axes' own log and table keep it.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from audit.wiring import audit_log
from tenants.models import Membership

__all__ = ["LOCKED_OUT", "audit_lockout"]

LOCKED_OUT = "auth.locked_out"
"""The event's kind; its body is the username and the client address, never a password."""


def audit_lockout(*, username: str | None, ip_address: str | None) -> list[str]:
    """Append ``auth.locked_out`` to each of the user's tenants' chains; their slugs."""
    if not username:
        return []
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        return []
    tenants = sorted(Membership.objects.filter(user=user).values_list("tenant__slug", flat=True))
    body = {"username": user.get_username(), "ip_address": ip_address or "unknown"}
    with transaction.atomic():
        for tenant_id in tenants:
            audit_log().append(tenant_id, actor="keelgate:login-throttle", kind=LOCKED_OUT, body=body)
    return tenants


def on_user_locked_out(
    sender: Any, *, request: Any = None, username: str | None = None, ip_address: str | None = None, **_: Any
) -> None:
    """Receiver of axes' ``user_locked_out``: once per lock-out, not on every refused try.

    Axes sends the signal again for each attempt made while locked out (each one counted,
    so the lock-out lasts); only the attempt that reached the limit is audited.
    """
    failures = getattr(request, "axes_failures_since_start", None)
    if failures is not None and failures > settings.AXES_FAILURE_LIMIT:
        return
    audit_lockout(username=username, ip_address=ip_address)
