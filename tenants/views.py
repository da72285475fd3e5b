"""Console plumbing every page shares: login and logout, who the operator is in which
tenant, and the response headers of a page that shows untrusted text.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import resolve_url
from django.utils.cache import patch_cache_control

from tenants.access import ForbiddenError, NotFoundError
from tenants.models import Membership

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
"""Everything is served by this site (no CDN), and no inline script or style runs: if
escaping ever failed, a script smuggled into tool output still could not execute."""


def _harden(response: HttpResponse) -> HttpResponse:
    response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
    # Inbox pages hold arguments and outputs of other systems: keep them out of caches.
    patch_cache_control(response, private=True, no_store=True)
    return response


def console_page(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A console view: login required, CSP and no-store headers, domain errors as 404/403.

    NotFoundError (also raised for another tenant's object) becomes 404, so a guessed URL
    learns nothing; ForbiddenError (a role too low) becomes 403. An htmx request whose
    session ended gets 401 with ``HX-Redirect`` to the login page, so a polling block
    or a decision form sends the whole page to log in instead of swapping the form in.
    """

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            if request.headers.get("HX-Request") == "true":
                response = HttpResponse("Log in again.", status=401, content_type="text/plain")
                response.headers["HX-Redirect"] = resolve_url(settings.LOGIN_URL)
                return _harden(response)
            return redirect_to_login(request.get_full_path())
        try:
            response = view(request, *args, **kwargs)
        except NotFoundError as exc:
            raise Http404("Not found.") from exc
        except ForbiddenError as exc:
            raise PermissionDenied(exc.message) from exc
        return _harden(response)

    return wrapper


def hardened(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """CSP and no-store headers for a page that does not need a login (the login page)."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return _harden(view(request, *args, **kwargs))

    return wrapper


login = hardened(
    auth_views.LoginView.as_view(template_name="registration/login.html", redirect_authenticated_user=True)
)
"""Django's login view with the console's template and headers."""

logout = hardened(auth_views.LogoutView.as_view())
"""Django's logout view (POST only, CSRF-protected)."""


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
