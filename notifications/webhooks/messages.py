"""One webhook message: its id, its body, and its signed POST (with both secrets during a rotation).

Shared by the channel, which makes a message of each audit event an endpoint wants, and
by the services, which make a test message and send a finished one again.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from notifications.models import WebhookDelivery, WebhookEndpoint
from notifications.webhooks.events import WebhookEvent
from notifications.webhooks.selectors import action_arguments
from notifications.webhooks.signing import signed_headers
from notifications.webhooks.targets import check_url
from notifications.webhooks.transport import Response, post
from sitekit.errors import WebhookUrlRefusedError


def timeout_seconds() -> float:
    """How long one request may take in all."""
    return float(getattr(settings, "KEELGATE_WEBHOOK_TIMEOUT_SECONDS", 10.0))


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


def signing_keys(endpoint: WebhookEndpoint, now: datetime | None = None) -> list[str]:
    """The secrets a message is signed with now: the current one, and the previous one in its grace."""
    now = now or timezone.now()
    keys = [endpoint.secret]
    until = endpoint.previous_secret_until
    if endpoint.previous_secret and until is not None and now < until:
        keys.append(endpoint.previous_secret)
    return keys


def delivery_send(delivery: WebhookDelivery) -> Response:
    """POST the delivery, signed now, to its endpoint; the address is checked first (SSRF)."""
    started = time.monotonic()
    try:
        target, addresses = check_url(delivery.endpoint.url)
    except WebhookUrlRefusedError as exc:
        return Response(None, f"refused: {exc.detail}", int((time.monotonic() - started) * 1000))
    body = delivery.payload.encode()
    headers = signed_headers(signing_keys(delivery.endpoint), delivery.webhook_id, int(time.time()), body)
    return post(target, addresses[0], body, headers, timeout_seconds())
