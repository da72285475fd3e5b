"""The same changes from ``manage.py keelgate_webhook`` and Django's admin: the same services, audited."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from audit.models import AuditEvent
from notifications.models import WebhookDelivery, WebhookEndpoint
from notifications.webhooks.services import webhook_endpoint_register, webhook_test_send
from tenants.models import Tenant


def run_command(*args: str) -> list[str]:
    out = io.StringIO()
    call_command("keelgate_webhook", *args, stdout=out)
    return out.getvalue().splitlines()


def kinds() -> list[tuple[str, str]]:
    return [(e.kind, e.actor) for e in AuditEvent.objects.filter(kind__startswith="webhook.").order_by("id")]


@pytest.fixture
def endpoint(operator):
    return webhook_endpoint_register(
        tenant=Tenant.objects.get(slug="t1"), url="http://127.0.0.1:9/h", actor="op"
    )[0]


def test_the_command_rotates_disables_enables_tests_redelivers_and_deletes(endpoint):
    """Each action by id, audited under --actor; a rotation prints the new secret alone, last."""
    pk = str(endpoint.pk)
    lines = run_command("--tenant", "t1", "--rotate", pk, "--grace-seconds", "60", "--actor", "ops-alice")
    endpoint.refresh_from_db()
    assert lines[-1] == endpoint.secret and all(endpoint.secret not in line for line in lines[:-1])
    assert endpoint.previous_secret and endpoint.previous_secret not in "\n".join(lines)
    run_command("--tenant", "t1", "--disable", pk, "--actor", "ops-alice")
    run_command("--tenant", "t1", "--enable", pk, "--actor", "ops-alice")
    run_command("--tenant", "t1", "--test", pk, "--actor", "ops-alice")
    delivery = WebhookDelivery.objects.get()
    WebhookDelivery.objects.filter(pk=delivery.pk).update(status="failed")
    run_command("--tenant", "t1", "--redeliver", str(delivery.pk), "--actor", "ops-alice")
    run_command("--tenant", "t1", "--delete", pk)
    assert kinds() == [
        ("webhook.registered", "op"),
        ("webhook.secret_rotated", "ops-alice"),
        ("webhook.disabled", "ops-alice"),
        ("webhook.enabled", "ops-alice"),
        ("webhook.test_sent", "ops-alice"),
        ("webhook.redelivered", "ops-alice"),
        ("webhook.deleted", "manage.py keelgate_webhook"),
    ]


def test_the_command_finds_endpoints_in_its_tenant_only_and_refuses_an_unfinished_redelivery(endpoint):
    """Another tenant's id is 'no webhook'; a pending message is the 409's code and words."""
    Tenant.objects.create(slug="t2")
    with pytest.raises(CommandError, match=f"no webhook {endpoint.pk} in t2"):
        run_command("--tenant", "t2", "--rotate", str(endpoint.pk))
    delivery = webhook_test_send(endpoint=endpoint, actor="op")
    with pytest.raises(CommandError, match="webhook_delivery_unfinished"):
        run_command("--tenant", "t1", "--redeliver", str(delivery.pk))
    with pytest.raises(CommandError, match=f"no webhook delivery {delivery.pk} in t2"):
        run_command("--tenant", "t2", "--redeliver", str(delivery.pk))
    assert kinds() == [("webhook.registered", "op"), ("webhook.test_sent", "op")]


@pytest.fixture
def admin_client(operator):
    user = get_user_model().objects.create_superuser("root", password="pw-root-123456")
    client = Client()
    client.force_login(user)
    return client


def test_the_django_admin_changes_rotates_tests_redelivers_and_deletes_through_the_services(
    endpoint, admin_client
):
    """A change, the actions and a delete in Django's admin: each an event naming ``root``."""
    base = "/admin/notifications/webhookendpoint/"
    changed = admin_client.post(
        f"{base}{endpoint.pk}/change/",
        {"url": endpoint.url, "events": ["run.finished"], "description": "pager"},  # enabled unticked
    )
    assert changed.status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.events == ["run.finished"] and not endpoint.enabled
    rotated = admin_client.post(
        base, {"action": "rotate_secret", "_selected_action": [endpoint.pk]}, follow=True
    ).content.decode()
    endpoint.refresh_from_db()
    assert endpoint.secret in rotated
    admin_client.post(base, {"action": "send_test", "_selected_action": [endpoint.pk]})
    delivery = WebhookDelivery.objects.get()
    WebhookDelivery.objects.filter(pk=delivery.pk).update(status="delivered")
    admin_client.post(
        "/admin/notifications/webhookdelivery/", {"action": "redeliver", "_selected_action": [delivery.pk]}
    )
    assert WebhookDelivery.objects.get().status == "pending"
    admin_client.post(f"{base}{endpoint.pk}/delete/", {"post": "yes"})
    assert not WebhookEndpoint.objects.exists()
    assert kinds() == [
        ("webhook.registered", "op"),
        ("webhook.updated", "root"),
        ("webhook.disabled", "root"),
        ("webhook.secret_rotated", "root"),
        ("webhook.test_sent", "root"),
        ("webhook.redelivered", "root"),
        ("webhook.deleted", "root"),
    ]
