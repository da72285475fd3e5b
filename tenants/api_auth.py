"""Who is calling the REST API, and in which tenant.

Authentication is a bearer API key (``Authorization: Bearer kg_...``) or, for the
browser, Django's session with its CSRF token on unsafe methods. A key acts in its own
tenant. A session user acts in the tenant named by the ``tenant`` query parameter, or
in their only tenant when they belong to just one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from django.conf import settings
from django.http import HttpRequest
from ninja import Query
from ninja.security import HttpBearer
from ninja.security.apikey import APIKeyCookie
from ninja.utils import check_csrf

from sitekit.api import SLUG
from sitekit.errors import CsrfFailedError, NotFoundError, TenantRequiredError
from tenants.access import require_role, tenant_ids_for
from tenants.api_keys import VerifiedKey, api_key_verify
from tenants.models import Role
from tenants.ratelimit import auth_failure_check, auth_failure_hit, client_address, ratelimit_hit

__all__ = ["API_AUTH", "ApiKeyBearer", "Caller", "SessionCsrfAuth", "TenantQuery", "caller_of"]


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
        verified = api_key_verify(token=token)
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
