"""Console pages of notifications: a tenant's admin manages its webhooks and reads how delivery goes.

Admins only: a viewer, approver or reconciler gets 403 (and no link in the nav); another
tenant's endpoint or delivery is 404. Every change is a POST (CSRF) that calls one
service of :mod:`notifications.webhooks.services`, which audits it under the admin's name.
A new secret (registered, rotated) is shown once, in the answer to that POST, never
flashed or stored in the session.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from keelgate.errors import KeelgateError
from notifications.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from notifications.webhooks.events import EVENT_TYPES, TEST_EVENT_TYPE
from notifications.webhooks.selectors import (
    display_url,
    webhook_delivery_in,
    webhook_endpoint_in,
    webhooks_overview,
)
from notifications.webhooks.services import (
    secret_grace,
    webhook_delivery_redeliver,
    webhook_endpoint_delete,
    webhook_endpoint_enable,
    webhook_endpoint_register,
    webhook_endpoint_update,
    webhook_secret_rotate,
    webhook_test_send,
)
from sitekit.console_errors import refusal_or_raise
from sitekit.errors import ForbiddenError, NotFoundError, WebhookUrlRefusedError
from sitekit.pages import console_page, flash_refusal
from tenants.models import Role
from tenants.selectors import admin_tenant_ids, memberships, require_admin_tenants

DELIVERY_EVENTS = (*EVENT_TYPES, TEST_EVENT_TYPE)
"""What the deliveries may be filtered by: every event type, and the admin's test messages."""


class RegisterForm(forms.Form):
    """A new endpoint: its tenant (one the admin administers), URL, events, arguments opt-in, label."""

    tenant = forms.ChoiceField()
    url = forms.CharField(max_length=2000, label="URL")
    events = forms.MultipleChoiceField(
        choices=[(name, name) for name in EVENT_TYPES], required=False, widget=forms.CheckboxSelectMultiple
    )
    include_arguments = forms.BooleanField(required=False)
    description = forms.CharField(max_length=200, required=False)

    def __init__(self, *args: Any, tenants: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["tenant"].choices = [(t, t) for t in tenants]  # type: ignore[attr-defined]


class EditForm(forms.Form):
    """What an endpoint's admin may change on the page: its events, arguments opt-in and label."""

    events = forms.MultipleChoiceField(
        choices=[(name, name) for name in EVENT_TYPES], required=False, widget=forms.CheckboxSelectMultiple
    )
    include_arguments = forms.BooleanField(required=False)
    description = forms.CharField(max_length=200, required=False)


def _endpoint(request: HttpRequest, pk: int) -> WebhookEndpoint:
    """Endpoint ``pk`` of one of the user's tenants (404 otherwise), if they are its admin (403)."""
    endpoint = webhook_endpoint_in(memberships(request), pk)
    if endpoint is None:
        raise NotFoundError()
    if endpoint.tenant.slug not in admin_tenant_ids(request):
        raise ForbiddenError(Role.ADMIN)
    return endpoint


def _delivery(request: HttpRequest, pk: int) -> WebhookDelivery:
    """Delivery ``pk`` to an endpoint of one of the user's tenants (404), if they are its admin (403)."""
    delivery = webhook_delivery_in(memberships(request), pk)
    if delivery is None:
        raise NotFoundError()
    if delivery.endpoint.tenant.slug not in admin_tenant_ids(request):
        raise ForbiddenError(Role.ADMIN)
    return delivery


def _actor(request: HttpRequest) -> str:
    return str(request.user.get_username())


def _back() -> HttpResponseRedirect:
    return HttpResponseRedirect(reverse("webhooks"), status=303)


def _page(request: HttpRequest, tenants: list[str], form: RegisterForm, status: int = 200) -> HttpResponse:
    state = request.GET.get("state", "")
    event = request.GET.get("event", "")
    state = state if state in DeliveryStatus.values else ""
    event = event if event in DELIVERY_EVENTS else ""
    context = {
        "tenants": webhooks_overview(tenants, status=state, event_type=event),
        "form": form,
        "states": DeliveryStatus.values,
        "events": DELIVERY_EVENTS,
        "state": state,
        "event": event,
        "grace_hours": round(secret_grace().total_seconds() / 3600, 1),
        "event_types": EVENT_TYPES,
    }
    return render(request, "notifications/webhooks.html", context, status=status)


@require_GET
@console_page
def webhooks(request: HttpRequest) -> HttpResponse:
    """The admin's tenants: endpoints with their actions, the register form, filtered deliveries."""
    tenants = require_admin_tenants(request)
    return _page(request, tenants, RegisterForm(tenants=tenants, initial={"tenant": tenants[0]}))


@require_POST
@console_page
def webhook_register(request: HttpRequest) -> HttpResponse:
    """Register an endpoint; the answer shows its secret once, or the form again (422) with why not."""
    tenants = require_admin_tenants(request)
    form = RegisterForm(request.POST, tenants=tenants)
    if form.is_valid():
        data = form.cleaned_data
        try:
            endpoint, secret = webhook_endpoint_register(
                tenant=memberships(request)[data["tenant"]].tenant,
                url=data["url"],
                actor=_actor(request),
                events=data["events"],
                include_arguments=data["include_arguments"],
                description=data["description"],
            )
        except WebhookUrlRefusedError as exc:
            form.add_error("url", refusal_or_raise(exc).text)
        else:
            return _secret(request, endpoint, secret, rotated=False)
    # A whole page, not a card: what the person must correct is 422, as the start form's.
    return _page(request, tenants, form, status=422)


def _secret(request: HttpRequest, endpoint: WebhookEndpoint, secret: str, *, rotated: bool) -> HttpResponse:
    context = {
        "endpoint": endpoint,
        "url": display_url(endpoint.url),
        "secret": secret,
        "rotated": rotated,
        "previous_until": endpoint.previous_secret_until if rotated and endpoint.previous_secret else None,
    }
    return render(request, "notifications/webhook_secret.html", context)


@require_POST
@console_page
def webhook_rotate(request: HttpRequest, pk: int) -> HttpResponse:
    """A new signing secret, shown once; the old one keeps signing for the grace period."""
    endpoint, secret = webhook_secret_rotate(endpoint=_endpoint(request, pk), actor=_actor(request))
    return _secret(request, endpoint, secret, rotated=True)


@require_POST
@console_page
def webhook_edit(request: HttpRequest, pk: int) -> HttpResponse:
    """Change the endpoint's events, arguments opt-in and label; back to the page."""
    endpoint = _endpoint(request, pk)
    form = EditForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Webhook #{pk} not changed: choose events from the list.")
        return _back()
    webhook_endpoint_update(
        endpoint=endpoint,
        actor=_actor(request),
        events=form.cleaned_data["events"],
        include_arguments=form.cleaned_data["include_arguments"],
        description=form.cleaned_data["description"],
    )
    messages.success(request, f"Webhook #{pk} saved.")
    return _back()


@require_POST
@console_page
def webhook_enable(request: HttpRequest, pk: int) -> HttpResponse:
    """Enable (``enabled=1``) or disable the endpoint; back to the page."""
    enabled = request.POST.get("enabled") == "1"
    endpoint = webhook_endpoint_enable(
        endpoint=_endpoint(request, pk), actor=_actor(request), enabled=enabled
    )
    said = "enabled: due messages go out on the next pass" if enabled else "disabled: its messages wait"
    messages.success(request, f"Webhook #{endpoint.pk} {said}.")
    return _back()


@require_POST
@console_page
def webhook_delete(request: HttpRequest, pk: int) -> HttpResponse:
    """Delete the endpoint and its deliveries, once the box confirming it is ticked."""
    endpoint = _endpoint(request, pk)
    if request.POST.get("confirm") != "yes":
        messages.warning(request, "Nothing was deleted: tick the box to confirm that it cannot be undone.")
        return _back()
    webhook_endpoint_delete(endpoint=endpoint, actor=_actor(request))
    messages.success(request, f"Webhook #{pk} deleted, with its deliveries.")
    return _back()


@require_POST
@console_page
def webhook_test(request: HttpRequest, pk: int) -> HttpResponse:
    """Queue a test message to the endpoint; the deliverer sends it on its next pass."""
    delivery = webhook_test_send(endpoint=_endpoint(request, pk), actor=_actor(request))
    messages.success(request, f"Test message {delivery.webhook_id} queued: it goes out on the next pass.")
    return _back()


@require_POST
@console_page
def webhook_redeliver(request: HttpRequest, pk: int) -> HttpResponse:
    """Send a finished message again, same id and body; back to the page."""
    try:
        delivery = webhook_delivery_redeliver(delivery=_delivery(request, pk), actor=_actor(request))
    except KeelgateError as exc:
        flash_refusal(request, exc)
        return _back()
    messages.success(request, f"{delivery.webhook_id} queued again: it goes out on the next pass.")
    return _back()


@require_GET
@console_page
def webhook_delivery(request: HttpRequest, pk: int) -> HttpResponse:
    """One message: its payload, and each attempt with the receiver's status and answer."""
    delivery = _delivery(request, pk)
    context = {"delivery": delivery, "url": display_url(delivery.endpoint.url)}
    return render(request, "notifications/webhook_delivery.html", context)
