"""API keys: create (the secret shown once), verify a bearer token, revoke.

A key reads ``kg_<prefix>_<secret>``: twelve hex characters that find the row, then 32
random bytes in URL-safe base64. Only the sha256 of the secret is stored (see
:attr:`tenants.models.ApiKey.hashed` for why a fast hash is enough).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import OuterRef, Q, Subquery
from django.dispatch import Signal
from django.utils import timezone

from sitekit.errors import NotAMemberError
from tenants.changes import record
from tenants.models import ApiKey, Membership, Tenant

__all__ = [
    "VerifiedKey",
    "api_key_create",
    "api_key_revoke",
    "api_key_revoked",
    "api_key_verify",
]

_TOKEN = re.compile(r"kg_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")
api_key_revoked = Signal()
"""Sent after a revocation (an UPDATE, which sends no post_save): caches forget the key."""
_TOUCH_EVERY = timedelta(minutes=1)
"""``last_used_at`` is written at most this often, not on every request."""


@dataclass(frozen=True)
class VerifiedKey:
    """A valid, unrevoked key, with its user's current role in the key's tenant."""

    key: ApiKey
    tenant_id: str
    role: str

    @property
    def user(self) -> Any:
        """The person every request made with the key is attributed to."""
        return self.key.user


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def _described(key: ApiKey) -> dict[str, Any]:
    """What the chain says of a key: which one, for whom; never its secret or hash."""
    return {"key_id": key.pk, "prefix": key.prefix, "name": key.name, "username": key.user.get_username()}


def api_key_create(*, tenant: Tenant, user: Any, by: str, name: str = "") -> tuple[ApiKey, str]:
    """Make a key for ``user`` in ``tenant``; return the row and the full key (shown once).

    ``by`` (the admin, or the command) is the actor of its ``api_key.created`` event.
    """
    if not Membership.objects.filter(tenant=tenant, user=user).exists():
        raise NotAMemberError(tenant.slug)
    secret = secrets.token_urlsafe(32)
    with transaction.atomic():
        while True:
            prefix = secrets.token_hex(6)
            if not ApiKey.objects.filter(prefix=prefix).exists():
                break
        key = ApiKey.objects.create(
            tenant=tenant, user=user, name=name, prefix=prefix, hashed=_digest(secret)
        )
        record(tenant.slug, actor=by, kind="api_key.created", body=_described(key))
    return key, f"kg_{prefix}_{secret}"


def api_key_verify(*, token: str) -> VerifiedKey | None:
    """The key ``token`` names if it is well formed, matches, is not revoked and its user
    is active and still a member of the key's tenant; None otherwise (one query)."""
    match = _TOKEN.fullmatch(token.strip())
    if match is None:
        return None
    prefix, secret = match.groups()
    role = Membership.objects.filter(user=OuterRef("user"), tenant=OuterRef("tenant")).values("role")[:1]
    key = (
        ApiKey.objects.select_related("tenant", "user")
        .annotate(role=Subquery(role))
        .filter(prefix=prefix, revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    if key is None or key.role is None or not hmac.compare_digest(key.hashed, _digest(secret)):
        return None
    now = timezone.now()
    if key.last_used_at is None or now - key.last_used_at > _TOUCH_EVERY:
        ApiKey.objects.filter(pk=key.pk).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - _TOUCH_EVERY)
        ).update(last_used_at=now)
    return VerifiedKey(key=key, tenant_id=key.tenant.slug, role=key.role)


def api_key_revoke(*, key: ApiKey, by: str) -> ApiKey:
    """Revoke ``key`` from now on (``api_key.revoked``, by ``by``); a no-op for a key already revoked.

    This process forgets the key at once; the others within a second (the cache's
    bound, :mod:`tenants.api_auth`).
    """
    with transaction.atomic():
        revoked = ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        if revoked:
            record(key.tenant.slug, actor=by, kind="api_key.revoked", body=_described(key))
    api_key_revoked.send(sender=ApiKey, key=key)
    key.refresh_from_db()
    return key
