"""The audit chain as the webhooks' outbox: each endpoint's cursor, and the deliveries it leaves.

Every state change writes its audit event in the same transaction, so the chain holds
exactly what committed. A scan reads an endpoint's tenant chain past its cursor and, in
one transaction, records a :class:`~notifications.models.WebhookDelivery` for each
event the endpoint wants and moves the cursor past what it read. If the process dies
before the commit, nothing moved and the next scan reads the same events again; a
delivery is unique per (endpoint, event), so two scanners at once record it once.

The message id is ``msg_<tenant>_<seq>`` and the body is fixed when the delivery is
recorded: every retry, in any process, sends the same id and the same bytes, and a
receiver that deduplicates on ``webhook-id`` sees each event once.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditEvent
from audit.selectors import audit_heads
from notifications.models import WebhookCursor, WebhookDelivery, WebhookEndpoint
from notifications.webhooks.events import WebhookEvent, webhook_event
from notifications.webhooks.selectors import action_arguments

log = logging.getLogger("keelgate.webhooks")

SCAN_BATCH = 500
"""Audit events read per endpoint per transaction."""
SCAN_BATCHES_PER_PASS = 20
"""A long backlog is read over several passes, so deliveries start meanwhile."""


def message_id(tenant_id: str, seq: int) -> str:
    """The Standard Webhooks message id of one audit event: the same on every retry."""
    return f"msg_{tenant_id}_{seq}"


def console_url(tenant_id: str, run_id: str | None) -> str:
    """The run's page in the console (the inbox if the event names no run)."""
    base = str(getattr(settings, "KEELGATE_CONSOLE_URL", "http://127.0.0.1:8000")).rstrip("/")
    path = reverse("run", args=[tenant_id, run_id]) if run_id else reverse("inbox")
    return base + path


def webhook_payload(endpoint: WebhookEndpoint, seq: int, at: str, event: WebhookEvent) -> str:
    """The JSON body of one message: ``type``, ``timestamp`` and ``data`` (Standard Webhooks)."""
    tenant_id = endpoint.tenant.slug
    data: dict[str, Any] = {
        "tenant": tenant_id,
        **event.data,
        "console_url": console_url(tenant_id, event.run_id),
        "audit_seq": seq,
    }
    if endpoint.include_arguments and event.run_id and event.action_id:
        data["arguments"] = action_arguments(tenant_id, event.run_id, event.action_id)
        new_action_id = event.data.get("new_action_id")
        if isinstance(new_action_id, str):
            data["edited_arguments"] = action_arguments(tenant_id, event.run_id, new_action_id)
    return json.dumps({"type": event.type, "timestamp": at, "data": data}, separators=(",", ":"))


def webhook_scan() -> int:
    """Record the deliveries every enabled endpoint is owed; the number recorded."""
    made = 0
    for endpoint_id in WebhookEndpoint.objects.filter(enabled=True).values_list("pk", flat=True):
        try:
            for _ in range(SCAN_BATCHES_PER_PASS):
                recorded, more = scan_endpoint(endpoint_id)
                made += recorded
                if not more:
                    break
        except Exception:
            # Its cursor did not move (the transaction rolled back): the next pass tries
            # again, and the other endpoints must not wait for this one.
            log.exception("webhook scan failed endpoint=%s", endpoint_id)
    return made


def scan_endpoint(endpoint_id: int) -> tuple[int, bool]:
    """One batch of one endpoint: deliveries recorded, and whether more events wait."""
    with transaction.atomic():
        endpoint = WebhookEndpoint.objects.select_related("tenant").filter(pk=endpoint_id).first()
        if endpoint is None or not endpoint.enabled:
            return 0, False
        tenant_id = endpoint.tenant.slug
        cursor = _locked_cursor(endpoint)
        rows = list(
            AuditEvent.objects.filter(tenant_id=tenant_id, seq__gt=cursor.seq)
            .order_by("seq")
            .values_list("seq", "at", "actor", "kind", "body")[:SCAN_BATCH]
        )
        if not rows:
            return 0, False
        wanted = set(endpoint.events or [])
        now = timezone.now()
        deliveries = []
        for seq, at, actor, kind, body in rows:
            event = webhook_event(kind, actor, _body(body))
            if event is None or (wanted and event.type not in wanted):
                continue
            deliveries.append(
                WebhookDelivery(
                    endpoint=endpoint,
                    tenant_id=tenant_id,
                    seq=seq,
                    event_type=event.type,
                    webhook_id=message_id(tenant_id, seq),
                    payload=webhook_payload(endpoint, seq, at, event),
                    next_attempt_at=now,
                )
            )
        WebhookDelivery.objects.bulk_create(deliveries, ignore_conflicts=True)
        last = rows[-1][0]
        WebhookCursor.objects.filter(pk=endpoint.pk, seq__lt=last).update(seq=last, updated_at=now)
    return len(deliveries), len(rows) == SCAN_BATCH


def cursor_start(endpoint: WebhookEndpoint) -> WebhookCursor:
    """The endpoint's cursor at the tenant's head: a new receiver hears what happens from now on."""
    seq = audit_heads([endpoint.tenant.slug])[endpoint.tenant.slug]
    cursor, _ = WebhookCursor.objects.get_or_create(endpoint=endpoint, defaults={"seq": seq})
    return cursor


def _locked_cursor(endpoint: WebhookEndpoint) -> WebhookCursor:
    """The cursor, locked until the commit (PostgreSQL): two scanners of one endpoint take turns."""
    cursor = WebhookCursor.objects.select_for_update().filter(endpoint=endpoint).first()
    if cursor is None:
        cursor_start(endpoint)
        cursor = WebhookCursor.objects.select_for_update().get(endpoint=endpoint)
    return cursor


def _body(text: str) -> dict[str, Any]:
    try:
        body = json.loads(text)
    except ValueError:  # a damaged row is the verifier's business; skip it, do not stall
        return {}
    return body if isinstance(body, dict) else {}
