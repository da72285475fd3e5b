"""Logging in and out of the console (Django's views, the console's template and headers)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import views as auth_views
from django.http import HttpResponse

from sitekit.pages import hardened
from tenants.ratelimit import client_address
from tenants.services import member_signed_in


class ConsoleLoginView(auth_views.LoginView):
    """Django's login; a sign-in is an ``auth.signed_in`` event in each of the person's tenants."""

    template_name = "registration/login.html"
    redirect_authenticated_user = True

    def form_valid(self, form: Any) -> HttpResponse:
        response = super().form_valid(form)
        member_signed_in(user=form.get_user(), address=client_address(self.request))
        return response


login = hardened(ConsoleLoginView.as_view())
"""The console's login page, with its headers."""

logout = hardened(auth_views.LogoutView.as_view())
"""Django's logout view (POST only, CSRF-protected)."""
