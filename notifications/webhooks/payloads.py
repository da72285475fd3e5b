"""What a webhook message is: its id, its JSON body, and the console link in it.

The message id is ``msg_<tenant>_<seq>`` and the body is fixed when the delivery is
recorded: every retry, in any process, sends the same id and the same bytes, and a
receiver that deduplicates on ``webhook-id`` sees each event once.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.urls import reverse

from notifications.models import WebhookEndpoint
from notifications.webhooks.events import WebhookEvent
from notifications.webhooks.selectors import action_arguments


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
