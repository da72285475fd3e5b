"""Login throttling and lock-out: django-axes, with the console's page and one client address.

django-axes counts failed logins per username *and* client address (so a stranger
cannot lock an operator out from elsewhere) in the database, which every web process
shares; past ``KEELGATE_LOGIN_FAILURE_LIMIT`` that pair is refused for
``KEELGATE_LOGIN_COOLOFF_MINUTES``, even with the right password. The audit app writes
the lock-out into the chain of each tenant the user belongs to (``audit.lockouts``).
"""

from __future__ import annotations

from typing import Any

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from sitekit.pages import hardened

__all__ = ["LoginThrottleBackend", "locked_out"]


class LoginThrottleBackend(AxesStandaloneBackend):  # type: ignore[misc]  # axes ships no types
    """Axes' check before the password one; a call without a request is not a web login.

    ``authenticate()`` without a request (a shell, a test client's ``login()``) has no
    address to throttle: it is passed to the next backend instead of refused.
    """

    def authenticate(self, request: HttpRequest | None, *args: Any, **kwargs: Any) -> Any:
        if request is None:
            return None
        return super().authenticate(request, *args, **kwargs)


@hardened
def _locked_out_page(request: HttpRequest) -> HttpResponse:
    minutes = int(getattr(settings, "KEELGATE_LOGIN_COOLOFF_MINUTES", 15))
    return render(request, "registration/locked_out.html", {"minutes": minutes}, status=429)


def locked_out(request: HttpRequest, response: Any = None, credentials: Any = None) -> HttpResponse:
    """Axes' lock-out answer (``AXES_LOCKOUT_CALLABLE``): the console's page, 429, with its CSP."""
    page = _locked_out_page(request)
    assert isinstance(page, HttpResponse)
    return page
