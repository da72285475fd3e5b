"""Reads for webhooks: a call's arguments (for tenants that opted in) and the console page."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.db.models import Count, Prefetch, Q

from notifications.models import DeliveryStatus, WebhookAttempt, WebhookDelivery, WebhookEndpoint
from runs.models import Run
from runs.selectors import run_state

RECENT_DELIVERIES = 50
"""Deliveries the console lists per tenant, newest first."""


def action_arguments(tenant_id: str, run_id: str, action_id: str) -> Any:
    """The arguments of one planned call as JSON, or None if the run has no such action.

    Read from the run's newest checkpoint, not the inbox: the loop writes every planned
    call ahead into a checkpoint before the gateway sees it, whereas the inbox row may
    commit after the audit event that announced it.
    """
    run = Run.objects.filter(tenant_id=tenant_id, run_id=run_id).first()
    state = run_state(run) if run is not None else None
    action = state.action(action_id) if state is not None else None
    return None if action is None else dict(action.arguments)


def display_url(url: str) -> str:
    """The URL without its query and fragment: a receiver's token in the query is not shown."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


@dataclass(frozen=True)
class EndpointSummary:
    """One endpoint as the console shows it: never its secret, never its URL's query."""

    endpoint: WebhookEndpoint
    url: str
    counts: dict[str, int]

    @property
    def url_parts(self) -> list[str]:
        """The URL cut after each ``/``: the page offers a line break there, never inside a word."""
        parts = self.url.split("/")
        return [part + "/" for part in parts[:-1]] + [parts[-1]]


@dataclass(frozen=True)
class TenantWebhooks:
    """One tenant's endpoints and its newest deliveries with their attempts."""

    tenant_id: str
    endpoints: list[EndpointSummary]
    deliveries: list[WebhookDelivery]


def webhooks_overview(
    tenant_ids: Iterable[str], *, limit: int = RECENT_DELIVERIES, status: str = "", event_type: str = ""
) -> list[TenantWebhooks]:
    """For each of the caller's tenants (and no other): endpoints, counts, recent deliveries.

    ``status`` and ``event_type``, when given, keep only the deliveries in that state or of that type.
    """
    ids = sorted(set(tenant_ids))
    by_status = {
        status: Count("deliveries", filter=Q(deliveries__status=status)) for status in DeliveryStatus.values
    }
    endpoints = (
        WebhookEndpoint.objects.filter(tenant__slug__in=ids)
        .select_related("tenant")
        .annotate(**by_status)
        .order_by("tenant__slug", "id")
    )
    summaries: dict[str, list[EndpointSummary]] = {t: [] for t in ids}
    for endpoint in endpoints:
        counts = {status: int(getattr(endpoint, status)) for status in DeliveryStatus.values}
        summaries[endpoint.tenant.slug].append(EndpointSummary(endpoint, display_url(endpoint.url), counts))
    attempts = Prefetch("attempt_log", queryset=WebhookAttempt.objects.order_by("number"))
    overview = []
    for tenant_id in ids:
        rows = WebhookDelivery.objects.filter(tenant_id=tenant_id, endpoint__tenant__slug=tenant_id)
        if status:
            rows = rows.filter(status=status)
        if event_type:
            rows = rows.filter(event_type=event_type)
        deliveries = list(
            rows.select_related("endpoint").prefetch_related(attempts).order_by("-created_at", "-id")[:limit]
        )
        overview.append(TenantWebhooks(tenant_id, summaries[tenant_id], deliveries))
    return overview


def webhook_endpoint_in(tenant_ids: Iterable[str], pk: int) -> WebhookEndpoint | None:
    """Endpoint ``pk`` if it belongs to one of ``tenant_ids``; None for any other (absent or not theirs)."""
    return (
        WebhookEndpoint.objects.select_related("tenant")
        .filter(pk=pk, tenant__slug__in=list(tenant_ids))
        .first()
    )


def webhook_delivery_in(tenant_ids: Iterable[str], pk: int) -> WebhookDelivery | None:
    """Delivery ``pk`` with its attempts, if its endpoint belongs to one of ``tenant_ids``; else None."""
    attempts = Prefetch("attempt_log", queryset=WebhookAttempt.objects.order_by("number"))
    return (
        WebhookDelivery.objects.select_related("endpoint__tenant")
        .prefetch_related(attempts)
        .filter(pk=pk, endpoint__tenant__slug__in=list(tenant_ids))
        .first()
    )
