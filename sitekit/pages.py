"""What every console page does: login required, CSP and no-store headers, errors as 404 / 403.

Who the operator is in which tenant is identity, in :mod:`tenants.selectors`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import render, resolve_url
from django.utils.cache import patch_cache_control

from keelgate.errors import KeelgateError
from sitekit.console_errors import refusal_or_raise
from sitekit.errors import ForbiddenError, NotFoundError

__all__ = ["CONTENT_SECURITY_POLICY", "console_page", "flash_refusal", "hardened"]

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


def _harden(response: HttpResponseBase) -> HttpResponseBase:
    response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
    # Inbox pages hold arguments and outputs of other systems: keep them out of caches.
    patch_cache_control(response, private=True, no_store=True)
    return response


def console_page(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """A console view: login required, CSP and no-store headers, domain errors as 404/403.

    NotFoundError (also raised for another tenant's object) becomes 404, so a guessed URL
    learns nothing; ForbiddenError (a role too low) becomes 403; any other site or
    engine error of a 4xx kind the view let through is a 400 page with its wording. An htmx request whose
    session ended gets 401 with ``HX-Redirect`` to the login page, so a polling block
    or a decision form sends the whole page to log in instead of swapping the form in.
    """

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not request.user.is_authenticated:
            if request.headers.get("HX-Request") == "true":
                relogin = HttpResponse("Log in again.", status=401, content_type="text/plain")
                relogin.headers["HX-Redirect"] = resolve_url(settings.LOGIN_URL)
                return _harden(relogin)
            return redirect_to_login(request.get_full_path())
        try:
            response = view(request, *args, **kwargs)
        except NotFoundError as exc:
            raise Http404("Not found.") from exc
        except ForbiddenError as exc:
            raise PermissionDenied(exc.message) from exc
        except KeelgateError as exc:
            if exc.http_status is None or not 400 <= exc.http_status < 500:
                raise
            # A hand-edited link (a damaged page cursor...): say what is wrong, never a 500.
            page = render(request, "400.html", {"message": exc.message}, status=400)
            return _harden(page)
        return _harden(response)

    return wrapper


def hardened(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """CSP and no-store headers for a page that does not need a login (the login page)."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        return _harden(view(request, *args, **kwargs))

    return wrapper


def flash_refusal(request: HttpRequest, exc: KeelgateError) -> None:
    """Flash ``exc`` in the console's words (:mod:`sitekit.console_errors`) for the next page.

    For a view that answers with a redirect back to the page it was posted from (a run's
    cancel and resume); not found and forbidden are re-raised for ``console_page``.
    """
    told = refusal_or_raise(exc)
    getattr(messages, told.level)(request, told.text)
