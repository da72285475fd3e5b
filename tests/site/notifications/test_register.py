"""Registering: ``keelgate_webhook`` prints the secret once, last; the admin shows it once, never lists it."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from audit.models import AuditEvent
from notifications.models import ChainCursor, WebhookEndpoint
from notifications.webhooks.services import webhook_endpoint_register
from tenants.models import Tenant


def run_command(*args: str) -> list[str]:
    out = io.StringIO()
    call_command("keelgate_webhook", *args, stdout=out)
    return out.getvalue().splitlines()


def test_the_command_registers_and_prints_the_secret_alone_on_the_last_line(operator):
    """The last line is the endpoint's whsec_ secret; the chain records the host, not the URL or secret."""
    lines = run_command(
        "--tenant",
        "t1",
        "--url",
        "http://127.0.0.1:9/hook?token=abc",
        "--events",
        "approval.requested",
        "run.finished",
    )
    endpoint = WebhookEndpoint.objects.get()
    assert lines[-1] == endpoint.secret and lines[-1].startswith("whsec_")
    assert all(endpoint.secret not in line for line in lines[:-1])
    assert (endpoint.tenant.slug, endpoint.url, endpoint.include_arguments) == (
        "t1",
        "http://127.0.0.1:9/hook?token=abc",
        False,
    )
    assert endpoint.events == ["approval.requested", "run.finished"]
    event = AuditEvent.objects.filter(tenant_id="t1", kind="webhook.registered").get()
    body = json.loads(event.body)
    assert body["host"] == "127.0.0.1" and body["endpoint_id"] == endpoint.pk
    assert "abc" not in event.body and endpoint.secret not in event.body
    assert ChainCursor.objects.get(channel="webhooks", subscriber=str(endpoint.pk)).seq == event.seq - 1


def test_the_command_takes_the_arguments_opt_in(operator):
    """``--include-arguments`` is the tenant's opt-in; without ``--events`` every event is sent."""
    lines = run_command("--tenant", "t1", "--url", "http://127.0.0.1:9/", "--include-arguments")
    endpoint = WebhookEndpoint.objects.get()
    assert endpoint.include_arguments and endpoint.events == [] and lines[-1] == endpoint.secret


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://10.0.0.1/hook", "webhook_url_refused: a private address 10.0.0.1 is not allowed"),
        (
            "http://169.254.169.254/",
            "webhook_url_refused: a link-local address 169.254.169.254 is not allowed",
        ),
        ("file:///etc/passwd", "webhook_url_refused: only http and https URLs are allowed"),
        ("http://[::1]/", "webhook_url_refused: a loopback address ::1 is not allowed"),
    ],
)
def test_the_command_refuses_ssrf_targets_with_a_clear_error(operator, url, message):
    """A refused URL is a CommandError naming the reason; nothing is registered."""
    with pytest.raises(CommandError) as refused:
        run_command("--tenant", "t1", "--url", url)
    assert str(refused.value) == message
    assert not WebhookEndpoint.objects.exists()


def test_the_command_refuses_an_unknown_tenant_or_event(operator):
    """A tenant that does not exist, or an event name that is not one, registers nothing."""
    with pytest.raises(CommandError, match="no tenant 'nope'"):
        run_command("--tenant", "nope", "--url", "http://127.0.0.1:9/")
    with pytest.raises(CommandError):
        run_command("--tenant", "t1", "--url", "http://127.0.0.1:9/", "--events", "run.exploded")
    assert not WebhookEndpoint.objects.exists()


@pytest.fixture
def admin_client(operator):
    user = get_user_model().objects.create_superuser("root", password="pw-root-123456")
    client = Client()
    client.force_login(user)
    return client


def test_the_admin_adds_an_endpoint_and_shows_its_secret_once(admin_client):
    """Adding in the admin registers through the service: a secret shown once, a cursor, an audit event."""
    tenant = Tenant.objects.get(slug="t1")
    response = admin_client.post(
        "/admin/notifications/webhookendpoint/add/",
        {
            "tenant": tenant.pk,
            "url": "http://127.0.0.1:9/in?token=tok",
            "events": ["run.finished"],
            "enabled": "on",
        },
        follow=True,
    )
    endpoint = WebhookEndpoint.objects.get()
    assert endpoint.secret in response.content.decode()
    assert ChainCursor.objects.filter(channel="webhooks", subscriber=str(endpoint.pk)).exists()
    assert AuditEvent.objects.filter(tenant_id="t1", kind="webhook.registered", actor="root").exists()
    listing = admin_client.get("/admin/notifications/webhookendpoint/").content.decode()
    assert endpoint.secret not in listing and "token=tok" not in listing and "127.0.0.1:9/in" in listing
    change = admin_client.get(f"/admin/notifications/webhookendpoint/{endpoint.pk}/change/").content.decode()
    assert endpoint.secret not in change


def test_the_admin_refuses_a_private_url(admin_client):
    """The admin form runs the same SSRF check: a 10.x URL is a form error, not an endpoint."""
    tenant = Tenant.objects.get(slug="t1")
    response = admin_client.post(
        "/admin/notifications/webhookendpoint/add/",
        {"tenant": tenant.pk, "url": "http://10.9.8.7/x", "enabled": "on"},
    )
    assert (
        response.status_code == 200
        and "a private address 10.9.8.7 is not allowed" in response.content.decode()
    )
    assert not WebhookEndpoint.objects.exists()


def test_deliveries_are_read_only_in_the_admin(admin_client):
    """Nobody edits or deletes a delivery record by hand; it can be looked at."""
    endpoint, _ = webhook_endpoint_register(
        tenant=Tenant.objects.get(slug="t1"), url="http://127.0.0.1:9/", actor="test"
    )
    from notifications.models import WebhookDelivery

    delivery = WebhookDelivery.objects.create(
        endpoint=endpoint,
        tenant_id="t1",
        seq=1,
        event_type="run.finished",
        webhook_id="msg_t1_1",
        payload="{}",
        next_attempt_at=endpoint.created_at,
    )
    assert admin_client.get("/admin/notifications/webhookdelivery/").status_code == 200
    assert admin_client.get(f"/admin/notifications/webhookdelivery/{delivery.pk}/change/").status_code == 200
    assert admin_client.get("/admin/notifications/webhookdelivery/add/").status_code == 403
    response = admin_client.post(
        f"/admin/notifications/webhookdelivery/{delivery.pk}/delete/", {"post": "yes"}
    )
    assert response.status_code == 403 and WebhookDelivery.objects.filter(pk=delivery.pk).exists()
