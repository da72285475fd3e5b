"""What every API router shares: authentication, the caller's tenant, errors, cursors.

Kept apart from :mod:`keelgate_site.api` because that module imports the routers, and
the routers need these.

Authentication is a bearer API key (``Authorization: Bearer kg_...``) or, for the
browser, Django's session with its CSRF token on unsafe methods. A key acts in its own
tenant. A session user acts in the tenant named by the ``tenant`` query parameter, or
in their only tenant when they belong to just one.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from django.conf import settings
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from ninja import Query
from ninja.security import HttpBearer
from ninja.security.apikey import APIKeyCookie
from ninja.utils import check_csrf
from pydantic import BaseModel

from keelgate.errors import KeelgateError
from tenants.access import NotFoundError, require_role, tenant_ids_for
from tenants.api_keys import VerifiedKey, api_key_verify
from tenants.models import Role
from tenants.ratelimit import ratelimit_hit

__all__ = [
    "API_AUTH",
    "CURSOR",
    "MAX_ID",
    "NO_NUL",
    "READ_ERRORS",
    "WRITE_ERRORS",
    "ApiKeyBearer",
    "Caller",
    "CsrfFailedError",
    "ErrorOut",
    "InvalidCursorError",
    "SessionCsrfAuth",
    "TenantQuery",
    "TenantRequiredError",
    "caller_of",
    "keyset_page",
    "responses",
]

NO_NUL = r"^[^\x00]*$"
"""Free text may hold anything but NUL, which PostgreSQL cannot store in a text column."""
SLUG = r"^[a-z0-9][a-z0-9_-]{0,62}$"
MAX_ID = 2**63 - 1
"""The largest database id: a bigger number is a validation error, not a database one."""


class ErrorOut(BaseModel):
    """Every error: a stable ``code`` programs compare, and fixed wording people read."""

    code: str
    detail: str


READ_ERRORS = (401, 404, 422, 429)
WRITE_ERRORS = (400, 401, 403, 404, 409, 413, 422, 429)


def responses(ok: dict[int, Any], errors: tuple[int, ...]) -> dict[int, Any]:
    """An operation's response schemas: its success bodies and ErrorOut for each error status."""
    return {**ok, **dict.fromkeys(errors, ErrorOut)}


class InvalidCursorError(KeelgateError):
    """A ``cursor`` that this API did not hand out (or was cut or edited)."""

    code = "invalid_cursor"
    message = "The cursor is not valid; start again without one."


class TenantRequiredError(KeelgateError):
    """A session user of several tenants must say which one with ``?tenant=``."""

    code = "tenant_required"
    message = "You belong to several tenants: name one with the tenant query parameter."


class CsrfFailedError(KeelgateError):
    """A session-authenticated unsafe request without a valid CSRF token."""

    code = "csrf_failed"
    message = "The CSRF check failed: send the csrftoken cookie's value in X-CSRFToken."


# -- authentication ----------------------------------------------------------------------


class ApiKeyBearer(HttpBearer):
    """``Authorization: Bearer kg_<prefix>_<secret>``; also counts the key's rate limit."""

    def authenticate(self, request: HttpRequest, token: str) -> VerifiedKey | None:
        verified = api_key_verify(token=token)
        if verified is not None:
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


# -- the caller's tenant -----------------------------------------------------------------

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


# -- cursor pagination -------------------------------------------------------------------


def _cursor_encode(at: datetime, pk: int) -> str:
    raw = json.dumps([at.isoformat(), pk], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _cursor_decode(cursor: str) -> tuple[datetime, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at_text, pk = json.loads(raw)
        at = datetime.fromisoformat(at_text)
    except (binascii.Error, ValueError, TypeError) as exc:  # JSONDecodeError is a ValueError
        raise InvalidCursorError() from exc
    if at.tzinfo is None or not isinstance(pk, int) or isinstance(pk, bool) or not 0 < pk <= MAX_ID:
        raise InvalidCursorError()
    return at, pk


CURSOR = r"^[A-Za-z0-9_-]{1,200}$"


def keyset_page(
    rows: QuerySet[Any], *, field: str, cursor: str | None, limit: int
) -> tuple[list[Any], str | None]:
    """One page of ``rows`` (ordered by ``-field, -id``) after ``cursor``, and the next cursor.

    Keyset, not offset, pagination: a page is stable while new rows arrive at the top,
    and reading page 1000 costs what reading page 1 does.
    """
    if cursor:
        at, pk = _cursor_decode(cursor)
        rows = rows.filter(Q(**{f"{field}__lt": at}) | Q(**{field: at, "id__lt": pk}))
    page = list(rows[: limit + 1])
    if len(page) <= limit:
        return page, None
    last = page[limit - 1]
    return page[:limit], _cursor_encode(getattr(last, field), last.pk)
