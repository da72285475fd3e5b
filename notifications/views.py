"""Console pages of notifications: the webhooks of the operator's tenants, and how delivery goes."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from notifications.webhooks.selectors import webhooks_overview
from sitekit.pages import console_page
from tenants.selectors import tenant_ids

# -- webhooks ---------------------------------------------------------------------------


@require_GET
@console_page
def webhooks(request: HttpRequest) -> HttpResponse:
    """Each of the user's tenants: its endpoints, then recent deliveries with every attempt."""
    return render(request, "notifications/webhooks.html", {"tenants": webhooks_overview(tenant_ids(request))})
