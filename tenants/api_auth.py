"""Who is calling the REST API, and in which tenant.

Authentication is a bearer API key (``Authorization: Bearer kg_...``) or, for the
browser, Django's session with its CSRF token on unsafe methods. A key acts in its own
tenant. A session user acts in the tenant named by the ``tenant`` query parameter, or
in their only tenant when they belong to just one.

A verified key is remembered in the process for ``KEELGATE_API_KEY_CACHE_SECONDS``
(default 1; 0 turns it off), so a client's requests cost no database lookup for the
key, a large share of ``GET /api/v1/runs``'s CPU (docs/performance.md#api-key-cache). The price, and the
bound: a key revoked, a member deactivated or a user deactivated in another process keeps
authenticating here for at most that long, one second by default (the console says a
revoked key stops working at once; ``tests/deploy`` checks it in both web processes).
Changes made through the ORM (``save``, ``delete``, ``api_key_revoke``) of a key, a
membership or a user empty this process's cache at once. Every write service checks the
caller's membership in the database itself (``tenants.access.require_role``), so a removed
member's key can never write; only reads are inside the bound.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass
from typing import Annotated, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models.signals import post_delete, post_save
from django.http import HttpRequest
from ninja import Query
from ninja.security import HttpBearer
from ninja.security.apikey import APIKeyCookie
from ninja.utils import check_csrf

from sitekit.api import SLUG
from sitekit.errors import CsrfFailedError, NotFoundError, TenantRequiredError
from tenants.access import require_role, tenant_ids_for
from tenants.api_keys import VerifiedKey, api_key_revoked, api_key_verify
from tenants.models import ApiKey, Membership, Role
from tenants.ratelimit import auth_failure_check, auth_failure_hit, client_address, ratelimit_hit

__all__ = [
    "API_AUTH",
    "ApiKeyBearer",
    "Caller",
    "SessionCsrfAuth",
    "TenantQuery",
    "caller_of",
    "key_cache_clear",
    "verify_key",
]

_CACHE_MAX = 10_000
"""Entries per process at most; past it the cache starts again empty."""
_cache: dict[bytes, tuple[float, VerifiedKey]] = {}
_cache_lock = threading.Lock()
_clock = time.monotonic


def _cache_seconds() -> float:
    return float(getattr(settings, "KEELGATE_API_KEY_CACHE_SECONDS", 1))


def verify_key(token: str) -> VerifiedKey | None:
    """:func:`api_key_verify`, remembered for ``KEELGATE_API_KEY_CACHE_SECONDS`` per process.

    Keyed by the sha256 of the whole token: a hit is the very token verified before,
    and a wrong or unknown token is never remembered (each one is looked up and counted).
    """
    ttl = _cache_seconds()
    if ttl <= 0:
        return api_key_verify(token=token)
    digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
    clock = _clock()
    hit = _cache.get(digest)
    if hit is not None and hit[0] > clock:
        return hit[1]
    verified = api_key_verify(token=token)
    with _cache_lock:
        if verified is None:
            _cache.pop(digest, None)
        else:
            if len(_cache) >= _CACHE_MAX:
                _cache.clear()
            _cache[digest] = (clock + ttl, verified)
    return verified


def key_cache_clear(**_: Any) -> None:
    """Forget every remembered key in this process (a key, membership or user changed)."""
    with _cache_lock:
        _cache.clear()


api_key_revoked.connect(key_cache_clear, dispatch_uid="api_key_cache_revoked")
for _model in (ApiKey, Membership, get_user_model()):
    post_save.connect(key_cache_clear, sender=_model, dispatch_uid=f"api_key_cache_{_model.__name__}_save")
    post_delete.connect(
        key_cache_clear, sender=_model, dispatch_uid=f"api_key_cache_{_model.__name__}_delete"
    )


class ApiKeyBearer(HttpBearer):
    """``Authorization: Bearer kg_<prefix>_<secret>``; also counts the key's rate limit,
    and a wrong key against its client address (``KEELGATE_API_AUTH_FAILURE_LIMIT``).

    The header is parsed here rather than by ninja's ``HttpBearer``, which logs a header
    of another scheme whole ("Unexpected auth - 'Token kg_...'"): a secret in a log.
    """

    def __call__(self, request: HttpRequest) -> VerifiedKey | None:
        scheme, _, token = request.headers.get(self.header, "").partition(" ")
        if scheme.lower() != self.openapi_scheme or not token:
            return None
        return self.authenticate(request, token.strip())

    def authenticate(self, request: HttpRequest, token: str) -> VerifiedKey | None:
        # An address past its failures is refused before the key is looked at, so a
        # guesser cannot tell a right guess from a wrong one (429 either way).
        address = client_address(request) or "unknown"
        auth_failure_check(address=address)
        verified = verify_key(token)
        if verified is None:
            auth_failure_hit(address=address)
            return None
        ratelimit_hit(key_id=verified.key.pk)
        return verified


class SessionCsrfAuth(APIKeyCookie):
    """Django's session login, for the browser; unsafe methods must pass the CSRF check.

    Unlike ninja's own ``SessionAuth`` the CSRF check runs only for a logged-in
    session, so a request with no credentials at all is 401, not 403.
    """

    param_name = settings.SESSION_COOKIE_NAME

    def __init__(self) -> None:
        super().__init__(csrf=False)

    def authenticate(self, request: HttpRequest, key: str | None) -> Any:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return None
        if check_csrf(request) is not None:
            raise CsrfFailedError()
        return user


API_AUTH = [ApiKeyBearer(), SessionCsrfAuth()]
"""Every router's authentication: a key first, then the browser's session."""

TenantQuery = Annotated[
    str,
    Query(
        None,
        pattern=SLUG,
        description=(
            "Session auth: the tenant to act in (optional if you belong to one tenant only). "
            "API keys act in their own tenant; naming another one is 404."
        ),
    ),
]


@dataclass(frozen=True)
class Caller:
    """Who is asking (the person every decision is attributed to) and in which tenant."""

    user: Any
    tenant_id: str

    @property
    def tenant_ids(self) -> list[str]:
        """The one tenant, as the selectors take it."""
        return [self.tenant_id]


def caller_of(request: HttpRequest, tenant: str | None) -> Caller:
    """The authenticated caller and their tenant; NotFoundError for a tenant they cannot see."""
    auth = request.auth  # type: ignore[attr-defined]
    if isinstance(auth, VerifiedKey):
        if tenant is not None and tenant != auth.tenant_id:
            raise NotFoundError()
        return Caller(user=auth.user, tenant_id=auth.tenant_id)
    if tenant is not None:
        require_role(auth, tenant, Role.VIEWER)
        return Caller(user=auth, tenant_id=tenant)
    tenants = tenant_ids_for(auth)
    if len(tenants) == 1:
        return Caller(user=auth, tenant_id=tenants[0])
    if not tenants:
        raise NotFoundError()
    raise TenantRequiredError()
