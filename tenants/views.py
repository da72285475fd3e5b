"""The console's identity pages: log in and out, People and API keys (admins only), an invitation.

Each page parses its form and calls one service of :mod:`tenants.services` or
:mod:`tenants.api_keys`, which writes the audit event; a refusal is flashed back on the
page in the console's words (:func:`sitekit.pages.flash_refusal`).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from keelgate.errors import KeelgateError
from sitekit.errors import AlreadyAMemberError, InvitationInvalidError, NotFoundError
from sitekit.pages import console_page, flash_refusal, hardened
from tenants.access import require_role
from tenants.api_keys import api_key_create, api_key_revoke
from tenants.forms import ROLE_CHOICES, AcceptInvitationForm, AddPersonForm, InviteForm, KeyForm, RoleForm
from tenants.models import ApiKey, Membership, Role, Tenant
from tenants.ratelimit import client_address
from tenants.selectors import people_of, require_admin_tenants
from tenants.services import (
    invitation_accept,
    invitation_create,
    invitation_find,
    member_add,
    member_deactivate,
    member_set_role,
    member_signed_in,
)


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


# -- the admin's pages: People and API keys -------------------------------------------------


def _admin_of(request: HttpRequest, tenant_id: str) -> Tenant:
    """The tenant if the user is its admin: 404 for a tenant they are not in, 403 for a lower role."""
    return require_role(request.user, tenant_id, Role.ADMIN).tenant


def _member(tenant: Tenant, user_id: int) -> Any:
    """A user who is (or was) a member of ``tenant``; 404 for anyone else."""
    membership = Membership.all_objects.select_related("user").filter(tenant=tenant, user_id=user_id).first()
    if membership is None:
        raise NotFoundError()
    return membership.user


def _form_refused(request: HttpRequest, form: forms.Form) -> None:
    for field, errors in form.errors.items():
        label = "" if field == "__all__" else f"{field.replace('_', ' ').capitalize()}: "
        messages.error(request, label + " ".join(str(e) for e in errors))


def _refused(request: HttpRequest, exc: Exception) -> None:
    if isinstance(exc, ValidationError):
        messages.error(request, " ".join(exc.messages))
    else:
        assert isinstance(exc, KeelgateError)
        flash_refusal(request, exc)


@require_GET
@console_page
def people(request: HttpRequest) -> HttpResponse:
    """Each tenant the user administers: its members with role and last sign-in, open invitations."""
    return render(
        request,
        "tenants/people.html",
        {"tenants": people_of(require_admin_tenants(request)), "roles": ROLE_CHOICES},
    )


@require_POST
@console_page
def person_add(request: HttpRequest, tenant_id: str) -> HttpResponse:
    """Add an existing person, or create one, with a role."""
    tenant = _admin_of(request, tenant_id)
    form = AddPersonForm(request.POST)
    if not form.is_valid():
        _form_refused(request, form)
        return redirect("people")
    data = form.cleaned_data
    try:
        _, created = member_add(
            tenant=tenant,
            username=data["username"],
            role=data["role"],
            email=data["email"],
            password=data["password"] or None,
            by=request.user.get_username(),
        )
    except (KeelgateError, ValidationError) as exc:
        _refused(request, exc)
        return redirect("people")
    made = " (new account)" if created else ""
    messages.success(request, f"{data['username']} is now {data['role']} in {tenant.slug}{made}.")
    return redirect("people")


@require_POST
@console_page
def person_invite(request: HttpRequest, tenant_id: str) -> HttpResponse:
    """Email a single-use link that creates the account and joins the tenant."""
    tenant = _admin_of(request, tenant_id)
    form = InviteForm(request.POST)
    if not form.is_valid():
        _form_refused(request, form)
        return redirect("people")
    try:
        invitation, _ = invitation_create(
            tenant=tenant,
            email=form.cleaned_data["email"],
            role=form.cleaned_data["role"],
            by=request.user.get_username(),
        )
    except KeelgateError as exc:
        _refused(request, exc)
        return redirect("people")
    except OSError:  # smtplib's errors included: the mail server is down or refused it
        messages.error(
            request, "The invitation email could not be sent, so nothing was recorded: try again later."
        )
        return redirect("people")
    messages.success(request, f"Invitation sent to {invitation.email}; the link works once.")
    return redirect("people")


@require_POST
@console_page
def person_role(request: HttpRequest, tenant_id: str, user_id: int) -> HttpResponse:
    """Change a member's role (never the tenant's last admin's away)."""
    tenant = _admin_of(request, tenant_id)
    user = _member(tenant, user_id)
    form = RoleForm(request.POST)
    if not form.is_valid():
        _form_refused(request, form)
        return redirect("people")
    try:
        member_set_role(
            tenant=tenant, user=user, role=form.cleaned_data["role"], by=request.user.get_username()
        )
    except KeelgateError as exc:
        _refused(request, exc)
        return redirect("people")
    messages.success(request, f"{user.get_username()} is now {form.cleaned_data['role']} in {tenant.slug}.")
    return redirect("people")


@require_POST
@console_page
def person_deactivate(request: HttpRequest, tenant_id: str, user_id: int) -> HttpResponse:
    """End a membership (never the last admin's)."""
    tenant = _admin_of(request, tenant_id)
    user = _member(tenant, user_id)
    try:
        member_deactivate(tenant=tenant, user=user, by=request.user.get_username())
    except KeelgateError as exc:
        _refused(request, exc)
        return redirect("people")
    messages.success(request, f"{user.get_username()} no longer belongs to {tenant.slug}.")
    return redirect("people")


@require_GET
@console_page
def api_keys(request: HttpRequest) -> HttpResponse:
    """Each tenant the user administers: its keys, with the user each acts as and its last use."""
    return render(request, "tenants/api_keys.html", {"tenants": people_of(require_admin_tenants(request))})


@require_POST
@console_page
def api_key_create_view(request: HttpRequest, tenant_id: str) -> HttpResponse:
    """Create a key acting as a member; the page that answers shows its secret, this once."""
    tenant = _admin_of(request, tenant_id)
    form = KeyForm(request.POST)
    if not form.is_valid():
        _form_refused(request, form)
        return redirect("api-keys")
    user = _member(tenant, form.cleaned_data["user"])
    try:
        key, secret = api_key_create(
            tenant=tenant, user=user, name=form.cleaned_data["name"], by=request.user.get_username()
        )
    except KeelgateError as exc:
        _refused(request, exc)
        return redirect("api-keys")
    context = {"tenants": people_of(require_admin_tenants(request)), "new_key": key, "secret": secret}
    return render(request, "tenants/api_keys.html", context)


@require_POST
@console_page
def api_key_revoke_view(request: HttpRequest, tenant_id: str, key_id: int) -> HttpResponse:
    """Revoke a key of the tenant: 401 from now on (in every web process within a second)."""
    tenant = _admin_of(request, tenant_id)
    key = ApiKey.objects.select_related("tenant", "user").filter(tenant=tenant, pk=key_id).first()
    if key is None:
        raise NotFoundError()
    api_key_revoke(key=key, by=request.user.get_username())
    messages.success(request, f"Key kg_{key.prefix}_… revoked.")
    return redirect("api-keys")


# -- an invitation's link (no login) ---------------------------------------------------------


@require_http_methods(["GET", "POST"])
@hardened
def invitation(request: HttpRequest, token: str) -> HttpResponse:
    """The invitation's page: choose a username and password, then log in. Works once."""
    try:
        found = invitation_find(token=token)
    except InvitationInvalidError as exc:
        return render(request, "tenants/invitation.html", {"gone": exc.message}, status=410)
    form = AcceptInvitationForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        try:
            invitation_accept(
                token=token, username=form.cleaned_data["username"], password=form.cleaned_data["password1"]
            )
        except InvitationInvalidError as exc:
            return render(request, "tenants/invitation.html", {"gone": exc.message}, status=410)
        except AlreadyAMemberError:
            form.add_error("username", "That username is taken: choose another.")
        except ValidationError as exc:
            form.add_error(None, exc)  # the password's validators, or the username's
        else:
            messages.success(request, f"Welcome to {found.tenant.slug}: log in with your new password.")
            return redirect("login")
    status = 400 if request.method == "POST" else 200
    return render(request, "tenants/invitation.html", {"invitation": found, "form": form}, status=status)
