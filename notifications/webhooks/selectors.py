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


@dataclass(frozen=True)
class TenantWebhooks:
    """One tenant's endpoints and its newest deliveries with their attempts."""

    tenant_id: str
    endpoints: list[EndpointSummary]
    deliveries: list[WebhookDelivery]


def webhooks_overview(tenant_ids: Iterable[str], *, limit: int = RECENT_DELIVERIES) -> list[TenantWebhooks]:
    """For each of the caller's tenants (and no other): endpoints, counts, recent deliveries."""
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
        deliveries = list(
            WebhookDelivery.objects.filter(tenant_id=tenant_id, endpoint__tenant__slug=tenant_id)
            .select_related("endpoint")
            .prefetch_related(attempts)
            .order_by("-created_at", "-id")[:limit]
        )
        overview.append(TenantWebhooks(tenant_id, summaries[tenant_id], deliveries))
    return overview
