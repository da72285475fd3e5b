"""Logging in and out of the console (Django's views, the console's template and headers)."""

from __future__ import annotations

from django.contrib.auth import views as auth_views

from sitekit.pages import hardened

login = hardened(
    auth_views.LoginView.as_view(template_name="registration/login.html", redirect_authenticated_user=True)
)
"""Django's login view with the console's template and headers."""

logout = hardened(auth_views.LogoutView.as_view())
"""Django's logout view (POST only, CSRF-protected)."""
