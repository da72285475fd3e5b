"""Writes for webhook endpoints: what an admin does to them, each change audited in its tenant's chain.

The console, ``manage.py keelgate_webhook`` and Django's admin all call these. Each
change is one transaction with its audit event, which names the admin (``actor``) and
the endpoint's host, never its URL (a query may hold the receiver's token) or a secret.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit.wiring import audit_log
from keelgate.audit import AuditEvent, format_at
from notifications.channel import Subscription
from notifications.cursors import cursor_open
from notifications.models import ChainCursor, DeliveryStatus, WebhookDelivery, WebhookEndpoint
from notifications.webhooks.events import EVENT_TYPES, TEST_EVENT_TYPE, WebhookEvent
from notifications.webhooks.messages import message_id, webhook_payload
from notifications.webhooks.signing import new_secret
from notifications.webhooks.targets import check_url
from sitekit.errors import WebhookDeliveryUnfinishedError
from tenants.models import Tenant

FINISHED = (DeliveryStatus.DELIVERED, DeliveryStatus.FAILED, DeliveryStatus.SKIPPED)
"""A delivery in one of these may be sent again; a due one goes anyway."""


def webhook_events_clean(events: Iterable[str]) -> list[str]:
    """The event filter, each name checked; ValueError names the first unknown one."""
    chosen = sorted(set(events))
    for name in chosen:
        if name not in EVENT_TYPES:
            raise ValueError(f"unknown webhook event {name!r}; known: {', '.join(EVENT_TYPES)}")
    return chosen


def secret_grace() -> timedelta:
    """``KEELGATE_WEBHOOK_SECRET_GRACE_SECONDS``: how long the old secret still signs after a rotation."""
    return timedelta(
        seconds=max(0.0, float(getattr(settings, "KEELGATE_WEBHOOK_SECRET_GRACE_SECONDS", 86400)))
    )


def _host(url: str) -> str:
    return urlsplit(url).hostname or ""


def _audit(endpoint: WebhookEndpoint, kind: str, *, actor: str, **body: object) -> AuditEvent:
    """Append ``kind`` about ``endpoint`` (its id and host) to its tenant's chain; the event as stored."""
    event = audit_log().append(
        endpoint.tenant.slug,
        actor=actor,
        kind=kind,
        body={"endpoint_id": endpoint.pk, "host": _host(endpoint.url), **body},
    )
    return event


def webhook_endpoint_register(
    *,
    tenant: Tenant,
    url: str,
    actor: str,
    events: Iterable[str] = (),
    include_arguments: bool = False,
    description: str = "",
    enabled: bool = True,
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
            enabled=enabled,
            description=description[:200],
        )
        # At the chain's head: the receiver hears of events from now on, not the tenant's past.
        cursor = cursor_open("webhooks", Subscription(str(endpoint.pk), tenant.slug, from_head=True))
        _audit(
            endpoint,
            "webhook.registered",
            actor=actor,
            events=chosen,
            include_arguments=include_arguments,
            from_seq=cursor.seq,
        )
    return endpoint, secret


def webhook_endpoint_update(
    *,
    endpoint: WebhookEndpoint,
    actor: str,
    url: str | None = None,
    events: Iterable[str] | None = None,
    include_arguments: bool | None = None,
    description: str | None = None,
) -> WebhookEndpoint:
    """Change what is given (a new URL passes the SSRF guard again); audited if anything changed."""
    changes: dict[str, object] = {}
    if url is not None and url.strip() != endpoint.url:
        check_url(url.strip())
        changes["url"] = url.strip()
    if events is not None and (chosen := webhook_events_clean(events)) != sorted(endpoint.events or []):
        changes["events"] = chosen
    if include_arguments is not None and include_arguments != endpoint.include_arguments:
        changes["include_arguments"] = include_arguments
    if description is not None and description[:200] != endpoint.description:
        changes["description"] = description[:200]
    if not changes:
        return endpoint
    with transaction.atomic():
        for name, value in changes.items():
            setattr(endpoint, name, value)
        endpoint.save(update_fields=list(changes))
        _audit(
            endpoint,
            "webhook.updated",
            actor=actor,
            changed=sorted(changes),
            events=list(endpoint.events or []),
            include_arguments=endpoint.include_arguments,
        )
    return endpoint


def webhook_endpoint_enable(*, endpoint: WebhookEndpoint, actor: str, enabled: bool) -> WebhookEndpoint:
    """Enable or disable the endpoint: disabled, nothing is sent and its messages wait (nothing is lost)."""
    if endpoint.enabled == enabled:
        return endpoint
    with transaction.atomic():
        endpoint.enabled = enabled
        endpoint.save(update_fields=["enabled"])
        if enabled:
            _audit(endpoint, "webhook.enabled", actor=actor)
        else:
            _audit(endpoint, "webhook.disabled", actor=actor)
    return endpoint


def webhook_endpoint_delete(*, endpoint: WebhookEndpoint, actor: str) -> None:
    """Delete the endpoint, its deliveries and its cursor; the chain keeps the event that says so."""
    with transaction.atomic():
        _audit(endpoint, "webhook.deleted", actor=actor, deliveries=endpoint.deliveries.count())
        ChainCursor.objects.filter(channel="webhooks", subscriber=str(endpoint.pk)).delete()
        endpoint.delete()


def webhook_secret_rotate(
    *, endpoint: WebhookEndpoint, actor: str, grace: timedelta | None = None
) -> tuple[WebhookEndpoint, str]:
    """A new signing secret (returned, shown once); the old one still signs for ``grace``.

    ``grace`` defaults to :func:`secret_grace`. Meanwhile every message carries both
    signatures, space-separated in ``webhook-signature``, as Standard Webhooks allows,
    so a receiver verifies with either secret while it switches. A rotation during a
    grace ends the older secret's: only the last two secrets are ever valid.
    """
    grace = secret_grace() if grace is None else max(grace, timedelta(0))
    secret = new_secret()
    until = timezone.now() + grace
    with transaction.atomic():
        endpoint = WebhookEndpoint.objects.select_for_update().get(pk=endpoint.pk)
        endpoint.previous_secret = endpoint.secret if grace else ""
        endpoint.previous_secret_until = until if grace else None
        endpoint.secret = secret
        endpoint.save(update_fields=["secret", "previous_secret", "previous_secret_until"])
        _audit(
            endpoint,
            "webhook.secret_rotated",
            actor=actor,
            grace_seconds=int(grace.total_seconds()),
            previous_valid_until=until.isoformat() if grace else None,
        )
    return endpoint, secret


def webhook_test_send(*, endpoint: WebhookEndpoint, actor: str) -> WebhookDelivery:
    """Queue a ``webhook.test`` message to the endpoint, whatever its filter; the deliverer sends it.

    Its audit event is its place in the chain: the message's id (``msg_<tenant>_<seq>``)
    is that event's, so it is never confused with another message.
    """
    with transaction.atomic():
        sent = _audit(endpoint, "webhook.test_sent", actor=actor)
        event = WebhookEvent(TEST_EVENT_TYPE, {"endpoint_id": endpoint.pk, "by": actor})
        return WebhookDelivery.objects.create(
            endpoint=endpoint,
            tenant_id=endpoint.tenant.slug,
            seq=sent.seq,
            event_type=TEST_EVENT_TYPE,
            webhook_id=message_id(endpoint.tenant.slug, sent.seq),
            payload=webhook_payload(endpoint, sent.seq, format_at(sent.at), event),
            next_attempt_at=timezone.now(),
        )


def webhook_delivery_redeliver(*, delivery: WebhookDelivery, actor: str) -> WebhookDelivery:
    """Send a finished message again, with its id and body unchanged (a receiver may deduplicate it).

    It is due at once, its attempts logged after the earlier ones; if it fails it is
    retried as far as the retry schedule still goes. WebhookDeliveryUnfinishedError if it
    is still due or being sent.
    """
    with transaction.atomic():
        sent_again = WebhookDelivery.objects.filter(pk=delivery.pk, status__in=FINISHED).update(
            status=DeliveryStatus.PENDING, next_attempt_at=timezone.now(), finished_at=None
        )
        if not sent_again:
            raise WebhookDeliveryUnfinishedError(delivery.status)
        delivery.refresh_from_db()
        _audit(
            delivery.endpoint,
            "webhook.redelivered",
            actor=actor,
            message_id=delivery.webhook_id,
            event_type=delivery.event_type,
            attempts=delivery.attempts,
        )
    return delivery
