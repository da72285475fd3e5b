"""The console's Webhooks page as an admin's tool: admins only, CSRF, SSRF refusals, tenants apart.

Every action is a POST to a view that calls one service; the audit chain names the admin.
"""

from __future__ import annotations

import json
from html import escape as html_escape

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from audit.models import AuditEvent
from notifications.models import WebhookDelivery, WebhookEndpoint
from notifications.webhooks import deliver_due
from notifications.webhooks.services import webhook_endpoint_register, webhook_test_send
from tenants.models import Membership, Role, Tenant
from tests.site.notifications._receiver import always

XSS = "<script>window.__xss=1</script>"


def login(user, **kwargs) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


def person(name: str, tenant: str, role: str):
    user = get_user_model().objects.create_user(name, password=f"pw-{name}-123456")
    Membership.objects.create(user=user, tenant=Tenant.objects.get_or_create(slug=tenant)[0], role=role)
    return user


@pytest.fixture
def endpoint(operator, receivers):
    receiver = receivers()
    endpoint, secret = webhook_endpoint_register(
        tenant=Tenant.objects.get(slug="t1"), url=receiver.url, actor="op", description="t1-ops-desk"
    )
    receiver.secret = secret
    endpoint.receiver = receiver
    return endpoint


def kinds() -> list[tuple[str, str]]:
    return [(e.kind, e.actor) for e in AuditEvent.objects.filter(kind__startswith="webhook.").order_by("id")]


@pytest.mark.parametrize("role", [Role.VIEWER, Role.APPROVER, Role.RECONCILER])
def test_below_admin_the_page_and_every_action_are_403_and_the_nav_has_no_link(endpoint, role):
    """A viewer, approver or reconciler of t1: no link, 403 on the page and each action; nothing changes."""
    client = login(person("pat", "t1", role))
    assert 'href="/webhooks/"' not in client.get("/").content.decode()
    assert client.get("/webhooks/").status_code == 403
    delivery = webhook_test_send(endpoint=endpoint, actor="op")
    for url in (
        f"/webhooks/{endpoint.pk}/rotate/",
        f"/webhooks/{endpoint.pk}/edit/",
        f"/webhooks/{endpoint.pk}/enable/",
        f"/webhooks/{endpoint.pk}/delete/",
        f"/webhooks/{endpoint.pk}/test/",
        f"/webhooks/deliveries/{delivery.pk}/redeliver/",
    ):
        assert client.post(url, {"confirm": "yes", "enabled": "0"}).status_code == 403, url
    assert client.get(f"/webhooks/deliveries/{delivery.pk}/").status_code == 403
    assert (
        client.post("/webhooks/register/", {"tenant": "t1", "url": "http://127.0.0.1:9/"}).status_code == 403
    )
    assert WebhookEndpoint.objects.get().enabled and WebhookEndpoint.objects.count() == 1
    assert kinds() == [("webhook.registered", "op"), ("webhook.test_sent", "op")]


def test_another_tenants_endpoint_and_delivery_are_404(endpoint):
    """eve, admin of t2, guesses t1's ids: 404 everywhere, and t1's endpoint is untouched."""
    eve = login(person("eve", "t2", Role.ADMIN))
    delivery = webhook_test_send(endpoint=endpoint, actor="op")
    for url in (
        f"/webhooks/{endpoint.pk}/rotate/",
        f"/webhooks/{endpoint.pk}/edit/",
        f"/webhooks/{endpoint.pk}/enable/",
        f"/webhooks/{endpoint.pk}/delete/",
        f"/webhooks/{endpoint.pk}/test/",
        f"/webhooks/deliveries/{delivery.pk}/redeliver/",
    ):
        assert eve.post(url, {"confirm": "yes"}).status_code == 404, url
    assert eve.get(f"/webhooks/deliveries/{delivery.pk}/").status_code == 404
    page = eve.get("/webhooks/").content.decode()
    assert "t1-ops-desk" not in page and "msg_t1_" not in page and endpoint.url not in page
    # Registering in a tenant she does not administer is a form error, not an endpoint there.
    refused = eve.post("/webhooks/register/", {"tenant": "t1", "url": "http://127.0.0.1:9/"})
    assert refused.status_code == 422 and WebhookEndpoint.objects.count() == 1
    assert kinds() == [("webhook.registered", "op"), ("webhook.test_sent", "op")]


def test_a_post_without_the_csrf_token_is_refused(endpoint, operator):
    """With CSRF checks on, a forged rotate or register changes nothing."""
    client = login(operator, enforce_csrf_checks=True)
    assert client.post(f"/webhooks/{endpoint.pk}/rotate/").status_code == 403
    assert (
        client.post("/webhooks/register/", {"tenant": "t1", "url": "http://127.0.0.1:9/"}).status_code == 403
    )
    assert WebhookEndpoint.objects.count() == 1 and kinds() == [("webhook.registered", "op")]


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://10.0.0.1/hook", "a private address 10.0.0.1 is not allowed"),
        ("http://169.254.169.254/latest/meta-data", "a link-local address 169.254.169.254 is not allowed"),
        ("file:///etc/passwd", "only http and https URLs are allowed"),
        ("http://[::1]/", "a loopback address ::1 is not allowed"),
        ("http://user:pw@127.0.0.1:9/", "credentials in the URL are not allowed"),
    ],
)
def test_the_register_form_refuses_ssrf_targets_and_keeps_what_was_typed(operator, url, why):
    """422 with the reason on the URL field, the URL still in it; no endpoint, no event."""
    response = login(operator).post("/webhooks/register/", {"tenant": "t1", "url": url, "description": "x"})
    html = response.content.decode()
    assert response.status_code == 422 and f"That URL is refused: {why}." in html
    assert f'value="{html_escape(url)}"' in html
    assert not WebhookEndpoint.objects.exists() and kinds() == []


def test_registering_shows_the_secret_once_and_the_chain_names_the_admin(operator, receivers):
    """The answer holds the secret; the page after it does not; events chosen are kept."""
    client = login(operator)
    receiver = receivers()
    response = client.post(
        "/webhooks/register/",
        {"tenant": "t1", "url": receiver.url, "events": ["run.finished"], "description": f"pager {XSS}"},
    )
    endpoint = WebhookEndpoint.objects.get()
    html = response.content.decode()
    assert response.status_code == 200 and endpoint.secret in html and "shown only this once" in html
    assert "no-store" in response.headers["Cache-Control"]
    assert endpoint.events == ["run.finished"] and endpoint.description == f"pager {XSS}"
    page = client.get("/webhooks/").content.decode()
    assert endpoint.secret not in page and XSS not in page and "pager &lt;script&gt;" in page
    assert kinds() == [("webhook.registered", "op")]


def test_rotate_disable_enable_test_redeliver_delete_from_the_page(endpoint, operator):
    """Each button does its one thing, audited under the admin's name; the receiver verifies both secrets."""
    client = login(operator)
    old = endpoint.secret
    rotated = client.post(f"/webhooks/{endpoint.pk}/rotate/")
    endpoint.refresh_from_db()
    assert rotated.status_code == 200 and endpoint.secret in rotated.content.decode()
    assert old not in rotated.content.decode() and endpoint.previous_secret == old

    assert client.post(f"/webhooks/{endpoint.pk}/enable/", {"enabled": "0"}).status_code == 303
    endpoint.refresh_from_db()
    assert not endpoint.enabled
    assert client.post(f"/webhooks/{endpoint.pk}/enable/", {"enabled": "1"}).status_code == 303

    assert client.post(f"/webhooks/{endpoint.pk}/test/").status_code == 303
    deliver_due()
    receiver = endpoint.receiver
    assert receiver.wait_for(lambda: len(receiver.acknowledged()) == 1)
    assert receiver.requests[0].verified  # the new secret (the receiver's is the old one: both sign)
    delivery = WebhookDelivery.objects.get()
    assert client.post(f"/webhooks/deliveries/{delivery.pk}/redeliver/").status_code == 303
    deliver_due()
    assert receiver.wait_for(lambda: len(receiver.acknowledged()) == 2)

    kept = client.post(f"/webhooks/{endpoint.pk}/delete/")  # the box unticked: nothing deleted
    assert kept.status_code == 303 and WebhookEndpoint.objects.exists()
    assert client.post(f"/webhooks/{endpoint.pk}/delete/", {"confirm": "yes"}).status_code == 303
    assert not WebhookEndpoint.objects.exists()
    assert kinds() == [
        ("webhook.registered", "op"),
        ("webhook.secret_rotated", "op"),
        ("webhook.disabled", "op"),
        ("webhook.enabled", "op"),
        ("webhook.test_sent", "op"),
        ("webhook.redelivered", "op"),
        ("webhook.deleted", "op"),
    ]
    for event in AuditEvent.objects.filter(kind__startswith="webhook."):
        assert old not in event.body and endpoint.secret not in event.body and "q-secret" not in event.body


def test_editing_changes_events_opt_in_and_label_once_in_the_chain(endpoint, operator):
    """Save with two events and a label: the endpoint has them; an unknown event changes nothing."""
    client = login(operator)
    saved = client.post(
        f"/webhooks/{endpoint.pk}/edit/",
        {"events": ["run.finished", "outcome.unknown"], "description": "pager"},
    )
    assert saved.status_code == 303
    endpoint.refresh_from_db()
    assert endpoint.events == ["outcome.unknown", "run.finished"] and endpoint.description == "pager"
    assert not endpoint.include_arguments
    refused = client.post(f"/webhooks/{endpoint.pk}/edit/", {"events": ["run.exploded"]}, follow=True)
    assert "not changed" in refused.content.decode()
    endpoint.refresh_from_db()
    assert endpoint.events == ["outcome.unknown", "run.finished"]
    assert kinds() == [("webhook.registered", "op"), ("webhook.updated", "op")]
    viewer = login(person("val", "t1", Role.VIEWER))
    assert viewer.post(f"/webhooks/{endpoint.pk}/edit/", {"description": "x"}).status_code == 403


def test_redelivering_an_unfinished_message_flashes_why(endpoint, operator):
    """A pending message: back to the page with the 409's words, nothing audited."""
    client = login(operator)
    delivery = webhook_test_send(endpoint=endpoint, actor="op")
    response = client.post(f"/webhooks/deliveries/{delivery.pk}/redeliver/", follow=True)
    assert "Not sent again: the message is still due or being sent." in response.content.decode()
    assert ("webhook.redelivered", "op") not in kinds()


def test_an_attempts_payload_and_the_receivers_answer_are_shown_escaped(endpoint, operator):
    """The message page: the JSON payload, the status and the start of the answer, as text."""
    endpoint.receiver.policy = always(502)
    said = f"bad gateway {XSS}"
    endpoint.receiver.answer = said.encode() + b"y" * 3000
    delivery = webhook_test_send(endpoint=endpoint, actor="op")
    deliver_due()
    html = login(operator).get(f"/webhooks/deliveries/{delivery.pk}/").content.decode()
    assert "HTTP 502" in html and "bad gateway &lt;script&gt;" in html and XSS not in html
    assert "y" * (1000 - len(said)) + "</pre>" in html  # bounded: its first 1000 characters
    assert "&quot;type&quot;: &quot;webhook.test&quot;" in html
    assert endpoint.secret not in html and "q-secret" not in html


def test_deliveries_filter_by_state_and_by_event(endpoint, operator):
    """state=failed shows the failed one only; event=webhook.test shows tests only; junk means all."""
    from audit.wiring import audit_log

    failed = webhook_test_send(endpoint=endpoint, actor="op")
    WebhookDelivery.objects.filter(pk=failed.pk).update(status="failed")
    audit_log().append(
        "t1", actor="x", kind="approval.expiring", body={"run_id": "r", "action_id": "a", "tool": "t"}
    )
    deliver_due()
    ids = dict(WebhookDelivery.objects.values_list("event_type", "webhook_id"))
    client = login(operator)

    def shown(query: str) -> set[str]:
        html = client.get(f"/webhooks/{query}").content.decode()
        return {wid for wid in ids.values() if f"<code>{wid}</code>" in html}

    assert shown("") == set(ids.values())
    assert shown("?state=failed") == {failed.webhook_id}
    assert shown("?event=approval.expiring") == {ids["approval.expiring"]}
    assert shown("?state=failed&event=approval.expiring") == set()
    assert shown("?state=nonsense&event=%3Cscript%3E") == set(ids.values())


def test_an_admin_of_two_tenants_manages_both_and_a_viewer_of_a_third_sees_none_of_it(endpoint, operator):
    """op admin of t1 and t2, viewer of t3: t1 and t2 are on the page, t3 is not; t3's register is refused."""
    Membership.objects.create(user=operator, tenant=Tenant.objects.create(slug="t2"), role=Role.ADMIN)
    Membership.objects.create(user=operator, tenant=Tenant.objects.create(slug="t3"), role=Role.VIEWER)
    t3 = webhook_endpoint_register(
        tenant=Tenant.objects.get(slug="t3"), url="http://127.0.0.1:9/t3", actor="x"
    )[0]
    client = login(operator)
    page = client.get("/webhooks/").content.decode()
    assert 'id="wh-t1"' in page and 'id="wh-t2"' in page and 'id="wh-t3"' not in page
    assert client.post(f"/webhooks/{t3.pk}/rotate/").status_code == 403
    assert (
        client.post("/webhooks/register/", {"tenant": "t3", "url": "http://127.0.0.1:9/"}).status_code == 422
    )
    assert json.loads(AuditEvent.objects.filter(tenant_id="t3").get().body)["endpoint_id"] == t3.pk
