"""Writes for webhook endpoints: register one (its secret shown once), audited in its tenant's chain."""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from django.db import transaction

from audit.wiring import audit_log
from notifications.channel import Subscription
from notifications.cursors import cursor_open
from notifications.models import WebhookEndpoint
from notifications.webhooks.events import EVENT_TYPES
from notifications.webhooks.signing import new_secret
from notifications.webhooks.targets import check_url
from tenants.models import Tenant


def webhook_events_clean(events: Iterable[str]) -> list[str]:
    """The event filter, each name checked; ValueError names the first unknown one."""
    chosen = sorted(set(events))
    for name in chosen:
        if name not in EVENT_TYPES:
            raise ValueError(f"unknown webhook event {name!r}; known: {', '.join(EVENT_TYPES)}")
    return chosen


def webhook_endpoint_register(
    *,
    tenant: Tenant,
    url: str,
    actor: str,
    events: Iterable[str] = (),
    include_arguments: bool = False,
    description: str = "",
) -> tuple[WebhookEndpoint, str]:
    """Register a receiver for ``tenant``; return it and its ``whsec_`` secret (shown once).

    The URL is refused (WebhookUrlRefusedError) unless it is http(s) and every address
    its host resolves to is allowed. The receiver hears of events from now on, not the
    tenant's past. The chain records who registered which host, never the whole URL (a
    query may hold the receiver's token) or the secret.
    """
    url = url.strip()
    check_url(url)
    chosen = webhook_events_clean(events)
    secret = new_secret()
    with transaction.atomic():
        endpoint = WebhookEndpoint.objects.create(
            tenant=tenant,
            url=url,
            secret=secret,
            events=chosen,
            include_arguments=include_arguments,
            description=description[:200],
        )
        # At the chain's head: the receiver hears of events from now on, not the tenant's past.
        cursor = cursor_open("webhooks", Subscription(str(endpoint.pk), tenant.slug, from_head=True))
        audit_log().append(
            tenant.slug,
            actor=actor,
            kind="webhook.registered",
            body={
                "endpoint_id": endpoint.pk,
                "host": urlsplit(url).hostname or "",
                "events": chosen,
                "include_arguments": include_arguments,
                "from_seq": cursor.seq,
            },
        )
    return endpoint, secret
