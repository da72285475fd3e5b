"""The webhooks page: attempts and failures visible, everything escaped, another tenant's endpoints absent."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from audit.wiring import audit_log
from notifications.models import WebhookAttempt, WebhookDelivery
from notifications.webhooks import deliver_due
from notifications.webhooks.services import webhook_endpoint_register
from tenants.models import Membership, Role, Tenant
from tests.site.notifications._receiver import fail_every_other

XSS = "<script>window.__xss=1</script>"


def login(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_page_shows_attempts_status_codes_and_failures_of_my_tenant_only(operator, receivers):
    """op sees t1's endpoint, each attempt's HTTP status and error; t2's endpoint and deliveries, absent."""
    t2 = Tenant.objects.create(slug="t2")
    eve = get_user_model().objects.create_user("eve", password="pw-eve-123456")
    Membership.objects.create(user=eve, tenant=t2, role=Role.ADMIN)

    receiver = receivers(policy=fail_every_other)
    mine, secret = webhook_endpoint_register(
        tenant=Tenant.objects.get(slug="t1"), url=receiver.url, actor="op", description=f"ops {XSS}"
    )
    receiver.secret = secret
    theirs, their_secret = webhook_endpoint_register(
        tenant=t2, url="http://127.0.0.1:9/t2-only-path", actor="eve", description="eve-private-hook"
    )
    audit_log().append(
        "t1",
        actor="keelgate:reminders",
        kind="approval.expiring",
        body={"run_id": "r-1", "action_id": "1-2", "tool": "place_order", "expires_at": "2030-01-01"},
    )
    audit_log().append(
        "t2",
        actor="keelgate:reminders",
        kind="approval.expiring",
        body={"run_id": "r-2", "action_id": "1-2", "tool": "place_order", "expires_at": "2030-01-01"},
    )
    deliver_due()  # t1: 500 from the receiver; t2: connection refused on port 9
    WebhookDelivery.objects.update(next_attempt_at=timezone.now())
    deliver_due()  # t1: 200
    WebhookAttempt.objects.filter(delivery__endpoint=theirs).update(error="eve-secret-error")
    delivery = WebhookDelivery.objects.get(endpoint=mine)
    assert (delivery.status, delivery.attempts) == ("delivered", 2)
    WebhookAttempt.objects.filter(delivery=delivery, number=1).update(error=f"boom {XSS}")

    page = login(operator).get("/webhooks/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "msg_t1_" in html and "HTTP 500" in html and "HTTP 200" in html and "delivered" in html
    assert receiver.url.partition("?")[0] in html.replace("<wbr>", "") and "q-secret" not in html
    assert secret not in html
    assert XSS not in html and "&lt;script&gt;window.__xss=1&lt;/script&gt;" in html
    for leak in ("t2-only-path", "eve-private-hook", "msg_t2_", "eve-secret-error", their_secret):
        assert leak not in html
    assert page.headers["Content-Security-Policy"].startswith("default-src 'self'")

    theirs_page = login(eve).get("/webhooks/").content.decode()
    assert "t2-only-path" in theirs_page.replace("<wbr>", "") and "connection refused" in theirs_page
    assert "msg_t1_" not in theirs_page and "ops " not in theirs_page


def test_the_page_needs_a_login_and_is_linked_from_the_nav(operator):
    """Anonymous: sent to log in. Logged in: the nav links to it."""
    response = Client().get("/webhooks/")
    assert response.status_code == 302 and "/login/" in response["Location"]
    inbox = login(operator).get("/").content.decode()
    assert 'href="/webhooks/"' in inbox


def test_an_unfinished_attempt_says_the_deliverer_stopped(operator):
    """A claim whose deliverer died shows as an unfinished attempt, not as a success or an error."""
    endpoint, _ = webhook_endpoint_register(
        tenant=Tenant.objects.get(slug="t1"), url="http://127.0.0.1:9/", actor="op"
    )
    now = timezone.now()
    delivery = WebhookDelivery.objects.create(
        endpoint=endpoint,
        tenant_id="t1",
        seq=99,
        event_type="run.finished",
        webhook_id="msg_t1_99",
        payload="{}",
        status="delivering",
        attempts=1,
        next_attempt_at=now,
        lease_until=now,
    )
    WebhookAttempt.objects.create(delivery=delivery, number=1, started_at=now)
    html = login(operator).get("/webhooks/").content.decode()
    assert "unfinished (the deliverer stopped)" in html and "delivering" in html
